"""EngineWorker: one thread owns the engine; jobs run in order, cancel within a patch, fail alone."""
from __future__ import annotations

import logging
import os
import threading
import uuid

import numpy as np
import pytest

from inference import InputError, SynthesisRequest
from inference.errors import QueueFullError
from inference.serving.delivery import INTERNAL_ERROR
from inference.serving.interfaces import BatchEngine, EngineStream, Serving
from inference.serving.job import JobFailed, JobIds
from inference.serving.worker import EngineWorker

from ..support.app_helpers import load_engine, reference_engine, wait_until
from ..fixtures.engines import EngineWrapper, StandInEngine, burst


class Flaky(EngineWrapper):
    """The real engine, except that text "boom" raises an unexpected error, as a bug would."""

    def __init__(self, engine):
        super().__init__(engine)
        self.threads = set()

    def start(self, req, listener=None):
        self.threads.add(threading.get_ident())
        if req.request.text == "boom":
            raise RuntimeError("/secret/path/model.py exploded")
        return self.engine.start(req, listener)

    def step(self):
        self.threads.add(threading.get_ident())
        return self.engine.step()


@pytest.fixture(scope="module")
def engine():
    return Flaky(load_engine())


@pytest.fixture(scope="module")
def one_row():
    """An engine that runs one stream at a time: later jobs wait in line."""
    return Flaky(load_engine(max_streams=1))


def short(text="Hello world, this is a test.", seed=1, **kw):
    return SynthesisRequest(text, seed=seed, max_len=kw.pop("max_len", 3), **kw)


def long(seed=2):
    # min_len keeps the random stop head from ending it: hundreds of patches unless cancelled.
    return SynthesisRequest("Hello world, this is a long test sentence for the voice.", seed=seed,
                            min_len=300, max_len=300)


def test_chunks_equal_synthesize_and_one_thread_runs_the_engine(engine):
    worker = EngineWorker(engine)
    jobs = [worker.submit(short(seed=s)) for s in (1, 2, 3)]
    for seed, job in zip((1, 2, 3), jobs):
        audio = np.concatenate(list(job))
        want = reference_engine().synthesize(short(seed=seed))
        # The three run as one batch, whose matrix kernels round slightly differently on the CPU.
        assert audio.shape == want.shape and np.linalg.norm(audio - want) / np.linalg.norm(want) < 1e-5
        assert job.state == "done" and job.outcome == "ok"
        assert job.status()["samples"] == audio.shape[0] == job.patches * 7680
    assert engine.threads == {worker.thread_id}


def test_jobs_run_together_up_to_the_engine_rows(engine):
    worker = EngineWorker(engine)
    jobs = [worker.submit(long(seed=s)) for s in (1, 2, 3)]
    wait_until(lambda: all(job.state == "running" for job in jobs) and worker.running == 3)
    for job in jobs:
        kind, _ = job.next_event(timeout=60)
        assert kind == "chunk" and job.position == 0
        job.cancel()
    wait_until(lambda: not worker.busy)


def test_jobs_wait_in_order_for_a_free_row_and_report_their_position(one_row):
    worker = EngineWorker(one_row)
    first = worker.submit(long())
    wait_until(lambda: first.state == "running")
    later = [worker.submit(short(seed=s)) for s in (4, 5, 6)]
    assert [job.position for job in later] == [1, 2, 3]
    assert first.position == 0
    first.cancel()
    for job in later:
        list(job)
    starts = [job.started_at for job in [first, *later]]
    assert starts == sorted(starts)
    assert all(job.position == 0 for job in later)


def test_cancel_stops_within_one_patch(engine):
    worker = EngineWorker(engine)
    job = worker.submit(long())
    kind, _ = job.next_event(timeout=60)
    assert kind == "chunk"
    made = job.patches
    job.cancel()
    list(job)  # ends instead of running to 300 patches
    wait_until(lambda: job.state == "cancelled" and not worker.busy)
    assert job.patches <= made + 1  # at most the patch already under way
    assert job.outcome == "cancelled" and job.request is None


