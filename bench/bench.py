#!/usr/bin/env python3
"""Speed of our CUDA-graph engine against the official voxcpm 2.0.3 on the same weights, one GPU.

    python bench/bench.py                      # published architecture, random weights
    python bench/bench.py --checkpoint DIR     # a real checkpoint folder
    python bench/bench.py --results OUT.md        # the table also written to a file
    python bench/bench.py --sweep-only             # only the concurrency sweep (many listeners)
    python bench/bench.py --precision              # only the exactness check: bf16 and float32, both sides

Random weights stop at random, so every timed request runs a fixed number of patches
(min_len = max_len). Prints one table (medians over --runs); see bench/README.md for each figure.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # the official loop draws a progress bar per patch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench import concurrency, official_side, report, weights  # noqa: E402
from bench.timing import first_chunk_seconds, median, p90, stream_timings, synthetic_voice  # noqa: E402
from inference import Engine, SynthesisRequest  # noqa: E402
from inference.serving import gc_pauses  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog while the morning sun rises slowly "
        "above the quiet green hills today.")  # 20 words


def ours_request(args, reference=None) -> SynthesisRequest:
    return SynthesisRequest(text=TEXT, reference_audio=reference, min_len=args.patches, max_len=args.patches,
                            inference_timesteps=args.timesteps, cfg_value=2.0, seed=1)


def ttfp_request(reference=None) -> SynthesisRequest:
    return SynthesisRequest(text=TEXT, reference_audio=reference, min_len=2, max_len=3, seed=2)


def bench_ours(engine: Engine, args, reference: str, label: str) -> dict:
    """TTFP for design and cloning, then per-patch times of fixed-length requests."""
    ttfp_design = [stream_timings(lambda: engine.stream(ttfp_request()))["ttfp"] for _ in range(args.runs)]
    ttfp_clone = [stream_timings(lambda: engine.stream(ttfp_request(reference)))["ttfp"] for _ in range(args.runs)]
    per_patch, rtf = [], []
    for _ in range(args.runs):
        t = stream_timings(lambda: engine.stream(ours_request(args)))
        per_patch += t["gaps"]
        rtf.append(t["total"] / (t["chunks"] * engine.cfg.patch_samples / engine.sample_rate))
    return {"label": label, "ttfp_design": median(ttfp_design), "ttfp_clone": median(ttfp_clone),
            "patch_ms": median(per_patch) * 1e3, "patch_p90_ms": p90(per_patch) * 1e3, "rtf": median(rtf),
            "patches": len(per_patch)}


def ours_phase(source, args, reference: str):
    """Everything measured on our engine; it is freed when this returns."""
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    engine = weights.our_engine(source, vae_dtype=args.vae_dtype, cuda_graphs=True, max_streams=args.max_streams)
    load_and_warm = time.perf_counter() - start
    # As app.py does once warm: without it a full collection walks the ~600,000 objects warm-up
    # left (a 376 ms stall of every stream in bench.lab.first_load on two H200s). Unfrozen on the
    # way out, so the engine's reference cycles can be collected before the official is loaded.
    gc_pauses.settle()
    try:
        return _measure_ours(engine, source, load_and_warm, args, reference)
    finally:
        gc.unfreeze()


def _measure_ours(engine, source, load_and_warm: float, args, reference: str):
    sweep = concurrency.table(concurrency.sweep(engine, args.concurrency, args.rounds, args.patches, args.timesteps),
                              engine)
    print(sweep, flush=True)
    ahead = engine.scheduler.admit_ahead
    loads = [c for c in args.concurrency if c >= min([ahead] + [size for size in args.ahead_sizes if size])]
    for size in args.ahead_sizes:  # the big loads again with another group size of admission ahead
        engine.scheduler.admit_ahead = size
        print(f"Admission ahead {size or 'off'}:\n" + concurrency.table(
            concurrency.sweep(engine, loads, args.rounds, args.patches, args.timesteps, open_loop_streams=0), engine),
            flush=True)
    engine.scheduler.admit_ahead = ahead
    for spread in args.spread_ms:  # the big loads again, each burst arriving over `spread` ms
        print(f"Bursts over {spread:g} ms:\n" + concurrency.table(concurrency.sweep(
            engine, loads, args.rounds, args.patches, args.timesteps, open_loop_streams=0, spread_s=spread / 1e3),
            engine), flush=True)
    if args.sweep_only:
        return [], None, [], None, sweep
    # The very first requests after warm-up: nothing may still be compiling or loading then.
    first = {"first_design": first_chunk_seconds(lambda: engine.stream(ttfp_request())),
             "first_clone": first_chunk_seconds(lambda: engine.stream(ttfp_request(reference)))}
    row = bench_ours(engine, args, reference, "ours (CUDA graphs)")
    row.update(first)
    row.update(warmup_s=engine.warmup_seconds, load_s=load_and_warm, peak_gb=torch.cuda.max_memory_allocated() / 1e9)
    floor = report.weight_floor(engine, args.timesteps)
    vae_rows = report.vae_precision(engine, weights.vae_fp32(source), patches=args.patches)
    parity = None if args.skip_official else official_side.latents_for_parity(engine, TEXT)
    return [row], floor, vae_rows, parity, sweep


def precision_phase(source, args) -> str:
    """Our latents in bf16 (the served engine: graphs, compiled functions) and in float32 (eager, TF32
    off), then the official package's in both, all from the same weights and noise."""
    ours = {}
    for dtype in ("bfloat16", "float32"):
        served = dtype == "bfloat16"
        engine = weights.our_engine(source, vae_dtype="float32", cuda_graphs=served, compile=served, dtype=dtype,
                                    max_streams=8)
        with official_side.computed_as(dtype):
            ours[dtype] = official_side.latents_for_parity(engine, TEXT)
        del engine
        weights.free_gpu()
    return report.precision_table(official_side.precision(source, TEXT, ours))


