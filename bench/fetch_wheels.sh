#!/usr/bin/env bash
# Wheels for the GPU machine (Python 3.12, x86-64, PyTorch and numpy/pandas/httpx/transformers
# already installed, no network): everything else the app, the served-path benchmark and the GPU
# tests import, pinned to the versions the CPU tests run. Run here, in the repo's root; .whl/ is
# git-ignored and travels with the device tool's `carry`; bench/gpu_session.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
  # the app: Gradio 6 and the web stack it brings
  gradio==6.31.0 gradio-client==2.7.2 hf-gradio==0.4.1 fastapi==0.165.0 starlette==1.10.0
  uvicorn==0.54.0 orjson brotli==1.2.1 groovy==0.1.2 python-multipart==0.0.34 safehttpx==0.1.7
  semantic-version==2.10.0 tomlkit==0.14.0 pydub==0.25.1 annotated-doc==0.0.7
  opentelemetry-api==1.45.2 pytz pydantic==2.13.4 pydantic-core==2.46.4 annotated-types
  typing-inspection
  # uvicorn's event loop and HTTP parser in C, which "auto" takes (ui/guard/connections.py)
  uvloop==0.23.0 httptools==0.9.0
  # our own requirements.txt beyond what the machine has (soundfile loads libsndfile through cffi)
  soundfile==0.14.0 cffi pycparser soxr==1.1.0 wetext==0.1.8 kaldifst==1.8.3 contractions textsearch anyascii
  pyahocorasick inflect==7.6.0 jaraco.functools more-itertools typeguard sentencex==1.0.32
  audiotsm==0.1.2
  # (not silero-vad: only the off-by-default silence trim imports it, no phase asks for it, and its
  # 11 MB would not fit the device tool's 64 MiB carry beside the code)
  # WS /v1/audio/speech/stream: uvicorn serves WebSockets through it, and bench/live_text.py is its client
  websockets==17.4
  # the analysis process's scores (the take evaluation's WER): jiwer and the edit distance it uses
  jiwer==4.0.0 rapidfuzz==3.14.6
  # the parity reference bench/bench.py compares against (its unused imports stubbed in bench/official.py);
  # it imports librosa (only to load clips: voice design never calls it, so numba and scipy can stay
  # behind: librosa's top level imports nothing else) and einops
  voxcpm==2.0.3 librosa==0.11.0 lazy-loader==0.6 einops==0.8.2
  # bench/http_load.py's client: aiohttp (its HTTP parser in C) and what it brings
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs frozenlist==1.8.0 multidict==7.2.1
  propcache==0.5.4 yarl==1.25.1 idna
  # who holds the GIL while a load runs (bench/gpu_session.sh serve-steps with SPY)
  py-spy==0.4.3
)
mkdir -p .whl
for spec in "${WHEELS[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$spec" \
    || echo "could not fetch $spec" >&2
done
du -sh .whl
