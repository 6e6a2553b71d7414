"""The loads of bench/http_load.py sent from several client processes at once.

One Python process reading 64 streams parses every frame of all of them on one event loop, so a
slow client can pass for a slow server. Here each of N processes sends its share (every N-th
request of a burst, or a Poisson stream at rate / N: together still Poisson at the full rate) from
one shared start time on the perf_counter clock, which on Linux is the system's monotonic clock and
so the same in every process.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time

from bench import http_load

START_MARGIN_S = 5.0  # every process started and connected before the load begins


def shifted(i: int, fn, k: int, n: int):
    """fn of the request's index in the whole load, from its index in process k's share."""
    return fn(k + n * i)


def _part(kind: str, k: int, n: int, url: str, size: float, duration: float, body, leave, start_at: float):
    body, leave = functools.partial(shifted, fn=body, k=k, n=n), functools.partial(shifted, fn=leave, k=k, n=n)
    if kind == "burst":
        share = len(range(k, int(size), n))
        return asyncio.run(http_load.burst(url, share, body, leave, start_at=start_at))
    return asyncio.run(http_load.poisson(url, size / n, duration, body, leave, seed=k, start_at=start_at))


def run(kind: str, processes: int, url: str, size: float, body, leave, duration: float = 0.0):
    """(results, wall seconds) of a burst of `size` requests or Poisson arrivals at `size` per second
    for `duration` seconds, split over `processes` client processes. body and leave: picklable."""
    start_at = time.perf_counter() + START_MARGIN_S
    with concurrent.futures.ProcessPoolExecutor(processes) as pool:
        futures = [pool.submit(_part, kind, k, processes, url, size, duration, body, leave, start_at)
                   for k in range(processes)]
        parts = [f.result() for f in futures]
    return [r for results, _ in parts for r in results], max(wall for _, wall in parts)