def eager_phase(source, args, reference: str) -> dict:
    engine = weights.our_engine(source, vae_dtype=args.vae_dtype, cuda_graphs=False)
    row = bench_ours(engine, argparse.Namespace(**{**vars(args), "runs": 1}), reference, "ours (eager)")
    row["warmup_s"] = engine.warmup_seconds
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="a real checkpoint folder (default: random published weights)")
    ap.add_argument("--config", default=str(ROOT / "bench" / "voxcpm2_config.json"))
    ap.add_argument("--patches", type=int, default=80, help="patches per timed request (>= 60)")
    ap.add_argument("--timesteps", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vae-dtype", default="float32", help="the engine default; see docs/benchmarks.md")
    ap.add_argument("--skip-official", action="store_true")
    ap.add_argument("--skip-eager", action="store_true")
    ap.add_argument("--max-streams", type=int, default=64, help="rows of our engine (the largest batch)")
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32, 64], help="closed-loop loads")
    ap.add_argument("--rounds", type=int, default=3, help="closed-loop rounds per load")
    ap.add_argument("--sweep-only", action="store_true", help="only the concurrency sweep")
    ap.add_argument("--spread-ms", type=float, nargs="*", default=[],
                    help="the big loads again, each burst's requests arriving evenly over this many ms (as a burst "
                         "sent over HTTP reaches the worker), once per value")
    ap.add_argument("--ahead-sizes", type=int, nargs="*", default=[],
                    help="then the big loads again with each group size of admission ahead (0: off)")
    ap.add_argument("--vae-only", action="store_true", help="only the streamed VAE decode's SNR table (eager engine)")
    ap.add_argument("--precision", action="store_true",
                    help="only the exactness check: our latents and the official's, each in bf16 and float32")
    ap.add_argument("--results", help="write the markdown table here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = Path(tempfile.mkdtemp(prefix="voxcpm_bench_"))
    reference = synthetic_voice(work / "reference_10s.wav", seconds=10.0)
    source = weights.prepare(args, work)  # random published weights (host copy) or a folder
    if args.vae_only:
        engine = weights.our_engine(source, vae_dtype="float32", cuda_graphs=False)
        print(report.vae_table(report.vae_precision(engine, weights.vae_fp32(source), patches=args.patches)))
        return
    if args.precision:
        print(precision_phase(source, args))
        return
    rows, floor, vae_rows, parity, sweep = ours_phase(source, args, reference)
    weights.free_gpu()
    if args.sweep_only:
        return
    if not args.skip_eager:
        rows.append(eager_phase(source, args, reference))
        weights.free_gpu()
    if not args.skip_official:
        rows += official_side.bench(source, args, TEXT, reference, parity)
    table = report.table(rows, floor, vae_rows, args) + "\n" + sweep
    print(table)
    if args.results:
        Path(args.results).write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
