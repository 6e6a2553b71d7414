#!/bin/sh
# The README's install, run by deploy/Dockerfile and by .ci/run (in a clean virtual environment), so the
# image and CI cannot install differently. Torch comes from the environment first: the PyTorch image
# ships its CUDA build, CI installs the CPU build; requirements.txt's range (2.11-2.13) then leaves it
# alone, and `deps` fails if pip replaced it instead.
#   deploy/install.sh deps  [python]   requirements.txt (the Dockerfile runs this before copying the code)
#   deploy/install.sh check [python]   the app's packages import (after the code is there)
#   deploy/install.sh all   [python]   both (CI)
set -eu
step=${1:?usage: deploy/install.sh deps|check|all [python]}
python=${2:-python3}
cd "$(dirname "$0")/.."
torch_version() { "$python" -c 'from importlib.metadata import version; print(version("torch"))'; }

if [ "$step" = deps ] || [ "$step" = all ]; then
  before=$(torch_version)
  "$python" -m pip install -r requirements.txt
  after=$(torch_version)
  if [ "$before" != "$after" ]; then
    echo "install.sh: error: pip replaced torch $before with $after; requirements.txt's range must hold the base's torch." >&2
    exit 1
  fi
fi
if [ "$step" = check ] || [ "$step" = all ]; then
  # What app.py imports to serve, without a GPU or a model: a missing or broken package shows at
  # build time instead of at the first container start.
  "$python" -c 'import options, startup, ui, inference, torch; print("install.sh: the app imports, torch", torch.__version__)'
fi
