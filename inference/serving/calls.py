"""Work to run on the thread that owns an engine, between two steps (a piece of an offline
decode, a reference clip's encoding), each with the future its caller waits on. Not thread-safe by
itself: the worker holds its own lock around add() and take(), and runs what it took outside it.

The worker takes one call per turn of its loop, oldest first: live streams step between any two
calls, so however many calls are waiting, a stream waits for at most one of them per patch. Long
work is therefore split by its caller into short calls (an offline render decodes a few patches
per call), each queued after the previous one ended: several such callers take turns."""
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
        """The oldest pending call (a list of one), or none."""
        return [self._pending.popleft()] if self._pending else []

    def refuse(self, exc: BaseException):
        """Every pending call fails with `exc` (the worker is closing)."""
        taken, self._pending = list(self._pending), collections.deque()
        for _, future in taken:
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
