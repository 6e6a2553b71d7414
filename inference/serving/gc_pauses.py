"""Python's garbage collector in a serving process: settled after warm-up, its pauses timed.

A full (generation 2) collection walks every object the collector tracks, holding the GIL. Once
torch, Gradio and the model are loaded that is about half a million objects and 100-200 ms: every
stream stalls together, the engine's thread and the event loop alike (a 184 ms collection stalled
a stand-in engine's step from 40 to 225 ms, docs/benchmarks.md). The allocations of streaming
(frames, chunks, dicts per patch) trigger such collections every few seconds under load.

`settle()`, once the app is warm, collects what is garbage then and moves every object still
alive into the permanent generation (gc.freeze), which no collection walks: later collections
look only at what requests made since. `PauseWatch` times each collection (gc.callbacks), so
/metrics shows the pauses and a long one is logged.
"""
from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger("voxcpm.gc")
LONG_S = 0.05  # a pause longer than this is logged: it is a visible stall in every stream


def settle() -> int:
    """Collects, then freezes every object alive now; the number frozen. Pauses are logged from
    here on (before, while the app loads, nobody is listening)."""
    gc.collect()
    gc.freeze()
    _WATCH.serving = True
    return gc.get_freeze_count()


class PauseWatch:
    """Collections and their seconds per generation, since install(); one per process."""

    def __init__(self):
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._started: float | None = None
        self.serving = False  # log long pauses (settle() sets it)
        self._lock = threading.Lock()

    def __call__(self, phase: str, info: dict):
        # The collector runs these on whichever thread allocated; it holds the GIL throughout, so
        # one collection's start and stop are never interleaved with another's.
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:  # installed during a collection
            return
        spent, generation = time.perf_counter() - self._started, info["generation"]
        self._started = None
        with self._lock:
            self.count[generation] += 1
            self.seconds[generation] += spent
            self.longest[generation] = max(self.longest[generation], spent)
        if spent > LONG_S and self.serving:
            log.warning("garbage collection of generation %d held every thread for %.0f ms (%d objects freed)",
                        generation, spent * 1e3, info["collected"])

    def snapshot(self) -> dict:
        with self._lock:
            return {"count": list(self.count), "seconds": list(self.seconds), "longest": list(self.longest)}


_WATCH = PauseWatch()


def watch() -> PauseWatch:
    """The process's PauseWatch, installed in gc.callbacks on first use."""
    if _WATCH not in gc.callbacks:
        gc.callbacks.append(_WATCH)
    return _WATCH
