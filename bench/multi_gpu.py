#!/usr/bin/env python3
"""Several GPUs of one host: one engine per GPU in a WorkerPool, against one engine, on the
closed-loop concurrency sweep (c requests submitted at once, each read on its own consumer thread,
as the server's handlers read them).

    python bench/multi_gpu.py                  # every visible GPU, published architecture, random weights
    python bench/multi_gpu.py --gpus 2 --concurrency 64 128
    python bench/multi_gpu.py --tiny --gpus 2 --concurrency 4 8 --patches 6 --max-streams 4   # CPU smoke test

Each engine warms up on its own worker's thread; Engine.warmup lets one run at a time (WARMUP_LOCK:
torch.compile is not thread-safe). --serial-warm-up starts each worker only after the previous one
is ready; a failed warm-up falls back to that. Figures as in bench/concurrency.py; times are the
consumer threads' arrival times of each chunk.
"""
from __future__ import annotations

import argparse
import collections
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench import concurrency, weights  # noqa: E402
from inference.serving import gc_pauses  # noqa: E402
from inference.serving.job import JobFailed  # noqa: E402
from inference.serving.pool import WorkerPool  # noqa: E402

log = logging.getLogger("bench.multi_gpu")


def build_engines(args, devices: list[str]) -> list:
    if args.tiny:  # the tests' tiny random model: the script's logic, on the CPU
        from inference import Engine
        from inference.model.tiny_checkpoint import write_tiny_checkpoint

        return [Engine.from_pretrained(write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm2-tiny-"), seed=0), device=d, dtype="float32", warmup=False,
                                       max_streams=args.max_streams) for d in devices]
    if not hasattr(args, "source"):
        args.source = weights.prepare(args, Path(tempfile.mkdtemp(prefix="voxcpm_multi_gpu_")))
    engines = []
    for device in devices:
        start = time.perf_counter()
        engines.append(weights.our_engine(args.source, vae_dtype="float32", cuda_graphs=True,
                                          max_streams=args.max_streams, device=device, warmup=False))
        log.info("engine on %s built in %.1f s", device, time.perf_counter() - start)
    return engines


def warm_pool(args, engines: list, serial: bool) -> tuple[WorkerPool, float, list[str]]:
    """The pool, once every engine has warmed up on its worker thread; the wall time; the devices
    whose warm-up failed."""
    start = time.perf_counter()
    pool = WorkerPool(engines, max_queue=max(args.concurrency), warm_up=True, serial_warm_up=serial,
                      max_backlog_s=1e6, max_unread_s=1e6)  # consumers read at once: no backlog limit
    if not pool.ready.wait(args.warmup_timeout):
        raise TimeoutError(f"warm-up did not end within {args.warmup_timeout} s")
    failed = [str(e.device) for e in engines if e.warmup_seconds is None]
    return pool, time.perf_counter() - start, failed


def run_round(pool: WorkerPool, c: int, args) -> tuple[dict, collections.Counter, int]:
    """c requests submitted together, each read on its own thread: figures, requests per device,
    failed requests."""
    starts, chunks, where, failed = {}, collections.defaultdict(list), collections.Counter(), []

    def read(i, job):
        try:
            for _ in job:
                chunks[i].append(time.perf_counter())
        except JobFailed:
            failed.append(i)

    t0 = time.perf_counter()
    jobs, threads = [], []
    for i in range(c):
        starts[i] = time.perf_counter()
        job = pool.submit(concurrency.fixed_request(args.patches, args.timesteps, seed=i))
        where[pool.workers.index(pool.worker_of(job))] += 1
        threads.append(threading.Thread(target=read, args=(i, job), daemon=True))
        threads[-1].start()
        jobs.append(job)
    deadline = time.perf_counter() + args.round_timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.perf_counter()))
    if any(t.is_alive() for t in threads):
        for job in jobs:
            job.cancel()
        raise TimeoutError(f"c = {c}: a round did not end within {args.round_timeout} s")
    wall = time.perf_counter() - t0
    done = {i: s for i, s in starts.items() if chunks[i] and i not in failed}
    return concurrency.summarize(done, chunks, wall, pool.workers[0].engine), where, len(failed)


def sweep(pool: WorkerPool, label: str, args) -> list[dict]:
    rows = []
    run_round(pool, min(args.concurrency), args)  # untimed: the first batched prefills of this pool
    for c in args.concurrency:
        _reset_peaks(args)
        runs, where, failed = [], collections.Counter(), 0
        for _ in range(args.rounds):
            figures, placed, lost = run_round(pool, c, args)
            runs.append(figures)
            where += placed
            failed += lost
        row = concurrency.pool(runs)
        row.update(label=label, c=c, failed=failed, split=" / ".join(str(where[d]) for d in sorted(where)),
                   peak_gb=_peak_gb(args))
        rows.append(row)
        print(_row(row), flush=True)
    return rows


def _reset_peaks(args):
    if not args.tiny:
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)


def _peak_gb(args) -> str:
    if args.tiny:
        return "-"
    return " / ".join(f"{torch.cuda.max_memory_allocated(i) / 1e9:.1f}" for i in range(torch.cuda.device_count()))


