"""A burst's requests reach the worker's line a few milliseconds apart, each prepared on an intake
thread: the worker waits (at most `gather_s`) for those still being prepared before it starts the
ones ready, so one prefill takes them all (EngineWorker._gather). A lone request waits for nobody,
and a playing stream low on audio is never made to wait for a burst."""
from __future__ import annotations

import threading
import time

from inference import SynthesisRequest
from inference.serving.worker import EngineWorker

from ..fixtures.engines import StandInEngine
from ..support.app_helpers import wait_until


class SlowToPrepare(StandInEngine):
    """A request whose text starts with "Slow" is prepared only once `release` is set."""

    def __init__(self):
        super().__init__(rows=8)
        self.release = threading.Event()

    def prepare(self, req):
        if req.text.startswith("Slow"):
            self.release.wait(10)
        return super().prepare(req)


def starts(gather_s: float, slack: float | None = None) -> tuple[float, float, float]:
    """(when the quick request started, when the slow one was ready, when the slow one started)."""
    engine = SlowToPrepare()
    engine.listeners_slack = slack
    worker = EngineWorker(engine, gather_s=gather_s)
    try:
        slow = worker.submit(SynthesisRequest(text="Slow to prepare.", max_len=3))
        wait_until(lambda: slow.state == "preparing")
        quick = worker.submit(SynthesisRequest(text="Quick.", max_len=3))
        wait_until(lambda: quick.state != "preparing")
        threading.Event().wait(0.05)  # the slow one is ready this much later than the quick one
        ready = time.perf_counter()
        engine.release.set()
        list(quick), list(slow)
        return quick.started_at, ready, slow.started_at
    finally:
        worker.close()


def test_the_ready_requests_of_a_burst_wait_for_those_being_prepared_and_start_together():
    quick, ready, slow = starts(gather_s=1.0)
    assert quick >= ready and abs(slow - quick) < 0.01


def test_without_gathering_the_ready_request_starts_at_once():
    quick, ready, slow = starts(gather_s=0.0)
    assert quick < ready <= slow


def test_nobody_is_made_to_wait_while_a_playing_stream_is_low_on_audio():
    quick, ready, slow = starts(gather_s=1.0, slack=0.05)
    assert quick < ready <= slow


def test_a_lone_request_waits_for_nobody():
    worker = EngineWorker(StandInEngine(rows=2), gather_s=5.0)
    try:
        job = worker.submit(SynthesisRequest(text="Alone.", max_len=2))
        list(job)
        assert job.started_at - job.queued_at < 1.0
    finally:
        worker.close()
