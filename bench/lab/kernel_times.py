"""Where one call's GPU time goes: its CUDA kernels by name, with calls and milliseconds."""
from __future__ import annotations

import collections

import torch


def by_kernel(fn, width: int = 90) -> dict[str, list]:
    """{kernel name (cut to `width`): [calls, ms]} for one call of fn (already warmed up)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()  # deliberate: the profiler reads the kernels once they have run
    spent = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            spent[e.name[:width]][0] += 1
            spent[e.name[:width]][1] += e.device_time_total / 1e3
    return dict(spent)


def in_order(fn, width: int = 60) -> list[tuple[str, float]]:
    """(kernel name cut to `width`, ms) for each launch of one call of fn, in launch order: a
    decoder's launches follow its layers, so the list says which layer each kernel belongs to."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()  # deliberate: the profiler reads the kernels once they have run
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    return [(e.name[:width], e.device_time_total / 1e3) for e in events]


def print_top(spent: dict[str, list], top: int, indent: str = "    ") -> None:
    for name, (calls, ms) in sorted(spent.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{indent}{ms:8.3f} ms {calls:4d} calls  {name}")
