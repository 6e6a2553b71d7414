"""One thread owns the engine; every request comes in through the worker's intake.

The engine is not thread-safe (and CUDA-graph replays from several threads broke other demos), so requests
from the web page, the HTTP route and tests all become `Job`s that a single daemon thread serves.

Intake (`submit`): a request is admitted once, at once: refused only when every row is taken and the
waiting line is full, that is when the worker already holds rows + max_queue unfinished jobs
(preparing ones count), so a burst that fits is accepted whole. Its job is listed from then on, in
state "preparing", while one of the worker's intake threads builds the request (a route's body: an
upload or a saved voice resolved), checks it against the modes' spec (SynthesisRequest) and the
engine's limits, and makes it ready (engine.prepare: text, tokens, clips' samples). Then it joins
the line ("queued"); a request that does not pass ends "refused" with the reason, which its
consumer gets as its error and the job's status keeps.

The loop (the engine's thread): it starts waiting jobs in arrival order while the engine has free
rows, steps the engine (one patch of every running job), hands each job its chunks (delivery.py) and
retires the jobs that ended. A job can be cancelled while preparing, queued or within one patch,
fails alone (delivery.py), and only the worker changes it.
"""
from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import threading
import time
from typing import Any, Callable

import torch

from ..config import LIMITS
from ..errors import InputError, QueueFullError
from ..request.request import SynthesisRequest
from ..text.normalize import normalize_all
from .delivery import (SHUTTING_DOWN, FellBehind, OutputBound, OutputCut, UnreadBudget, classify, hand_over,
                       log_failure, outcome_line, release_memory)
from .interfaces import BatchEngine
from .job import Job, new_job_id
from .latent_store import LatentStore

log = logging.getLogger("voxcpm.worker")
COST_WEIGHT = 0.3  # of the newest call in its kind's running average
IDLE_WAIT_S = 0.01  # how long the loop sleeps when a call is held back and nothing else runs
# How long the loop sleeps at most while every running stream waits for text (a live request): new
# text, a cancel or a new job wakes it at once (nudge).
PARKED_WAIT_S = 0.1

__all__ = ["EngineCalls", "EngineWorker", "QueueFullError", "run_calls"]


