"""CUDA graphs around the step functions: the same function runs eagerly or is replayed.

`CUDAGraphed(fn)` calls `fn(*key)` until a graph has been captured for that key (a batch bucket,
an attention span, a prefill length); from then on it replays the graph. So the eager path (CPU,
`cuda_graphs=False`, keys never captured) and the graph path run one function, and capture is
the only switch.
"""
from __future__ import annotations

import threading
from typing import Callable

import torch

# One capture at a time in the process: entering torch.cuda.graph empties the allocator cache of
# every GPU, which must not happen while another thread (another GPU's engine) is capturing.
CAPTURE_LOCK = threading.Lock()


class CUDAGraphed:
    def __init__(self, fn: Callable[..., None]):
        self.fn = fn
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}

    def capture(self, key: tuple, pool, stream: torch.cuda.Stream):
        """fn(*key) must read and write only static tensors, and have run once eagerly with the
        same key (kernels compiled and loaded, allocator grown) before it is captured."""
        graph = torch.cuda.CUDAGraph()
        # thread_local: only this thread is barred from unsafe calls (cudaMalloc, syncs) while it
        # captures; the default ("global") would fail another GPU's worker doing its own work.
        with CAPTURE_LOCK, torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
            self.fn(*key)
        self.graphs[key] = graph

    def __call__(self, *key):
        graph = self.graphs.get(key)
        if graph is None:
            self.fn(*key)
        else:
            graph.replay()

    @property
    def captured(self) -> int:
        return len(self.graphs)
