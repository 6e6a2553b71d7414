"""WorkerPool: several real (tiny, CPU) engines behind one worker API. Requests go to the engine with
the most free rows, job ids are unique across engines, and a failing engine fails only its own
requests while the others keep serving."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from inference import InputError, SynthesisRequest
from inference.runtime.engine import WARMUP_LOCK
from inference.serving.delivery import INTERNAL_ERROR
from inference.serving.interfaces import Serving
from inference.serving.job import JobFailed
from inference.serving.pool import FAILURES_TO_AVOID, WorkerPool, gpu_status

from ..support.app_helpers import load_engine, reference_engine, wait_until
from ..fixtures.engines import EngineWrapper, StandInEngine, burst


class Broken(EngineWrapper):
    """A real engine whose step fails as a lost GPU's does, once `broken` is set."""

    def __init__(self, engine):
        super().__init__(engine)
        self.broken = threading.Event()

    def step(self):
        if self.broken.is_set():
            raise RuntimeError("CUDA error: unspecified launch failure")
        return self.engine.step()


class Dying(Broken):
    """Once broken, asking for its free rows raises outside the loop's error handling: the
    worker's thread dies with a job in its line."""

    @property
    def free_rows(self):
        if self.broken.is_set():
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.engine.free_rows


class SlowWarmUp(Broken):
    """warmup() waits for `go`, then fails if `broken` is set (as an out-of-memory capture would)."""

    def __init__(self, engine):
        super().__init__(engine)
        self.go = threading.Event()

    def warmup(self):
        self.go.wait(30)
        if self.broken.is_set():
            raise RuntimeError("CUDA error: out of memory")
        return 0.0


@pytest.fixture(scope="module")
def engines():
    """Three engines: rows 1, 3 and 2."""
    return [load_engine(max_streams=1), load_engine(max_streams=3), load_engine(max_streams=2)]


@pytest.fixture()
def make_pool():
    pools = []

    def make(engines, **options):
        pools.append(WorkerPool(engines, **options))
        return pools[-1]
    yield make
    for pool in pools:
        pool.close()


def short(seed=1, max_len=3):
    return SynthesisRequest("Hello world, this is a test.", seed=seed, max_len=max_len)


def long(seed=2):
    # min_len keeps the random stop head from ending it: hundreds of patches unless cancelled.
    return SynthesisRequest("Hello world, this is a long test sentence for the voice.", seed=seed,
                            min_len=300, max_len=300)


def engine_of(pool, job):
    return pool.worker_of(job).engine


def settle(pool):
    """Until every job the pool gave out has finished and been counted."""
    wait_until(lambda: all(w.held == 0 for w in pool.workers)
               and all(g["rows_in_use"] == 0 and g["waiting"] == 0 for g in pool.gpus()), timeout=60)


def test_each_request_goes_to_the_engine_with_most_free_rows(engines, make_pool):
    one, three, _ = engines
    pool = make_pool([one, three])
    jobs = [pool.submit(long(seed=s)) for s in range(4)]
    # free rows (1, 3) -> three; (1, 2) -> three; (1, 1) tie, same line -> the first; (0, 1) -> three
    assert [engine_of(pool, j) for j in jobs] == [three, three, one, three]
    wait_until(lambda: [g["rows_in_use"] for g in pool.gpus()] == [1, 3])
    # All rows taken: the fifth waits where the line is shorter (ties: the first engine).
    fifth = pool.submit(long(seed=5))
    sixth = pool.submit(long(seed=6))
    assert {engine_of(pool, fifth), engine_of(pool, sixth)} == {one, three}
    assert [g["waiting"] for g in pool.gpus()] == [1, 1]
    for job in jobs + [fifth, sixth]:
        job.cancel()
    settle(pool)
    assert engine_of(pool, pool.submit(short())) is three  # rows freed by cancelled jobs count again


def test_job_ids_are_unique_across_engines_and_get_finds_any(engines, make_pool):
    pool = make_pool(engines)
    jobs = [pool.submit(long(seed=s)) for s in range(5)]
    assert len({j.id for j in jobs}) == 5
    assert len({id(engine_of(pool, j)) for j in jobs}) == 3  # spread over all three
    for job in jobs:
        assert pool.get(job.id) is job
    named = pool.submit(short(), job_id="mine")
    with pytest.raises(InputError, match="already in use"):
        pool.submit(short(), job_id="mine")  # the free engines would take it: the id is checked pool-wide
    assert pool.get("mine") is named and pool.get("nobody") is None
    for job in jobs:
        job.cancel()
    list(named)
    settle(pool)


def test_audio_through_the_pool_equals_one_engine(engines, make_pool):
    pool = make_pool(engines)
    jobs = [pool.submit(short(seed=s)) for s in (1, 2, 3)]
    assert len({id(engine_of(pool, j)) for j in jobs}) >= 2
    for seed, job in zip((1, 2, 3), jobs):
        audio = np.concatenate(list(job))
        want = reference_engine().synthesize(short(seed=seed))
        assert audio.shape == want.shape and np.linalg.norm(audio - want) / np.linalg.norm(want) < 1e-5
        assert job.outcome == "ok"
    assert pool.sample_rate == reference_engine().sample_rate