def running_pool(threads: int, prefix: str) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool whose threads all run from now on. ThreadPoolExecutor starts them on demand,
    inside submit(), and each start waits for the new thread to run: the event loop, which submits
    every request, would pay that a thread at a time in the first bursts after the app starts."""
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=prefix)
    everyone = threading.Barrier(threads + 1, timeout=60.0)
    for _ in range(threads):
        pool.submit(everyone.wait)  # none is idle until all of them wait: each submit starts one more
    everyone.wait()
    return pool


class EngineWorker:
    """Runs jobs, many at once, on a daemon thread that alone calls the engine."""

    def __init__(self, engine: BatchEngine, max_queue: int = LIMITS.max_queue, prepare_threads: int = LIMITS.prepare_threads,
                 keep_finished: int = LIMITS.keep_finished, warm_up: bool = False,
                 max_backlog_s: float = LIMITS.max_backlog_s, max_unread_s: float = LIMITS.max_unread_s,
                 max_output_s: float = LIMITS.max_output_seconds, latents: LatentStore | None = None,
                 max_call_wait_s: float = LIMITS.max_call_wait_s,
                 normalizer: Callable[[list[str], str], list[str]] = normalize_all):
        """warm_up: run engine.warmup() on the worker thread before the first job, so CUDA graphs are
        captured by the thread that replays them. max_queue: jobs allowed to wait once every row is
        taken. max_backlog_s: how far a job's consumer may fall behind its listener's clock before
        it is stopped; max_unread_s: unread audio all jobs together may hold before those behind
        are stopped, so that clients that stop reading cannot pile up memory (delivery.py);
        max_output_s: the most audio one job may deliver, as its listener hears it (the rest is cut). latents:
        where finished jobs' latents are kept for their offline render (none kept without it).
        max_call_wait_s: the longest a call (EngineCalls) waits for the listeners to have room for it.
        prepare_threads: the intake threads that prepare requests at once. normalizer: what
        normalizes the texts that ask, for them: on the intake thread unless given the app's
        processes (text/normalize.Normalizer, whose owner closes it)."""
        self.engine = engine
        self.device, self.rows = str(engine.device), int(engine.rows)
        self.sample_rate, self.patch_samples = int(engine.sample_rate), int(engine.patch_samples)
        self.max_queue = max_queue
        self.latents = latents
        self.unread = UnreadBudget(self.sample_rate, max_backlog_s, max_unread_s, self._unread_samples)
        self.output = OutputBound(self.sample_rate, max_output_s)
        self._lock = threading.Condition()  # guards everything below that other threads read
        self._waiting: collections.deque[Job] = collections.deque()
        self._jobs: collections.OrderedDict[str, Job] = collections.OrderedDict()  # listed: live and finished
        self._unfinished: dict[str, Job] = {}  # those of _jobs that may still be live (_held prunes it)
        self._keep_finished = keep_finished
        self._running: list[Job] = []  # on the engine, in the order they started
        self._calls = EngineCalls(max_call_wait_s)  # to run on this thread between two steps
        self._closed = False
        self._served = itertools.count(1)
        self._warm_up = warm_up
        self._intake = running_pool(prepare_threads, "prepare")
        self._normalizer = normalizer
        self.warmup_error: BaseException | None = None  # set when warm-up failed; the app then stops
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-worker", daemon=True)
        self._thread.start()

    # -- what callers ask, from any thread -----------------------------------------------------
    def submit(self, request: SynthesisRequest | Callable[[], SynthesisRequest], job_id: str | None = None) -> Job:
        """Admits a request (QueueFullError when every row and the line are full, or closing;
        InputError for an id in use) and lists its job, preparing; `request` (or the function
        that builds it) is then prepared on an intake thread, never the caller's or the engine's."""
        # Made before the lock: the event loop calls this, and an id may read the OS's randomness,
        # which hands the GIL away; every thread that waits for this lock (the intake, the engine's
        # thread) would wait for the loop to get the GIL back.
        job = Job(job_id or new_job_id(), self.sample_rate, self)
        with self._lock:
            self._admit(job_id)
            self._jobs[job.id] = self._unfinished[job.id] = job
            self._forget_old()
            self._waiting.append(job)  # its place in the line is its arrival; it starts once prepared
        self._intake.submit(self._prepare_job, job, request)
        return job

    def _prepare_job(self, job: Job, request):
        """On an intake thread: the request built, checked and made ready, then into the line."""
        if not job.live:  # cancelled before its turn
            return
        try:
            req = request() if callable(request) else request
            prepared = self.engine.prepare(req, self._normalizer)
        except Exception as exc:  # noqa: BLE001 - its own refusal, or a fault of ours: the job says which
            self._refuse(job, exc)
            return
        with self._lock:
            if not job.live:  # cancelled meanwhile: it has ended
                return
            if self._closed:
                self._leave_line(job)
                self._finish(job, "cancelled", SHUTTING_DOWN)
                return
            if req.feed is not None:
                req.feed.on_more = self.nudge
            job.accept(req, prepared)
            self._lock.notify()

    def _refuse(self, job: Job, exc: BaseException):
        with self._lock:
            if not job.live:  # cancelled meanwhile: it has ended
                return
            self._leave_line(job)
        message, outcome = classify(exc)
        if outcome == "input_error":  # the request's own fault: its caller answers and logs it
            job.refuse(exc, message)
            job.hang_up()
        else:  # not the request's fault: failed, logged with its traceback
            self._fail(job, exc)

    def _admit(self, job_id: str | None):
        """Refuses a new job when closed, or when every row is taken and the line is full (lock held)."""
        if self._closed:
            raise QueueFullError(SHUTTING_DOWN)
        if self._held() >= self.rows + self.max_queue:
            raise QueueFullError(f"The server is busy: all {self.rows} streams are in use and "
                                 f"{len(self._waiting)} requests are already waiting. Try again shortly.")
        if job_id in self._jobs:
            raise InputError(f"request id {job_id!r} is already in use")

    def _held(self) -> int:
        # Queued, running, or between the two (taken from the line, not yet on the engine). Counted
        # over the unfinished jobs alone, not the finished ones kept for their status: every
        # submit asks, on the event loop.
        ended = [job_id for job_id, job in self._unfinished.items() if not job.live]
        for job_id in ended:
            del self._unfinished[job_id]
        return len(self._unfinished)

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def call(self, fn, kind: str = "call") -> concurrent.futures.Future:
        """Runs fn(engine) on this worker's thread between two steps (the thread that owns the
        engine), e.g. an offline decode, when the listeners have room for it (EngineCalls); the
        future holds its result or its exception. kind: what it is, for its learned cost."""
        with self._lock:
            if self._closed:
                raise QueueFullError(SHUTTING_DOWN)
            future = self._calls.add(fn, kind)
            self._lock.notify()
        return future

    def nudge(self):
        """Wakes the loop: a live request's text came (or ended) while every stream waited for some."""
        with self._lock:
            self._lock.notify()

    def position(self, job: Job) -> int:
        with self._lock:
            try:
                return self._waiting.index(job) + 1
            except ValueError:
                return 0

    def withdraw(self, job: Job):
        """Take a cancelled job out of the line so it never reaches the engine (one still being
        prepared ends now; its preparation is dropped when it returns)."""
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)
                self._finish(job, "cancelled")
            self._lock.notify()  # a running job's stream may be waiting for text: the loop stops it now

    def _leave_line(self, job: Job):
        if job in self._waiting:  # the lock held
            self._waiting.remove(job)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._running)

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._running)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    @property
    def held(self) -> int:
        """Jobs accepted and not finished: waiting, running, or between the two."""
        with self._lock:
            return self._held()

    @property
    def alive(self) -> bool:
        """Whether the loop's thread still runs (it ends on close, or when a bug kills it)."""
        return self._thread.is_alive()

    @property
    def thread_id(self) -> int | None:
        """The ident of the one thread that calls the engine."""
        return self._thread.ident

    def gpus(self) -> list[dict]:
        """This worker's GPU, as /health lists it (a pool lists one per worker)."""
        return [{"device": self.device, "rows": self.rows, "rows_in_use": self.running, "waiting": self.waiting,
                 "alive": self.alive, "failing": False}]

    def close(self, timeout: float | None = 10.0):
        """Cancel everything, let the thread finish its patch, and end it."""
        with self._lock:
            self._closed = True
            jobs = list(self._waiting) + list(self._running)
            self._lock.notify_all()
        for job in jobs:
            job.cancel()
        self._thread.join(timeout)
        for job in jobs:  # running jobs the loop left when it closed
            if job.state == "running":
                self._finish(job, "cancelled")
        self._intake.shutdown(wait=False)  # a job still preparing ends cancelled (the worker is closed)

    def fail_all(self, exc: BaseException):
        """Fails every unfinished job and closes the line, for a worker whose thread died (a pool finds it)."""
        if self.alive:
            raise RuntimeError("fail_all is for a worker whose thread has stopped")
        with self._lock:
            self._closed = True
            self._waiting.clear()
            jobs = [job for job in self._jobs.values() if job.live]
        for job in jobs:
            self._fail(job, exc)

    def _forget_old(self):
        # Finished jobs stay queryable (for the page's metrics poll) but only the latest few.
        excess = len(self._jobs) - self._keep_finished
        for job_id in list(itertools.islice(self._jobs, max(0, excess))):
            if not self._jobs[job_id].live:
                del self._jobs[job_id]

    def _unread_samples(self) -> int:
        with self._lock:
            jobs = list(self._jobs.values())
        return sum(job.unread_samples() for job in jobs)

    # -- the batch loop -------------------------------------------------------------------------
    def _loop(self):
        self._prepare()
        while True:
            with self._lock:
                while not self._ready() and not self._running and not self._calls and not self._closed:
                    self._lock.wait()
                if self._closed:
                    self._calls.refuse(QueueFullError(SHUTTING_DOWN))
                    return
                joining = self._take_waiting()
                calls = self._calls.take(self.engine.slack(), self._first_audio_waiting(joining))
            run_calls(calls, self.engine, self._calls)
            if not (calls or joining or self._running):  # a call waits for its turn: nothing to do yet
                with self._lock:
                    self._lock.wait(IDLE_WAIT_S)
                continue
            try:
                self.engine.encode_ahead([job.prepared for job in joining])  # their clips in one encoder call
                for job in joining:
                    self._start(job)
                if self._running:
                    self._deliver(self.engine.step())
                    if not self.engine.working:  # every stream waits for text: until some comes
                        self._wait_for_text()
            except Exception as exc:  # a bug in the loop itself: fail what it held, keep serving
                self._fail_held(joining, exc)

    def _wait_for_text(self):
        with self._lock:
            if self._running and not self._ready() and not self._calls and not self._closed:
                self._lock.wait(PARKED_WAIT_S)

    def _prepare(self):
        """On this thread, before any job: its CUDA device, and the engine's warm-up if asked."""
        device = torch.device(self.engine.device)
        if device.type == "cuda" and device.index is not None:  # graph capture, streams and events
            torch.cuda.set_device(device)  # use the thread's current device, not the engine's
        if self._warm_up:
            try:
                self.engine.warmup()
            except Exception as exc:  # an engine that cannot warm up would fail every request
                log.exception("engine warm-up failed")
                self.warmup_error = exc
        self.ready.set()

    def _fail_held(self, joining: list[Job], exc: BaseException):
        for job in list(self._running):
            self.engine.stop(job.stream)
            self._fail(job, exc)
        for job in joining:
            if job.state == "running":
                self._fail(job, exc)

    def _first_audio_waiting(self, joining: list[Job]) -> bool:
        """Whether a job waits for its first audio (the lock held): in the line, joining, or running."""
        return bool(self._waiting or joining) or any(job.first_chunk_at is None for job in self._running)

    def _take_waiting(self) -> list[Job]:
        """Waiting jobs, oldest first, for the engine's free rows (called with the lock held)."""
        joining = [job for job in self._waiting if job.state == "queued"][:self.engine.free_rows]
        for job in joining:  # the prepared ones in arrival order: one still preparing keeps its place
            self._waiting.remove(job)
            job.begin()
        return joining

    def _ready(self) -> bool:
        """Whether a prepared job waits in the line (the lock held)."""
        return any(job.state == "queued" for job in self._waiting)

    def _start(self, job: Job):
        job.started()
        if job.cancelled:  # cancelled between leaving the line and starting: spend no engine time
            self._finish(job, "cancelled")
            return
        try:
            stream = self.engine.start(job.prepared, job.listener)
        except Exception as exc:
            self._fail(job, exc)
            return
        job.stream = stream
        with self._lock:
            self._running.append(job)

    def _deliver(self, produced: list):
        """Each running job's chunks of the step (what engine.step() returned) to its consumer;
        jobs that ended are finished."""
        made = dict(produced)  # stream -> its chunks of the step
        for job in list(self._running):
            stream = job.stream
            try:
                hand_over(job, made.get(stream, []), self.unread, self.output)
            except FellBehind as exc:
                self.engine.stop(stream)
                self._fail(job, exc)
                continue
            except OutputCut as exc:  # the audio as made is the take: kept, with its offline render
                self.engine.stop(stream)
                self._finish(job, "cut", str(exc), "too_long")
                continue
            if job.cancelled:
                self.engine.stop(stream)
                self._finish(job, "cancelled")
            elif stream.done:
                if stream.error is not None:
                    self._fail(job, stream.error)
                else:
                    self._finish(job, "done")

    def _fail(self, job: Job, exc: BaseException):
        """One job's failure: the message its consumer may see, and the log line."""
        message, outcome = classify(exc)
        if outcome in ("error", "out_of_memory"):  # the consumer gets a generic message; the log, why
            log_failure(job.id, exc)
        self._finish(job, "failed", message, outcome)
        if outcome == "out_of_memory":
            release_memory()  # now that the failed request's frames are gone, so the next one fits

    def _finish(self, job: Job, state: str, error: str | None = None, outcome: str | None = None):
        with self._lock:
            was_running = job in self._running
            if was_running:
                self._running.remove(job)
            streams = len(self._running)
        if was_running and self.latents is not None and state != "failed":
            # A stopped take has an offline render too.
            self.latents.keep(job.id, job.latents, job.stream.decode_context, job.pauses, job.listener)
        job.finish(state, error, outcome)
        # Logged before the consumer hears the end, so the line is there when it does.
        log.info(outcome_line(job, next(self._served), streams))
        job.hang_up()


