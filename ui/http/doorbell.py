"""Waking coroutines of the event loop from the worker's thread, once per burst of events.

After each engine step the worker hands every running job its chunk and wakes the coroutine that
waits for it (Job.watch). `loop.call_soon_threadsafe` writes a byte to the loop's self-pipe: a
system call, around which the worker lets go of the GIL. With 128 streams that was 128 times a
step, and each time the loop (busy sending frames) could keep the GIL for up to
`sys.getswitchinterval()` before the worker got it back: the GPU's thread waited on HTTP.

A Doorbell collects the events to set and asks the loop once for all of those that arrive before
it runs (a later ring asks again), so the worker's hand-over does one such call per step.
"""
from __future__ import annotations

import asyncio
import collections
import weakref

_BELLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> its Doorbell


class Doorbell:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = weakref.ref(loop)  # not a strong one: _BELLS would then keep every loop alive
        self.pending: collections.deque[asyncio.Event] = collections.deque()
        self.asked = False

    def ring(self, event: asyncio.Event):
        """From any thread: `event` is set on the loop soon. A closed or collected loop (the app
        shutting down) has nobody waiting: the ring is dropped, and nothing piles up."""
        self.pending.append(event)
        if self.asked:  # the loop has not run the call below yet: it will take this event too
            return
        self.asked = True
        try:
            loop = self.loop()
            if loop is None:
                raise RuntimeError("the loop is gone")
            loop.call_soon_threadsafe(self._answer)
        except RuntimeError:
            self.pending.clear()
            self.asked = False

    def _answer(self):  # on the loop
        # Cleared before the events are taken: a ring after this line asks again, one before it
        # is in `pending` and set below.
        self.asked = False
        while self.pending:
            self.pending.popleft().set()


def doorbell(loop: asyncio.AbstractEventLoop) -> Doorbell:
    """The loop's one Doorbell (made on first use, on the loop's own thread)."""
    bell = _BELLS.get(loop)
    if bell is None:
        bell = _BELLS[loop] = Doorbell(loop)
    return bell
