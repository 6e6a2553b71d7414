#!/usr/bin/env python3
"""A long text as one stream: TTFP, per-patch time of the first and the last segment, the gap at
each segment boundary (the continuation prefill), and the memory curve over the run.

    python -m bench.long_text --out DIR                  # one GPU, published architecture, random weights
    python -m bench.long_text --out DIR --checkpoint D   # a real checkpoint folder
    python -m bench.long_text --out DIR --tiny           # CPU, the tiny test model (a smoke run)

Random weights stop at random, so every segment runs a fixed number of patches (min_len = max_len
= --patches per segment, below the runaway threshold); a real checkpoint stops by itself. Writes
long_text.json (every figure and both curves) and long_text.md (a table) into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from inference import Engine, SynthesisRequest  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog while the sun rises above the hills.",
             "On the fifth of May we sold twelve hundred tickets, and the hall was full by eight.",
             "Nobody expected the rain, yet everyone stayed until the very last song was played.",
             "Then the buses came, one after another, and carried them home through the night."]


def long_text(chars: int) -> str:
    text, i = "", 0
    while len(text) < chars:
        text += SENTENCES[i % len(SENTENCES)] + " "
        i += 1
    return text[:chars].rstrip()


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def build_engine(args) -> Engine:
    if args.tiny:
        from inference.model.tiny_checkpoint import write_tiny_checkpoint

        path = write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm_long_tiny_"), fast_vae=True)
        engine = Engine.from_pretrained(str(path), device="cpu", dtype="float32", max_streams=1, warmup=False)
        engine.preparer.segment_weight = min(args.segment_weight, 100)  # the tiny cache holds 512 positions
        return engine
    from bench import weights

    args.config = str(ROOT / "bench" / "voxcpm2_config.json")
    source = weights.prepare(args, Path(tempfile.mkdtemp(prefix="voxcpm_long_")))
    engine = weights.our_engine(source, vae_dtype="float32", cuda_graphs=True, max_streams=args.max_streams)
    engine.preparer.segment_weight = args.segment_weight
    return engine


def run(engine: Engine, args) -> dict:
    """One request, stepped here so that each step (one patch of the stream) is timed: audio after
    the first segment is held until its segment ends (the runaway guard), so chunk arrivals would
    time segments, not patches. Memory is sampled every `--sample-every` patches."""
    on_gpu = engine.device.type == "cuda"
    fixed = {} if args.checkpoint or args.tiny else dict(min_len=args.patches, max_len=args.patches)
    req = SynthesisRequest(text=long_text(args.chars), seed=1, inference_timesteps=args.timesteps, **fixed)
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = before = time.perf_counter()
    stream = engine.start(req)
    steps, curve, first, patches = [], [], None, 0
    while not stream.done:
        segment, joining = stream.plan.segment, stream.join is not None
        made = sum(len(chunks) for s, chunks in engine.step() if s is stream)
        now = time.perf_counter()
        steps.append((segment, joining, now - before))
        before = now
        if made and first is None:
            first = now - start
        patches += made
        if len(steps) % args.sample_every == 1:
            curve.append({"step": len(steps), "segment": segment, "rss_mb": round(rss_mb(), 1),
                          "cuda_mb": round(torch.cuda.memory_allocated() / 2**20, 1) if on_gpu else None})
    if stream.error is not None:
        raise stream.error
    return summarize(engine, time.perf_counter() - start, first, steps, patches, curve, on_gpu, req, stream)


def summarize(engine, total, first, steps, patches, curve, on_gpu, req, stream) -> dict:
    last = steps[-1][0] if steps else 0
    per_patch = lambda k: [t * 1e3 for s, j, t in steps if s == k and not j]  # noqa: E731
    boundary = [t * 1e3 for s, j, t in steps[1:] if j]
    median = lambda v: float(np.median(v)) if v else None  # noqa: E731
    audio_s = patches * engine.cfg.patch_samples / engine.sample_rate
    report = stream.plan.report
    return {
        "device": torch.cuda.get_device_name() if on_gpu else "cpu", "chars": len(req.text),
        "segments": report.segment_count, "patches": patches, "audio_s": audio_s,
        "retries": len(report.retries), "ttfp_ms": first * 1e3, "rtf": total / audio_s,
        "first_segment_patch_ms": median(per_patch(0)), "last_segment_patch_ms": median(per_patch(last)),
        "boundary_gap_ms_median": median(boundary), "boundary_gap_ms_max": max(boundary, default=None),
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if on_gpu else None,
        "memory_curve": curve,
    }


def markdown(r: dict) -> str:
    fmt = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    rows = [("device", r["device"]), ("text", f"{r['chars']} characters, {r['segments']} segments, "
                                              f"{r['patches']} patches, {r['audio_s']:.0f} s of audio, "
                                              f"{r['retries']} retries"),
            ("TTFP", f"{fmt(r['ttfp_ms'])} ms"), ("RTF", fmt(r["rtf"], 3)),
            ("ms/patch, first segment (median)", fmt(r["first_segment_patch_ms"], 2)),
            ("ms/patch, last segment (median)", fmt(r["last_segment_patch_ms"], 2)),
            ("step with a continuation prefill, median / max (ms)",
             f"{fmt(r['boundary_gap_ms_median'])} / {fmt(r['boundary_gap_ms_max'])}"),
            ("peak GPU memory allocated (MB)", fmt(r["peak_cuda_mb"], 0))]
    curve = r["memory_curve"]
    cuda = " ".join(fmt(p["cuda_mb"], 0) for p in curve)
    rss = " ".join(fmt(p["rss_mb"], 0) for p in curve)
    return ("| figure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
            + f"\n\nMemory every {curve[1]['step'] - curve[0]['step'] if len(curve) > 1 else 0} steps: "
            f"GPU allocated (MB) {cuda}; host RSS (MB) {rss}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for long_text.json and long_text.md")
    ap.add_argument("--checkpoint", help="a real checkpoint folder (default: random published weights)")
    ap.add_argument("--tiny", action="store_true", help="the tiny test model on the CPU (a smoke run)")
    ap.add_argument("--chars", type=int, default=20000)
    ap.add_argument("--patches", type=int, default=60, help="patches per segment with random weights")
    ap.add_argument("--segment-weight", type=int, default=300, help="the segment bound (inference/text/segments.py)")
    ap.add_argument("--timesteps", type=int, default=10)
    ap.add_argument("--max-streams", type=int, default=8)
    ap.add_argument("--sample-every", type=int, default=50, help="steps (patches) between memory samples")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run(build_engine(args), args)
    (out / "long_text.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    table = markdown(result)
    (out / "long_text.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