def test_cancelled_queued_job_never_reaches_the_engine(one_row):
    worker = EngineWorker(one_row)
    running = worker.submit(long())
    wait_until(lambda: running.state == "running")
    queued = worker.submit(short())
    queued.cancel()
    assert queued.state == "cancelled" and queued.position == 0 and worker.waiting == 0
    assert list(queued) == []
    running.cancel()
    wait_until(lambda: not worker.busy)
    assert queued.started_at is None


def test_full_queue_is_refused_at_once(one_row):
    worker = EngineWorker(one_row, max_queue=1)
    running = worker.submit(long())
    wait_until(lambda: running.state == "running")
    waiting = worker.submit(short())
    with pytest.raises(QueueFullError, match="busy"):
        worker.submit(short())
    running.cancel()
    assert len(np.concatenate(list(waiting))) > 0  # the slot was freed and the waiting job ran


def test_a_failing_request_fails_alone(engine, caplog):
    worker = EngineWorker(engine)
    caplog.set_level(logging.INFO, logger="voxcpm.worker")
    boom = worker.submit(short(text="boom"))
    # A bad clip is refused by serving's checks: its job ends refused, saying why, and runs nothing.
    bad = worker.submit(short(reference_audio=(16000, np.zeros(0, np.float32))), job_id="bad-audio")
    with pytest.raises(JobFailed, match="no samples"):
        list(bad)
    assert bad.state == "refused" and bad.outcome == "input_error" and isinstance(bad.refusal, InputError)
    assert worker.get("bad-audio").status()["error"] == str(bad.refusal), "listed, with why"
    fine = worker.submit(short())
    with pytest.raises(JobFailed) as failure:
        list(boom)
    assert str(failure.value) == INTERNAL_ERROR and "/secret" not in str(failure.value)
    assert len(np.concatenate(list(fine))) > 0
    text = caplog.text
    assert "exploded" in text  # the traceback stays in the server log
    assert "outcome=error" in text and "outcome=ok" in text
    assert "mode=design text_chars=28" in text and "ttfp=" in text and "rtf=" in text and "patches=" in text


def test_close_cancels_and_ends_the_thread(one_row):
    worker = EngineWorker(one_row)
    running = worker.submit(long())
    wait_until(lambda: running.state == "running")
    queued = worker.submit(short())
    worker.close()
    assert not worker.alive
    assert running.state == "cancelled" and queued.state == "cancelled"
    with pytest.raises(QueueFullError):
        worker.submit(short())


def test_warm_up_runs_on_the_worker_thread():
    class Recorder(StandInEngine):
        def warmup(self):
            self.thread = threading.get_ident()
            return 0.0

    engine = Recorder()
    worker = EngineWorker(engine, warm_up=True)
    assert worker.ready.wait(10)
    assert engine.thread == worker.thread_id
    worker.close()


def test_a_failed_warm_up_is_kept_for_the_app_to_stop_on():
    class Broken(StandInEngine):
        def warmup(self):
            raise RuntimeError("no GPU memory left for the graphs")

    worker = EngineWorker(Broken(), warm_up=True)
    assert worker.ready.wait(10)
    assert isinstance(worker.warmup_error, RuntimeError) and "graphs" in str(worker.warmup_error)
    worker.close()


def test_duplicate_ids_are_refused(engine):
    worker = EngineWorker(engine)
    job = worker.submit(short(), job_id="abcdefgh")
    with pytest.raises(InputError):
        worker.submit(short(), job_id="abcdefgh")
    list(job)
    assert worker.get("abcdefgh") is job


def test_a_consumer_that_stops_reading_is_cut_off(engine, caplog):
    caplog.set_level(logging.INFO, logger="voxcpm.worker")
    worker = EngineWorker(engine, max_backlog_s=0.5)  # half a second behind its listener's clock
    job = worker.submit(long())  # nobody reads it
    wait_until(lambda: job.state == "failed", timeout=60)
    assert job.outcome == "too_slow" and "fell more than 0.5 s" in job.error
    behind = job.listener.behind()
    assert 0.5 < behind < 2.0 and job.patches < 300, f"stopped {behind:.2f} s behind"
    assert "outcome=too_slow" in caplog.text
    assert len(np.concatenate(list(worker.submit(short())))) > 0  # the worker goes on