def test_a_failing_engine_fails_only_its_requests_and_is_then_avoided(engines, make_pool):
    broken = Broken(engines[2])
    pool = make_pool([broken, engines[1]])
    broken.broken.set()
    # Two requests at a time: the first goes to the 3-row engine, the second (2 free rows each, the
    # tie going to the first engine) to the broken one, until that one is marked failing.
    for seed in range(FAILURES_TO_AVOID):
        good, bad = pool.submit(short(seed=seed)), pool.submit(short(seed=seed + 10))
        assert engine_of(pool, good) is engines[1] and engine_of(pool, bad) is broken
        with pytest.raises(JobFailed, match="internal error"):
            list(bad)
        assert bad.error == INTERNAL_ERROR and bad.outcome == "error"
        assert len(np.concatenate(list(good))) > 0 and good.outcome == "ok"
    wait_until(lambda: pool.gpus()[0]["failing"])
    later = [pool.submit(short(seed=s)) for s in range(3)]
    assert all(engine_of(pool, j) is engines[1] for j in later)  # the failing GPU gets none
    assert all(len(np.concatenate(list(j))) > 0 for j in later)
    status = pool.gpus()
    assert status[0]["alive"] and status[0]["failing"] and not status[1]["failing"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_worker_thread_fails_its_jobs_and_gets_no_more(engines, make_pool):
    dying = Dying(engines[2])
    pool = make_pool([dying, engines[1]])
    busy = pool.submit(long())  # on the 3-row engine (more free rows), before anything breaks
    assert engine_of(pool, busy) is engines[1]
    dying.broken.set()
    lost = pool.submit(short())  # on the dying engine: its thread dies with this job in line
    assert engine_of(pool, lost) is dying
    assert lost.next_event(timeout=10) == ("error", INTERNAL_ERROR)  # not left waiting forever
    assert lost.state == "failed" and lost.outcome == "error"
    assert pool.gpus()[0]["alive"] is False
    later = [pool.submit(short(seed=s)) for s in range(3)]
    assert all(engine_of(pool, j) is engines[1] for j in later)
    assert all(len(np.concatenate(list(j))) > 0 for j in later)
    assert busy.state == "running"  # the other GPU's running request goes on
    busy.cancel()


def test_ready_waits_for_every_warm_up_and_a_failed_warm_up_is_avoided(engines, make_pool):
    slow, failing = SlowWarmUp(engines[2]), SlowWarmUp(engines[1])
    failing.broken.set()
    pool = make_pool([failing, slow], warm_up=True)
    failing.go.set()
    assert not pool.ready.wait(0.5)  # one engine still warms up
    slow.go.set()
    assert pool.ready.wait(10)
    status = gpu_status(pool)
    assert [g["failing"] for g in status] == [True, False]
    job = pool.submit(short())  # the engine whose warm-up failed has more free rows, but is avoided
    assert engine_of(pool, job) is slow
    assert len(np.concatenate(list(job))) > 0


def test_warm_ups_take_turns_each_on_its_own_worker_thread(make_pool):
    # torch.compile cannot trace on one thread while another calls compiled code (it failed on
    # two H200s): the real warm-ups wait for the process-wide lock, one engine at a time.
    engines = [load_engine(max_streams=1, warmup=False) for _ in range(2)]
    with WARMUP_LOCK:
        pool = make_pool(engines, warm_up=True)
        assert not pool.ready.wait(5.0)  # a warm-up of the tiny engine takes about 1 s
        assert all(e.warmup_seconds is None for e in engines)  # both wait for their turn
    assert pool.ready.wait(60)
    assert all(e.warmup_seconds is not None for e in engines)
    assert [g["failing"] for g in pool.gpus()] == [False, False]
    assert len(np.concatenate(list(pool.submit(short())))) > 0


def test_a_burst_fills_every_row_and_line_and_only_the_excess_is_refused(make_pool):
    eight, four = StandInEngine(rows=8), StandInEngine(rows=4)
    pool = make_pool([eight, four], max_queue=2)
    assert isinstance(pool, Serving)
    for engine in (eight, four):
        engine.gate.clear()  # nothing finishes during the burst
    try:
        jobs, refused = burst(pool, (8 + 2) + (4 + 2) + 3)
        assert refused == 3 and [job.id for job in jobs] == [f"burst-{i}" for i in range(16)]
        assert [engine_of(pool, j) for j in jobs].count(eight) == 10  # its rows and its line
    finally:
        for engine in (eight, four):
            engine.gate.set()
    assert all(len(np.concatenate(list(job))) > 0 and job.outcome == "ok" for job in jobs)
