"""The event loop's CPU time per request, on any Linux machine: the app on the tiny random model on
the CPU, bursts of one-patch requests sent to it, and the CPU time of its main thread (the one that
runs the event loop) read from /proc before and after. The loop's time per request is what a burst's
intake queues behind and what the GPU's thread shares the GIL with, so a front-door change can be
judged here before it takes GPU time. `--against-root DIR` starts a second app from another checkout
beside the first and runs the bursts on each in turns (`--order`), as `bench.serve --against` does
on the GPU.

    python -m bench.lab.loop_cost                                  # this checkout alone
    python -m bench.lab.loop_cost --against-root /tmp/before       # and an earlier one, in turns

The figure depends on the machine and on how long requests wait (the CPU engine is slow, so a
request waits far longer than on a GPU): compare two apps only within one run.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from bench.http_load import burst, request_body, stay
from bench.serve import ROOT, free_port, start_app, wait_ready
from inference.model.tiny_checkpoint import write_tiny_checkpoint


def loop_cpu_s(pid: int) -> float:
    """User and system CPU seconds of the process's main thread (/proc/PID/task/PID/stat)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def ms_per_request(url: str, pid: int, requests: int, bursts: int, patches: int = 1) -> float:
    body = lambda i: request_body(i, patches=patches, timesteps=2, text="Hello there.")  # noqa: E731
    before = loop_cpu_s(pid)
    for _ in range(bursts):
        results, _ = asyncio.run(burst(url, requests, body, stay))
        failed = [r.error for r in results if r.error]
        if failed:
            raise SystemExit(f"{len(failed)} of {requests} requests failed: {failed[0]}")
    return 1000 * (loop_cpu_s(pid) - before) / (requests * bursts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=64, help="requests per burst")
    ap.add_argument("--bursts", type=int, default=6, help="bursts per turn")
    ap.add_argument("--patches", type=int, default=1,
                    help="patches per request (more: the loop's time per streamed chunk counts in)")
    ap.add_argument("--against-root", default=None, metavar="DIR", help="a second checkout's app, in turns")
    ap.add_argument("--order", default="ABBAAB", help="the turns of A and B (default: ABBAAB)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_tiny_checkpoint(Path(tmp) / "checkpoint")
        roots = {"A": ROOT} | ({"B": Path(args.against_root)} if args.against_root else {})
        apps = {}
        for name, root in roots.items():
            port = free_port()
            extra = ["--device", "cpu", "--asr-model", "none", "--speaker-model", "none", "--data-dir",
                     str(Path(tmp) / f"data-{name}")]
            apps[name] = (f"http://127.0.0.1:{port}", start_app(str(checkpoint), port, extra,
                                                                 Path(tmp) / f"app-{name}.log", root))
        try:
            for url, process in apps.values():
                wait_ready(url, process)
            turns = [name for name in args.order if name in apps]
            figures: dict[str, list[float]] = {name: [] for name in apps}
            for name in turns:
                url, process = apps[name]
                figures[name].append(ms_per_request(url, process.pid, args.requests, args.bursts, args.patches))
                print(f"{name}: {figures[name][-1]:.2f} ms of the event loop's CPU per request", flush=True)
            for name, root in roots.items():
                values = ", ".join(f"{v:.2f}" for v in figures[name])
                print(f"{name} ({root}): median {statistics.median(figures[name]):.2f} ms per request ({values})")
        finally:
            for _, process in apps.values():
                process.terminate()
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