def test_discarding_a_finished_job_drops_its_unread_audio(engine):
    worker = EngineWorker(engine)
    job = worker.submit(short(max_len=3))
    wait_until(lambda: job.state == "done")
    assert job.unread_chunks() > 0
    job.discard()
    assert job.unread_chunks() == 0 and job.state == "done"


@pytest.fixture()
def stand_in():
    engine = StandInEngine(rows=32)
    yield engine
    engine.gate.set()  # a failed test must not leave its worker waiting in step()


def test_a_burst_that_fits_the_free_rows_is_accepted_whole(stand_in):
    worker = EngineWorker(stand_in, max_queue=4)
    stand_in.gate.clear()  # the first job holds the loop in step(): the rest of the burst waits in line
    jobs, refused = burst(worker, 24)
    assert refused == 0 and worker.held == 24  # 24 > max_queue, but 32 rows are free
    stand_in.gate.set()
    for job in jobs:
        assert len(np.concatenate(list(job))) == 3 * stand_in.patch_samples and job.outcome == "ok"
    assert [req.text for req in stand_in.started] == [f"Request {i}." for i in range(24)]  # in arrival order
    worker.close()


def test_only_the_excess_over_rows_and_line_is_refused(stand_in):
    worker = EngineWorker(stand_in, max_queue=4)
    stand_in.gate.clear()
    jobs, refused = burst(worker, 32 + 4 + 3)
    assert refused == 3 and [job.id for job in jobs] == [f"burst-{i}" for i in range(36)]
    with pytest.raises(QueueFullError, match="busy: all 32 streams are in use"):
        worker.submit(short())
    stand_in.gate.set()
    assert all(len(np.concatenate(list(job))) > 0 and job.outcome == "ok" for job in jobs)
    assert len(np.concatenate(list(worker.submit(short())))) > 0  # room again once they ended
    worker.close()


def test_engines_and_streams_and_the_worker_have_the_shapes_the_layers_rely_on(engine, stand_in):
    real = reference_engine()  # the test thread's own engine
    assert isinstance(real, BatchEngine) and isinstance(stand_in, BatchEngine) and isinstance(engine, BatchEngine)
    stream = real.start(short())
    assert isinstance(stream, EngineStream) and isinstance(stand_in.start(short()), EngineStream)
    real.stop(stream)
    worker = EngineWorker(stand_in)
    assert isinstance(worker, Serving)
    assert worker.gpus() == [{"device": "cpu", "rows": 32, "rows_in_use": 0, "waiting": 0, "alive": True,
                              "failing": False}]
    worker.close()


def test_a_finished_job_lets_go_of_its_engine_stream_and_latents_once_they_are_filed():
    # Finished jobs stay listed (keep_finished) for their status: a minute-long take's latents and
    # its stream's text plan must not stay with each of them.
    from inference.serving.latent_store import LatentStore

    store = LatentStore(max_bytes=2**20, ttl_s=60)
    worker = EngineWorker(StandInEngine(rows=2), latents=store)
    try:
        job = worker.submit(SynthesisRequest(text="Kept for its render.", max_len=5))
        list(job)
        wait_until(lambda: job.state == "done")
        assert store.get(job.id) is not None, "its latents were filed for the offline render"
        assert job.stream is None and job.latents == [] and job.pauses == []
    finally:
        worker.close()


