"""The event loop's doorbell (ui/http/doorbell.py): the worker's thread wakes any number of waiting
coroutines after a step with one call into the loop, and no wake is lost."""
from __future__ import annotations

import asyncio
import gc
import threading
import weakref

from ui.http.doorbell import Doorbell, doorbell


class CountingLoop(asyncio.SelectorEventLoop):
    """A real loop that counts the calls other threads make into it."""

    def __init__(self):
        super().__init__()
        self.threadsafe_calls = 0

    def call_soon_threadsafe(self, callback, *args, **kwargs):
        self.threadsafe_calls += 1
        return super().call_soon_threadsafe(callback, *args, **kwargs)


def run_on_thread(fn):
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


def test_a_step_of_many_wakes_costs_the_loop_one_call_and_sets_every_event():
    loop = CountingLoop()
    try:
        async def main():
            bell, events = doorbell(asyncio.get_running_loop()), [asyncio.Event() for _ in range(128)]
            assert doorbell(asyncio.get_running_loop()) is bell  # one per loop
            run_on_thread(lambda: [bell.ring(e) for e in events])  # the loop is not running meanwhile
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 5)
            first = loop.threadsafe_calls
            later = asyncio.Event()
            run_on_thread(lambda: bell.ring(later))  # after the answer: asks the loop again
            await asyncio.wait_for(later.wait(), 5)
            return first, loop.threadsafe_calls - first
        assert loop.run_until_complete(main()) == (1, 1)
    finally:
        loop.close()


def test_rings_racing_the_answer_are_never_lost():
    loop = asyncio.new_event_loop()
    try:
        async def main():
            bell = doorbell(asyncio.get_running_loop())
            events = [asyncio.Event() for _ in range(20_000)]
            threads = [threading.Thread(target=lambda part=part: [bell.ring(e) for e in part])
                       for part in (events[0::2], events[1::2])]  # two workers (a pool of two GPUs)
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                await asyncio.sleep(0)  # answers while the rings go on
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 10)
            return bell
        assert not loop.run_until_complete(main()).pending
    finally:
        loop.close()


def test_a_ring_after_the_loop_closed_is_dropped():
    loop = asyncio.new_event_loop()
    bell = Doorbell(loop)
    loop.close()
    events = [asyncio.Event() for _ in range(3)]
    for event in events:
        bell.ring(event)  # the app shutting down: nobody waits, nothing raises
    assert not any(e.is_set() for e in events)
    assert not bell.pending, "rings nobody will answer must not pile up"


def test_a_bell_does_not_keep_its_loop_alive():
    loop = asyncio.new_event_loop()
    bell = doorbell(loop)
    gone = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert gone() is None
    bell.ring(asyncio.Event())
    assert not bell.pending
