"""Work to run on the thread that owns an engine, between two steps (an offline decode), each
with the future its caller waits on. Not thread-safe by itself: the worker holds its own lock
around add() and take(), and runs what it took outside it."""
from __future__ import annotations

import collections
import concurrent.futures
from typing import Any, Callable


class EngineCalls:
    def __init__(self):
        self._pending: collections.deque = collections.deque()  # (fn, future)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, fn: Callable[[Any], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._pending.append((fn, future))
        return future

    def take(self) -> list:
        taken, self._pending = list(self._pending), collections.deque()
        return taken

    def refuse(self, exc: BaseException):
        """Every pending call fails with `exc` (the worker is closing)."""
        for _, future in self.take():
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)


def run_calls(calls: list, engine):
    """fn(engine) of each call taken; its future gets the result or the exception."""
    for fn, future in calls:
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(fn(engine))
        except Exception as exc:  # the caller gets it; the loop goes on
            future.set_exception(exc)
