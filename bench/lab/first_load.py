#!/usr/bin/env python3
"""Does the first big burst after warm-up pay for something later bursts don't? Rounds of
closed-loop bursts on a pool of engines (one per GPU), each round printed on its own with what
dynamo and inductor did during it (compiles, recompiles, cache misses): work left to first use
shows up as a counter that moves in the first round of a size and not in the next.

    python -m bench.lab.first_load --gpus 1 --bursts 32 64 64 128 128
    python -m bench.lab.first_load --gpus 2 --bursts 64 128 128 256
"""
from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from bench import multi_gpu  # noqa: E402
from inference.serving import gc_pauses  # noqa: E402


def snapshot() -> dict:
    return {group: dict(values) for group, values in copy.deepcopy(dict(counters)).items()}


def moved(before: dict, after: dict) -> str:
    out = []
    for group, values in after.items():
        for key, value in values.items():
            delta = value - before.get(group, {}).get(key, 0)
            if delta:
                out.append(f"{group}.{key}+{delta}")
    return ", ".join(out) or "nothing"


def collections(before: dict, after: dict) -> str:
    """Garbage collections during a round, per generation: count and longest pause."""
    counts = [a - b for a, b in zip(after["count"], before["count"])]
    return (f"GC collections per generation {counts}, longest gen-2 pause "
            f"{after['longest'][2] * 1e3:.0f} ms so far" if any(counts) else "no GC")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--bursts", type=int, nargs="+", default=[32, 64, 64, 128, 128])
    ap.add_argument("--max-streams", type=int, default=128)
    ap.add_argument("--patches", type=int, default=40)
    ap.add_argument("--settle", action="store_true", help="gc_pauses.settle() after warm-up, as app.py does")
    ap.add_argument("--checkpoint", help="a checkpoint folder (bench.serve's write_random_checkpoint writes a random one)")
    args = ap.parse_args()
    # multi_gpu's options, for its engine builder and rounds
    args.config, args.tiny = str(ROOT / "bench" / "voxcpm2_config.json"), False
    args.timesteps, args.serial_warm_up, args.warmup_timeout, args.round_timeout = 10, False, 300.0, 120.0
    args.concurrency = args.bursts
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    torch._logging.set_logs(recompiles=True)
    devices = [f"cuda:{i}" for i in range(args.gpus)]
    print("GPUs:", "; ".join(f"{d} {torch.cuda.get_device_name(d)}" for d in devices), flush=True)
    engines, pool = multi_gpu.warm_up(args, devices)
    print(f"{engines[0].rows} rows per engine, buckets {engines[0].runner.buckets}", flush=True)
    if args.settle:
        print(f"settled: {gc_pauses.settle()} objects frozen", flush=True)
    watch = gc_pauses.watch()
    for i, c in enumerate(args.bursts):
        before, t, gc_before = snapshot(), time.perf_counter(), watch.snapshot()
        r, where, failed = multi_gpu.run_round(pool, c, args)
        print(f"round {i + 1}: c = {c} ({' / '.join(str(where[d]) for d in sorted(where))}): TTFP median "
              f"{r['ttfp_med'] * 1e3:.1f} ms, p95 {r['ttfp_p95'] * 1e3:.1f}, largest gap {r['gap_max'] * 1e3:.1f} ms, "
              f"{r['audio_per_s']:.1f} audio s per s, {failed} failed, {time.perf_counter() - t:.1f} s; "
              f"counters moved: {moved(before, snapshot())}; {collections(gc_before, watch.snapshot())}", flush=True)
    pool.close()


if __name__ == "__main__":
    main()