def test_finished_jobs_kept_for_their_status_leave_room_in_the_line_and_cancelled_ones_too():
    engine = StandInEngine(rows=2)
    worker = EngineWorker(engine, max_queue=1, keep_finished=50)
    try:
        done, _ = burst(worker, 3, prefix="done")
        for job in done:
            list(job)  # played to the end: finished, still listed
        engine.gate.clear()  # from here the engine makes nothing: what is accepted stays held
        held, refused = burst(worker, 5, prefix="held")
        assert (len(held), refused) == (3, 2), "2 rows and 1 place in line, whatever finished before"
        held[-1].cancel()
        assert wait_until(lambda: worker.held == 2, timeout=10), worker.held
        more, refused = burst(worker, 2, prefix="more")
        assert (len(more), refused) == (1, 1)  # the cancelled job's place is free again, and only it
        assert worker.get("done-0") is not None  # the finished ones are still there to be asked
    finally:
        engine.gate.set()
        worker.close()


def test_a_jobs_id_is_drawn_outside_the_lines_lock(stand_in, monkeypatch):
    """Reading the OS's randomness for an id may hand the GIL away: drawn while the line's lock is
    held, every thread that waits for that lock (the intake's, the engine's) waits for the event
    loop to get the GIL back. While the id is drawn, another thread can read the line at once."""
    from inference.serving import worker as worker_module

    worker = EngineWorker(stand_in, max_queue=4)
    seen = []

    def drawn_while_another_thread_reads_the_line():
        reader = threading.Thread(target=lambda: seen.append(worker.waiting))
        reader.start()
        reader.join(timeout=2.0)  # blocks the whole 2 s if this thread holds the lock
        seen.append(reader.is_alive())
        return f"id-{len(seen)}"
    monkeypatch.setattr(worker_module, "new_job_id", drawn_while_another_thread_reads_the_line)
    job = worker.submit(short())
    assert seen[-1] is False and len(seen) == 2, seen  # the reader got its answer while the id was drawn
    assert len(np.concatenate(list(job))) > 0
    worker.close()


def test_job_ids_are_unguessable_and_the_os_is_asked_once_per_batch(monkeypatch):
    """A job's id is what cancels it (POST /voxcpm/jobs/{id}/cancel), so each is a UUID4 of the OS's
    randomness; the event loop draws one per request, and each read of that randomness is a system
    call that hands the GIL to another thread, so they are read BATCH at a time."""
    reads = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: reads.append(n) or real(n))
    ids = JobIds()
    drawn = [ids() for _ in range(JobIds.BATCH)]
    assert len(set(drawn)) == JobIds.BATCH and len(reads) == 1
    assert all(len(i) == 32 and uuid.UUID(hex=i).version == 4 for i in drawn)
    ids()
    assert len(reads) == 2


def test_a_burst_after_start_starts_no_thread_on_the_callers_thread(stand_in, monkeypatch):
    """The intake threads all run before the first request: a pool that grew on demand would start
    them inside submit(), on the event loop, where each start waits for the new thread to run."""
    worker = EngineWorker(stand_in, max_queue=16, prepare_threads=6)
    assert worker.ready.wait(10)
    started = []
    real = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda t: started.append(t.name) or real(t))
    jobs = [worker.submit(short(seed=s)) for s in range(12)]
    assert started == []
    assert all(len(np.concatenate(list(job))) > 0 for job in jobs)
    worker.close()


def test_a_finished_jobs_status_does_not_ask_the_line(monkeypatch):
    """A stream's final status frame is built on the event loop: a job out of the line answers its
    position (0) itself, without the line's lock; one waiting in it still asks."""
    stand_in = StandInEngine(rows=1)  # one row: the second job waits in line
    worker = EngineWorker(stand_in, max_queue=4)
    asked = []
    real = worker.position
    monkeypatch.setattr(worker, "position", lambda job: asked.append(job.id) or real(job))
    job = worker.submit(short())
    assert len(np.concatenate(list(job))) > 0 and job.state == "done"
    asked.clear()
    assert job.status()["position"] == 0 and asked == []
    stand_in.gate.clear()  # the next job holds the loop in step() and the row: the one after waits in line
    first, second = worker.submit(short()), worker.submit(short(seed=3))
    wait_until(lambda: first.state == "running" and second.state == "queued")
    assert second.status()["position"] == 1 and asked == [second.id]
    stand_in.gate.set()
    assert len(np.concatenate(list(first))) > 0 and len(np.concatenate(list(second))) > 0
    worker.close()