HEADER = ("| GPUs | load | requests (per GPU) | failed | TTFP median | TTFP p95 | gap median | gap p95 | gap max "
          "| RTF per stream (median) | RTF p95 | audio s per s | peak GPU mem (GB) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def _row(r: dict) -> str:
    return (f"| {r['label']} | c = {r['c']} | {r['requests']} ({r['split']}) | {r['failed']} | "
            f"{r['ttfp_med'] * 1e3:.1f} | {r['ttfp_p95'] * 1e3:.1f} | {r['gap_med'] * 1e3:.2f} | "
            f"{r['gap_p95'] * 1e3:.2f} | {r['gap_max'] * 1e3:.1f} | {r['rtf_med']:.4f} | {r['rtf_p95']:.4f} | "
            f"{r['audio_per_s']:.1f} | {r['peak_gb']} |")


def ratios(many: list[dict], one: list[dict], n: int) -> list[str]:
    """Audio s per s of n GPUs over one GPU's: at the same c, and at the same load per GPU."""
    lines = []
    by_c = {r["c"]: r for r in one}
    for r in many:
        if r["c"] in by_c:
            o = by_c[r["c"]]
            lines.append(f"- c = {r['c']}: {n} GPUs {r['audio_per_s']:.1f} / 1 GPU {o['audio_per_s']:.1f} audio s "
                         f"per s = {r['audio_per_s'] / o['audio_per_s']:.2f}x (RTF per stream {r['rtf_med']:.4f} vs "
                         f"{o['rtf_med']:.4f})")
        if r["c"] % n == 0 and r["c"] // n in by_c:
            o = by_c[r["c"] // n]
            lines.append(f"- same load per GPU ({r['c'] // n} streams each): {n} GPUs at c = {r['c']} / 1 GPU at "
                         f"c = {o['c']} = {r['audio_per_s'] / o['audio_per_s']:.2f}x (RTF per stream "
                         f"{r['rtf_med']:.4f} vs {o['rtf_med']:.4f})")
    return lines


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: every visible one)")
    ap.add_argument("--checkpoint", help="a real checkpoint folder (default: random published weights)")
    ap.add_argument("--config", default=str(ROOT / "bench" / "voxcpm2_config.json"))
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--patches", type=int, default=80)
    ap.add_argument("--timesteps", type=int, default=10)
    ap.add_argument("--max-streams", type=int, default=64, help="rows of each engine (default: 64)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serial-warm-up", action="store_true", help="warm the engines up one after the other")
    ap.add_argument("--warmup-timeout", type=float, default=240.0)
    ap.add_argument("--round-timeout", type=float, default=120.0)
    ap.add_argument("--tiny", action="store_true", help="the tiny CPU model (a smoke test of this script)")
    ap.add_argument("--results", help="also write the markdown table here")
    return ap.parse_args()


def warm_up(args, devices: list[str]) -> tuple[list, WorkerPool]:
    """Engines built, then warmed up in parallel (unless --serial-warm-up); if any parallel warm-up
    fails, fresh engines warm up one after the other."""
    engines = build_engines(args, devices)
    serial = args.serial_warm_up
    pool, wall, failed = warm_pool(args, engines, serial)
    if failed and not serial:
        print(f"warm-up failed on {', '.join(failed)} (the log above says why); "
              "building fresh engines and warming them up one after the other", flush=True)
        pool.close()
        del engines, pool
        if not args.tiny:
            weights.free_gpu()
        engines = build_engines(args, devices)
        serial = True
        pool, wall, failed = warm_pool(args, engines, serial)
    each = ", ".join(f"{e.device} {e.warmup_seconds or float('nan'):.1f} s" for e in engines)
    how = "one worker after the other" if serial else "all workers started at once"
    failures = f"; FAILED on {', '.join(failed)}" if failed else ""
    print(f"warm-up, {how}: {wall:.1f} s wall for {len(engines)} engines (each engine's own: {each}){failures}",
          flush=True)
    return engines, pool


def main():
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for name in ("voxcpm.pool", "voxcpm.worker"):  # a line per request: thousands here
        logging.getLogger(name).setLevel(logging.WARNING)
    n = args.gpus or (2 if args.tiny else torch.cuda.device_count())
    devices = ["cpu"] * n if args.tiny else [f"cuda:{i}" for i in range(n)]
    if not args.tiny:
        print("GPUs:", "; ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(n)), flush=True)
    engines, pool = warm_up(args, devices)
    # As app.py does once warm: two engines' warm-up leaves ~600,000 objects, and a full collection
    # walking them stalled every stream 376 ms in the first load after warm-up (bench.lab.first_load,
    # two H200s): that, not the GPUs, was the first load's 400 ms TTFP and 637 ms gap.
    print(f"{gc_pauses.settle()} objects set aside from garbage collection, as app.py does", flush=True)
    e = engines[0]
    print(f"{e.rows} rows per engine, buckets {e.runner.buckets}, {e.runner.graphs} graphs; {args.patches}-patch "
          f"requests, {args.timesteps} timesteps, CFG 2; times in ms\n\n{HEADER}", flush=True)
    many = sweep(pool, str(n), args)
    pool.close()
    one_pool = WorkerPool(engines[:1], max_queue=max(args.concurrency), max_backlog_s=1e6, max_unread_s=1e6)
    one = sweep(one_pool, "1", args)
    one_pool.close()
    table = "\n".join([HEADER, *(_row(r) for r in many + one), "", *ratios(many, one, n)]) + "\n"
    print("\n" + table, flush=True)
    if args.results:
        Path(args.results).write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
