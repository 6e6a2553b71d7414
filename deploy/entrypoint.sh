#!/bin/sh
# The container's start: app.py on all interfaces, which anyone who reaches the port could use (the
# GPU, and the voice library's writes). app.py refuses to listen there without a token unless opened
# on purpose, e.g. behind a proxy that authenticates (VOXCPM_OPEN=1); an empty or blank token is no
# token. That rule lives in app.py alone: a copy of it here, reading the arguments in shell, once
# took `--token=` (compose's `--token ${TOKEN}` with TOKEN unset) for a token.
set -eu
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" app.py --host 0.0.0.0 --port "${PORT:-7860}" "$@"
