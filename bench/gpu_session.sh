#!/usr/bin/env bash
# One measuring session on a GPU machine that has PyTorch but not the app's other packages (the
# device machine: Python 3.12, no network). Wheels for Gradio and the rest travel in .whl/
# (bench/README.md, "A session on a GPU machine", says how to fetch them). Phases, each optional:
#
#   bash bench/gpu_session.sh tests sweep profile     # GPU tests, in-process sweep, step profile
#   TEST_FILES=tests/gpu/test_fast_path.py bash bench/gpu_session.sh tests   # some of the GPU test files
#   bash bench/gpu_session.sh vae dit                 # the VAE decoder alone (VAE_ARGS), the LocDiT alone
#   bash bench/gpu_session.sh hopper                  # the LocDiT's products on QuACK's Hopper GEMMs against cuBLAS
#   NO_KERNELS=1 bash bench/gpu_session.sh sweep      # with the Hopper kernels installed, left off: a before-run
#   bash bench/gpu_session.sh vae-snr                 # the streamed decode's SNR table of bench.bench (--vae-only)
#   bash bench/gpu_session.sh precision               # our latents and the official's, each in bf16 and float32
#   bash bench/gpu_session.sh admission               # a burst of 64 to its first chunks; prefill graphs
#   SWEEP_ARGS="--ahead-sizes 0 32" bash bench/gpu_session.sh sweep   # the big loads again, admission ahead off, in 32s
#   bash bench/gpu_session.sh serve                   # the whole app over HTTP (bench/serve.py)
#   bash bench/gpu_session.sh serve:4                 # the same, its loads sent from 4 client processes
#   APP_ARGS="--max-streams 64" bash bench/gpu_session.sh apart:4   # the app, the engine apart and on a thread, in turns
#   bash bench/gpu_session.sh floor:4                 # the same loads against a server that answers at once (bench/floor.py)
#   AGAINST="--prepare-threads 2" bash bench/gpu_session.sh ab:4   # the app as shipped and with AGAINST, in turns (ABBA)
#   bash bench/gpu_session.sh live                    # text spoken as it arrives, over the WebSocket (bench/live_text.py)
#   AGAINST_ROOT=$PWD/.ab/before bash bench/gpu_session.sh live-ab   # the same, this app and another checkout's in turns
#   LIVE_ARGS="--sessions 128 --rates 60" bash bench/gpu_session.sh live-steps   # the same, its steps second by second
#                                                     # (SPY=SECONDS: and py-spy's samples of who holds the GIL)
#   SPY=40 bash bench/gpu_session.sh serve-steps:4    # serve:4 against the app traced, its steps (and 40 s of who holds the GIL)
#   bash bench/gpu_session.sh beside                  # 64 live streams while another client scores and transcribes
#   bash bench/gpu_session.sh words                   # 64 live streams, alone and each asking for word timestamps
#   bash bench/gpu_session.sh align                   # the word aligner's throughput (bench/alignment.py; random weights)
#
# Results go to $OUT (default /tmp/voxcpm-gpu-session), each phase's lines as they come (a call cut
# by its time limit still returns what it measured); SERVE_ARGS adds bench/serve.py options
# (e.g. --rates 20 40), APP_ARGS app.py options (default none: 128 rows); the random checkpoint of the published
# architecture is written once to $CKPT and shared by the sweep and the served run, so both
# measure the same weights.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/voxcpm-gpu-session}
CKPT=${CKPT:-/tmp/voxcpm-random-published}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
# The optional Hopper kernels (requirements-gpu.txt) travel as parts of one unpacked site folder
# (bench/fetch_kernels.sh), each part in its own call: every call leaves the parts it brought in
# $KERNELS, and once the checksums list has them all they are unpacked and put on the path.
# QuACK's compiled kernels and tuning results are kept in $KERNELS/cache for the machine's later calls.
KERNELS=${KERNELS:-/root/voxcpm-kernels}
if [ -d .kernels ]; then mkdir -p "$KERNELS" && cp .kernels/* "$KERNELS"/; fi
if [ ! -d "$KERNELS/site-packages" ] && [ -f "$KERNELS/SHA256SUMS" ] && (cd "$KERNELS" && sha256sum --quiet -c SHA256SUMS 2>/dev/null); then
  mkdir -p "$KERNELS/site-packages.partial" && cat "$KERNELS"/site.tar.xz.part-* | xz -d | tar -x -C "$KERNELS/site-packages.partial" \
    && mv "$KERNELS/site-packages.partial" "$KERNELS/site-packages" && rm -f "$KERNELS"/site.tar.xz.part-*
fi
if [ -f "$KERNELS/quack-cache.tgz" ] && [ ! -d "$KERNELS/cache" ]; then  # an earlier machine's compiled kernels
  tar -xzf "$KERNELS/quack-cache.tgz" -C "$KERNELS"
fi
if [ -n "${NO_KERNELS:-}" ]; then
  echo "Hopper kernels left off the path (NO_KERNELS)"
elif [ -d "$KERNELS/site-packages" ]; then
  export PYTHONPATH=$KERNELS/site-packages:$KERNELS/site-packages/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
  export QUACK_CACHE_DIR=$KERNELS/cache QUACK_CACHE_AUTOTUNING=1
  echo "Hopper kernels on the path ($KERNELS/site-packages)"
elif [ -f "$KERNELS/SHA256SUMS" ]; then
  echo "Hopper kernels: parts so far: $(cd "$KERNELS" && ls site.tar.xz.part-* 2>/dev/null | tr '\n' ' ')"
fi
# TRITON_CACHE_AUTOTUNING: the VAE kernels' tile choices are timed once per machine, not once per process
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 TRITON_CACHE_AUTOTUNING=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
if [ ! -f "$CKPT/model.safetensors" ]; then
  python3 -c "from pathlib import Path; from bench.serve import write_random_checkpoint as w; \
w(Path('bench/voxcpm2_config.json'), Path('$CKPT'))"
fi
# The files with GPU tests; TEST_FILES runs a part of them (a call's time limit may not hold them all)
# (in one process: the GPU machine has no pytest-xdist, and pytest.ini asks for its two workers)
GPU_TESTS="tests/gpu/test_fast_path.py tests/gpu/test_hopper_kernels.py tests/unit/test_short_attention.py
  tests/unit/test_vae_kernels.py tests/unit/test_vae_stream.py tests/unit/test_split_products.py"
for phase in "$@"; do
  echo "== $phase ($(date +%T))"
  case "$phase" in
    tests) python3 -m pytest -q -p no:cacheprovider -o addopts=--strict-markers ${TEST_FILES:-$GPU_TESTS} 2>&1 | tee "$OUT/gpu_tests.log" | tail -15 ;;
    sweep) python3 -m bench.bench --checkpoint "$CKPT" --sweep-only --concurrency 1 8 32 64 128 --rounds 2 \
             --max-streams 128 ${SWEEP_ARGS:-} 2>&1 | grep -v "^20..-" | tee "$OUT/sweep.md" ;;
    profile) python3 -m bench.lab.profile_step --buckets 1 8 32 64 128 ${PROFILE_ARGS:-} 2>&1 | tee "$OUT/profile.txt" | tail -60 ;;
    admission) python3 -m bench.lab.profile_step --admission 64 --prefill 2>&1 | tee "$OUT/admission.txt" | tail -30 ;;
    vae-snr) python3 -m bench.bench --checkpoint "$CKPT" --vae-only 2>&1 | grep -v "^20..-" | tee "$OUT/vae_snr.md" ;;
    precision) python3 -m bench.bench --checkpoint "$CKPT" --precision 2>&1 | grep -v "^20..-" | tee "$OUT/precision.md" ;;
    vae) python3 -m bench.lab.vae_decode --config bench/voxcpm2_config.json ${VAE_ARGS:-} 2>&1 | tee "$OUT/vae.txt" | tail -80 ;;
    hopper) python3 -m bench.lab.hopper_kernels ${HOPPER_ARGS:-} 2>&1 | tee "$OUT/hopper.txt" | tail -80 ;;
    dit) python3 -m bench.lab.dit_rate ${DIT_ARGS:-} 2>&1 | tee "$OUT/dit.txt" | tail -60 ;;
    live) python3 -m bench.live_text --checkpoint "$CKPT" --out "$OUT/live" ${LIVE_ARGS:-} 2>&1 | tee "$OUT/live.txt" | tail -20 ;;
    live-ab) python3 -m bench.live_text --checkpoint "$CKPT" --out "$OUT/live-ab" --against-root "$AGAINST_ROOT" \
               ${LIVE_ARGS:-} 2>&1 | tee "$OUT/live-ab.txt" | grep -v "^starting" | tail -40 ;;
    live-steps) port=7861  # the app traced by bench.lab.step_trace, the live loads sent to it, its steps summed up
             python3 -m bench.lab.step_trace --log "$OUT/steps.jsonl" -- app.py --model "$CKPT" --host 127.0.0.1 \
               --port $port ${APP_ARGS:-} > "$OUT/steps-app.log" 2>&1 &
             app=$!
             python3 -c "from bench.serve import wait_ready; wait_ready('http://127.0.0.1:$port', None)" || continue
             if [ -n "${SPY:-}" ]; then  # who holds the GIL, by thread, while the loads run (py-spy from .whl/)
               /tmp/site/bin/py-spy record --gil --threads --nonblocking -r 250 -f raw -d "$SPY" -p $app \
                 -o "$OUT/live-gil.txt" > "$OUT/live-py-spy.log" 2>&1 &
             fi
             python3 -m bench.live_text --url http://127.0.0.1:$port --out "$OUT/live-steps" ${LIVE_ARGS:-} 2>&1 \
               | tee "$OUT/live-steps.txt" | tail -8
             kill $app; wait $app
             python3 -m bench.lab.step_trace --summary "$OUT/steps.jsonl" | tee "$OUT/steps.md" | tail -60 ;;
    serve-steps|serve-steps:*) clients=${phase#serve-steps}; clients=${clients#:}; port=7862  # bench.serve's loads, traced
             python3 -m bench.lab.step_trace --log "$OUT/serve-steps.jsonl" -- app.py --model "$CKPT" --host 127.0.0.1 \
               --port $port ${APP_ARGS:-} > "$OUT/serve-steps-app.log" 2>&1 &
             app=$!
             python3 -c "from bench.serve import wait_ready; wait_ready('http://127.0.0.1:$port', None)" || continue
             if [ -n "${SPY:-}" ]; then  # who holds the GIL, by thread, while the loads run (py-spy from .whl/)
               /tmp/site/bin/py-spy record --gil --threads --nonblocking -r 250 -f raw -d "$SPY" -p $app -o "$OUT/gil.txt" \
                 > "$OUT/py-spy.log" 2>&1 &
             fi
             python3 -m bench.serve --url http://127.0.0.1:$port --out "$OUT/serve-steps" --clients "${clients:-1}" \
               ${SERVE_ARGS:-} 2>&1 | grep -v "^{" | tail -20
             kill $app; wait $app
             python3 -m bench.lab.step_trace --summary "$OUT/serve-steps.jsonl" > "$OUT/serve-steps.md"; tail -30 "$OUT/serve-steps.md" ;;
    serve|serve:*) clients=${phase#serve}; clients=${clients#:}
             python3 -m bench.serve --checkpoint "$CKPT" --out "$OUT/serve${clients:+-c$clients}" \
               --app-args "${APP_ARGS:-}" --clients "${clients:-1}" ${SERVE_ARGS:-} 2>&1 \
               | tee "$OUT/serve${clients:+-c$clients}.txt" | grep -v "^{" | tail -20 ;;
    ab|ab:*) clients=${phase#ab}; clients=${clients#:}
             python3 -m bench.serve --checkpoint "$CKPT" --out "$OUT/ab${clients:+-c$clients}" \
               --app-args "${APP_ARGS:-}" --against "${AGAINST:-}" ${AGAINST_ROOT:+--against-root "$AGAINST_ROOT"} \
               --clients "${clients:-1}" ${SERVE_ARGS:-} 2>&1 | tee "$OUT/ab${clients:+-c$clients}.txt" | grep -v "^{" \
               | tail -30 ;;
    apart|apart:*) clients=${phase#apart}; clients=${clients#:}
             python3 -m bench.serve --checkpoint "$CKPT" --apart --out "$OUT/apart${clients:+-c$clients}" \
               --app-args "${APP_ARGS:-}" --clients "${clients:-1}" ${SERVE_ARGS:-} 2>&1 | grep -v "^{" | tail -30 ;;
    floor|floor:*) clients=${phase#floor}; clients=${clients#:}
             python3 -m bench.serve --floor --out "$OUT/floor${clients:+-c$clients}" --app-args "${APP_ARGS:-}" \
               --clients "${clients:-1}" ${SERVE_ARGS:-} 2>&1 | grep -v "^{" | tail -20 ;;
    words) python3 -m bench.analysis_beside --checkpoint "$CKPT" --words --out "$OUT/words" ${WORDS_ARGS:-} 2>&1 \
             | grep -v "^{" | tail -12 ;;
    beside) python3 -m bench.analysis_beside --checkpoint "$CKPT" --out "$OUT/beside" ${BESIDE_ARGS:-} 2>&1 \
             | grep -v "^{" | tail -12 ;;
    align) python3 -m bench.alignment --random-published --device cuda --out "$OUT/align" ${ALIGN_ARGS:-} 2>&1 \
             | tee "$OUT/align.txt" | tail -25 ;;
    *) echo "unknown phase $phase" ;;
  esac
done
