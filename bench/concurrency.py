"""Many listeners at once: closed-loop rounds of c requests started together, and an open-loop run
with Poisson arrivals, on one engine driven the way the worker drives it (start, step, collect).

Times are host arrival times of each chunk: TTFP from the request's start (queueing for a row
included) to its first chunk, gaps between a stream's chunks, per-stream RTF = (last chunk -
start) / audio, and audio seconds produced per wall second over the whole run.
"""
from __future__ import annotations

import collections
import time

import numpy as np
import torch

from inference import SynthesisRequest

TEXT = ("The quick brown fox jumps over the lazy dog while the morning sun rises slowly "
        "above the quiet green hills today.")


def fixed_request(patches: int, timesteps: int, seed: int) -> SynthesisRequest:
    return SynthesisRequest(text=TEXT, min_len=patches, max_len=patches, inference_timesteps=timesteps,
                            cfg_value=2.0, seed=seed)


def drive(engine, arrivals: list[float], patches: int, timesteps: int) -> dict:
    """Starts request i at arrivals[i] seconds (or when a row frees up) and runs all to the end."""
    waiting = collections.deque(range(len(arrivals)))
    live, starts, chunk_times = {}, {}, collections.defaultdict(list)
    t0 = time.perf_counter()
    while waiting or live:
        now = time.perf_counter() - t0
        while waiting and arrivals[waiting[0]] <= now and engine.free_rows:
            i = waiting.popleft()
            starts[i] = t0 + arrivals[i]  # a request waits from its arrival, row or not
            live[i] = engine.start(fixed_request(patches, timesteps, seed=i))
        if not live:
            time.sleep(max(0.0, min(arrivals[waiting[0]] - now, 0.01)))
            continue
        made = {stream: len(chunks) for stream, chunks in engine.step()}
        arrived = time.perf_counter()
        for i, stream in list(live.items()):
            chunk_times[i] += [arrived] * made.get(stream, 0)
            if stream.done:
                del live[i]
    wall = time.perf_counter() - t0
    return summarize(starts, chunk_times, wall, engine)


def summarize(starts: dict, chunk_times: dict, wall: float, engine) -> dict:
    patch_s = engine.cfg.patch_samples / engine.sample_rate
    ttfp = [chunk_times[i][0] - starts[i] for i in starts]
    gaps = [b - a for i in starts for a, b in zip(chunk_times[i], chunk_times[i][1:])]
    rtf = [(chunk_times[i][-1] - starts[i]) / (len(chunk_times[i]) * patch_s) for i in starts]
    audio = sum(len(v) for v in chunk_times.values()) * patch_s
    pct = lambda v, q: float(np.percentile(v, q)) if v else float("nan")  # noqa: E731
    return {"requests": len(starts), "ttfp_med": pct(ttfp, 50), "ttfp_p95": pct(ttfp, 95),
            "gap_med": pct(gaps, 50), "gap_p95": pct(gaps, 95), "gap_max": max(gaps) if gaps else float("nan"),
            "rtf_med": pct(rtf, 50), "rtf_p95": pct(rtf, 95), "audio_per_s": audio / wall, "wall_s": wall}


def burst(c: int, spread_s: float = 0.0) -> list[float]:
    """Arrival times of a burst of c: together, or evenly over `spread_s` seconds (as a burst sent
    over HTTP reaches the worker, one request after another as the event loop reads them)."""
    return [spread_s * i / max(1, c - 1) for i in range(c)]


def sweep(engine, concurrencies=(1, 8, 32, 64), rounds: int = 3, patches: int = 80, timesteps: int = 10,
          open_loop_streams: int = 32, open_loop_requests: int = 160, spread_s: float = 0.0) -> list[dict]:
    """Closed-loop rows (c requests together, or over `spread_s`, `rounds` times, pooled), then the
    open-loop row."""
    rows = []
    for c in concurrencies:
        if c > engine.rows:
            continue
        torch.cuda.reset_peak_memory_stats()
        runs = [drive(engine, burst(c, spread_s), patches, timesteps) for _ in range(rounds)]
        row = pool(runs)
        row.update(label=f"c = {c}" + (f", over {spread_s * 1e3:g} ms" if spread_s else ""), c=c,
                   peak_gb=torch.cuda.max_memory_allocated() / 1e9)
        rows.append(row)
    # Little's law: arrivals at rate streams / duration keep about `streams` running.
    if 0 < open_loop_streams <= engine.rows:
        at = next((r for r in rows if r["c"] >= open_loop_streams), rows[-1])
        duration = at["rtf_med"] * patches * engine.cfg.patch_samples / engine.sample_rate
        rate = open_loop_streams / duration
        arrivals = np.cumsum(np.random.default_rng(0).exponential(1 / rate, open_loop_requests)).tolist()
        torch.cuda.reset_peak_memory_stats()
        row = drive(engine, arrivals, patches, timesteps)
        row.update(label=f"open loop, {rate:.1f} req/s (~{open_loop_streams} active)", c=open_loop_streams,
                   peak_gb=torch.cuda.max_memory_allocated() / 1e9)
        rows.append(row)
    return rows


def pool(runs: list[dict]) -> dict:
    """Rounds of one concurrency: medians of each round's figures, worst of its maxima."""
    out = {k: float(np.median([r[k] for r in runs])) for k in runs[0] if k != "gap_max"}
    out["gap_max"] = max(r["gap_max"] for r in runs)
    out["requests"] = sum(r["requests"] for r in runs)
    return out


def table(rows: list[dict], engine) -> str:
    lines = [f"Concurrency sweep: {engine.rows} rows ({engine.rows_fit} fit in memory), buckets "
             f"{engine.runner.buckets}, {engine.runner.graphs} graphs, warm-up {engine.warmup_seconds:.1f} s; "
             f"80-patch requests, 10 timesteps, CFG 2; times in ms.", "",
             "| load | requests | TTFP median | TTFP p95 | gap median | gap p95 | gap max | RTF per stream (median) "
             "| RTF p95 | audio s per s | peak GPU mem (GB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['requests']} | {r['ttfp_med'] * 1e3:.1f} | {r['ttfp_p95'] * 1e3:.1f} | "
                     f"{r['gap_med'] * 1e3:.2f} | {r['gap_p95'] * 1e3:.2f} | {r['gap_max'] * 1e3:.1f} | "
                     f"{r['rtf_med']:.4f} | {r['rtf_p95']:.4f} | {r['audio_per_s']:.1f} | {r['peak_gb']:.2f} |")
    return "\n".join(lines) + "\n"
