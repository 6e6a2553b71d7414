"""Which of the calls a listener's chunk goes through let go of the GIL, and what each then costs
its caller behind a thread that runs Python, on any machine.

A C call that lets go of the GIL (soxr's resampler, NumPy's loops over more than a few hundred
elements, every PyTorch op) must take it back when it returns. While another thread runs Python
the caller waits for it to let go in turn, up to the interpreter's switch interval (5 ms). The
event loop makes such calls per chunk sent; the engine's thread is the other thread. Each call is
timed alone, then beside a thread that only runs Python (the worst case: the engine's thread lets
go at each of its own PyTorch calls). A call that keeps the GIL costs about the same beside it.

    python -m bench.lab.gil_release [--calls 300]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Callable

import numpy as np
import soxr

PATCH_48K, PATCH_24K = 7680, 3840  # one 160 ms patch at the model's rate and at OpenAI's pcm rate


def int16(audio: np.ndarray) -> bytes:
    """The doors' float -> int16 conversion as they make it (ui/services/audio.to_pcm, which bench
    may not import): four NumPy loops over the chunk."""
    return np.clip(np.rint(audio * 32767.0), -32768, 32767).astype("<i2").tobytes()


def chunk_calls() -> dict[str, Callable[[], object]]:
    """What a chunk may meet on its way out, on one patch of audio."""
    rng = np.random.default_rng(0)
    patch = (0.1 * rng.standard_normal(PATCH_48K)).astype(np.float32)
    half = patch[:PATCH_24K].copy()
    stream = soxr.ResampleStream(48000, 24000, 1, dtype="float32", quality="HQ")
    meta = {"segment": 3, "offset": 123456, "pause": False, "words": []}
    calls = {
        "soxr: a patch 48 -> 24 kHz (streaming)": lambda: stream.resample_chunk(patch),
        "int16 (to_pcm): a patch at 48 kHz": lambda: int16(patch),
        "int16 (to_pcm): a patch at 24 kHz": lambda: int16(half),
        "np.concatenate: two patches": lambda: np.concatenate([patch, patch]),
        "json.dumps: a chunk's metadata (Python only)": lambda: json.dumps(meta),
    }
    try:
        import torch

        tensor = torch.from_numpy(patch)
        calls["torch: a patch times 2"] = lambda: tensor * 2
    except ImportError:
        pass
    return calls


def per_call_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """Mean and longest time of one call, in us."""
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.fmean(times) * 1e6, max(times) * 1e6


def measure(calls: int) -> list[dict]:
    cases = chunk_calls()
    for fn in cases.values():  # first calls allocate and load
        fn()
    alone = {name: per_call_us(fn, calls) for name, fn in cases.items()}
    stop = threading.Event()

    def python_only():
        n = 0
        while not stop.is_set():
            n += 1
    busy = threading.Thread(target=python_only, daemon=True)
    busy.start()
    time.sleep(0.05)
    try:
        beside = {name: per_call_us(fn, calls) for name, fn in cases.items()}
    finally:
        stop.set()
        busy.join()
    return [{"call": name, "alone_us": alone[name][0], "beside_us": beside[name][0], "beside_max_us": beside[name][1]}
            for name in cases]


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind, alone and beside")
    args = parser.parse_args(argv)
    rows = measure(args.calls)
    print(f"switch interval {sys.getswitchinterval() * 1e3:g} ms; {args.calls} calls each, mean (us)\n")
    print("| call | alone | beside a thread running Python | longest beside |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['call']} | {r['alone_us']:.1f} | {r['beside_us']:.1f} | {r['beside_max_us']:.0f} |")


if __name__ == "__main__":
    main()