class EngineCalls:
    """Work to run on the thread that owns an engine, between two steps (a piece of an offline
    decode, a saved voice's encoding), each with the future its caller waits on.

    A call runs only when it cannot make a listener run dry: no job waits for its first audio, and
    every playing stream holds more audio ahead than the call is known to take (its kind's cost,
    learned from the calls run, as the scheduler learns a step's). A call that has waited
    `max_wait_s` runs regardless, so that none starves. One call per turn, oldest first: live
    streams step between any two calls, so a stream waits for at most one of them per patch, and
    long work is split by its caller into short calls (an offline render decodes a few patches per
    call), each queued after the previous one ended. Not thread-safe by itself: the worker holds
    its lock around add() and take(), and runs what it took outside it."""

    def __init__(self, max_wait_s: float = LIMITS.max_call_wait_s):
        self.max_wait_s = max_wait_s
        self._pending: collections.deque = collections.deque()  # (fn, future, kind, queued at)
        self.costs: dict[str, float] = {}  # kind -> seconds a call took, a running average

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, fn: Callable[[Any], Any], kind: str) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._pending.append((fn, future, kind, time.monotonic()))
        return future

    def take(self, slack: float | None, first_audio_waiting: bool) -> list:
        """The oldest pending call (a list of one) if it may run now, else none. slack: the least
        audio a playing stream holds ahead, in seconds (None: none plays)."""
        if not self._pending:
            return []
        _, _, kind, queued_at = self._pending[0]
        starved = time.monotonic() - queued_at >= self.max_wait_s
        if not starved and (first_audio_waiting or (slack is not None and slack <= self.costs.get(kind, 0.0))):
            return []
        return [self._pending.popleft()]

    def ran(self, kind: str, seconds: float):
        old = self.costs.get(kind)
        self.costs[kind] = seconds if old is None else old + COST_WEIGHT * (seconds - old)

    def refuse(self, exc: BaseException):
        """Every pending call fails with `exc` (the worker is closing)."""
        taken, self._pending = list(self._pending), collections.deque()
        for _, future, _, _ in taken:
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)


def run_calls(calls: list, engine, costs: EngineCalls | None = None):
    """fn(engine) of each call taken; its future gets the result or the exception; its time is
    learned as its kind's cost."""
    for fn, future, kind, _ in calls:
        if not future.set_running_or_notify_cancel():
            continue
        began = time.perf_counter()
        try:
            future.set_result(fn(engine))
        except Exception as exc:  # the caller gets it; the loop goes on
            future.set_exception(exc)
        if costs is not None:
            costs.ran(kind, time.perf_counter() - began)
