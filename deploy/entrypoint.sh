#!/bin/sh
# The container's start: app.py on all interfaces, which anyone who reaches the port could use (the
# GPU, and the voice library's writes). So a token is required unless the operator opens it on purpose,
# e.g. behind a proxy that authenticates: VOXCPM_OPEN=1.
set -eu
cd "$(dirname "$0")/.."
token_given=${VOXCPM_TOKEN:+yes}
for arg in "$@"; do
  case $arg in --token|--token=*) token_given=yes ;; esac
done
if [ -z "$token_given" ] && [ "${VOXCPM_OPEN:-0}" != 1 ]; then
  echo "entrypoint: error: the app listens on 0.0.0.0 and no token is set, so anyone reaching the port could use it." >&2
  echo "To fix: set VOXCPM_TOKEN (e.g. \$(openssl rand -hex 16)), or VOXCPM_OPEN=1 to serve without one on purpose." >&2
  exit 2
fi
exec "${PYTHON:-python}" app.py --host 0.0.0.0 --port "${PORT:-7860}" "$@"
