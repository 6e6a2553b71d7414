"""One thread owns the engine; every caller goes through its queue.

The engine is not thread-safe (and CUDA-graph replays from several threads broke other demos), so
requests from the web page, the HTTP route and tests all become `Job`s that a single daemon thread
serves. That thread runs the batch loop: it starts waiting jobs in arrival order while the engine
has free rows, steps the engine (one patch of every running job), hands each job its chunks and
retires the jobs that ended. A job hands its audio to its consumer through a thread-safe channel,
can be cancelled while queued or within one patch of generation, and fails alone when its request
does.
"""
from __future__ import annotations

import collections
import concurrent.futures
import gc
import itertools
import logging
import threading
import time
import traceback
import uuid

import numpy as np
import torch

from .backlog import UnreadBudget
from ..runtime.cuda_graphs import CAPTURE_LOCK
from ..errors import InputError
from .job import Delivery, Job
from .latent_store import LatentStore

log = logging.getLogger("voxcpm.worker")

INTERNAL_ERROR = "Generation failed because of an internal error on the server; it has been logged."
OUT_OF_MEMORY = ("The server ran out of memory for this request; try a shorter text or reference clip, "
                 "or try again in a moment.")


# Allocation failures that CUDA libraries report as plain RuntimeErrors (cuBLAS, cuDNN, the driver).
_CUDA_ALLOC_FAILURES = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDA error: out of memory")


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _CUDA_ALLOC_FAILURES)


def release_memory():
    """Give back what a failed request held: cycles, and on CUDA the allocator's cached blocks."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        with CAPTURE_LOCK:  # empty_cache() touches every GPU: not while another one captures a graph
            torch.cuda.empty_cache()


class FellBehind(Exception):
    """The job's consumer has more unread audio than allowed: it is not reading the stream."""


class QueueFullError(RuntimeError):
    """The waiting line is at its limit: the caller should say so rather than wait forever."""


class EngineWorker:
    """Runs jobs, many at once, on a daemon thread that alone calls the engine."""

    def __init__(self, engine, max_queue: int = 16, keep_finished: int = 256, warm_up: bool = False,
                 max_backlog_s: float = 120.0, max_unread_s: float = 240.0, latents: LatentStore | None = None):
        """warm_up: run engine.warmup() on the worker thread before the first job, so CUDA graphs
        are captured by the thread that replays them. max_backlog_s: audio a job may hold unread
        before it is stopped, so that a client that stops reading cannot pile up memory;
        max_unread_s: the same for all jobs together. latents: where finished jobs' latents are
        kept for their offline render (none kept without it)."""
        self.engine = engine
        self.max_backlog_s = max_backlog_s
        self.unread = UnreadBudget(self, max_backlog_s, max_unread_s)
        self.sample_rate = int(engine.sample_rate)
        self.max_queue = max_queue
        self._waiting: collections.deque[Job] = collections.deque()
        self._jobs: collections.OrderedDict[str, Job] = collections.OrderedDict()
        self._keep_finished = keep_finished
        self._lock = threading.Condition()
        self._running: dict[Job, object] = {}  # job -> its engine Stream
        self._calls: collections.deque = collections.deque()  # (fn, future) to run on this thread
        self.latents = latents
        self._served = itertools.count(1)
        self._closed = False
        self._warm_up = warm_up
        self.warmup_error: BaseException | None = None  # set when warm-up failed; the app then stops
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-worker", daemon=True)
        self._thread.start()

    def submit(self, request, job_id: str | None = None) -> Job:
        with self._lock:
            if self._closed:
                raise QueueFullError("The server is shutting down.")
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError(
                    f"The server is busy: {len(self._waiting)} requests are already waiting. Try again shortly.")
            job_id = job_id or uuid.uuid4().hex
            if job_id in self._jobs:
                raise InputError(f"request id {job_id!r} is already in use")
            job = Job(self, request, job_id)
            self._jobs[job_id] = job
            self._forget_old()
            self._waiting.append(job)
            self._lock.notify()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def call(self, fn) -> concurrent.futures.Future:
        """Runs fn(engine) on this worker's thread between two steps (the thread that owns the
        engine), e.g. an offline decode; the future holds its result or its exception."""
        future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise QueueFullError("The server is shutting down.")
            self._calls.append((fn, future))
            self._lock.notify()
        return future

    def position(self, job: Job) -> int:
        with self._lock:
            try:
                return self._waiting.index(job) + 1
            except ValueError:
                return 0

    def withdraw(self, job: Job):
        """Take a cancelled job out of the line so it never reaches the engine."""
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)
                job.state = job.outcome = "cancelled"
                job.request = None
                self._log(job, "cancelled")
                job._emit("end")

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

    def _forget_old(self):
        # Finished jobs stay queryable (for the page's metrics poll) but only the latest few.
        excess = len(self._jobs) - self._keep_finished
        for job_id in list(self._jobs)[:max(0, excess)]:
            if self._jobs[job_id].state not in ("queued", "running"):
                del self._jobs[job_id]

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

    # -- the batch loop -------------------------------------------------------------------------------
    def _loop(self):
        device = torch.device(getattr(self.engine, "device", "cpu"))  # stand-in engines in tests have none
        if device.type == "cuda" and device.index is not None:  # graph capture, streams and events
            torch.cuda.set_device(device)  # use the thread's current device, not the engine's
        if self._warm_up:
            try:
                self.engine.warmup()
            except Exception as exc:  # an engine that cannot warm up would fail every request
                log.exception("engine warm-up failed")
                self.warmup_error = exc
        self.ready.set()
        while True:
            with self._lock:
                while not self._waiting and not self._running and not self._calls and not self._closed:
                    self._lock.wait()
                if self._closed:
                    self._refuse_calls()
                    return
                joining = self._take_waiting()
                calls, self._calls = self._calls, collections.deque()
            self._run_calls(calls)
            try:
                for job in joining:
                    self._start(job)
                if self._running:
                    self.engine.step()
                    self._deliver()
            except Exception as exc:  # a bug in the loop itself: fail what it held, keep serving
                for job, stream in list(self._running.items()):
                    self.engine.stop(stream)
                    self._fail(job, exc)
                for job in joining:
                    if job.state == "running":
                        self._fail(job, exc)

    def _run_calls(self, calls):
        for fn, future in calls:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(self.engine))
            except Exception as exc:  # the caller gets it; the loop goes on
                future.set_exception(exc)

    def _refuse_calls(self):
        with self._lock:
            calls, self._calls = self._calls, collections.deque()
        for _, future in calls:
            if future.set_running_or_notify_cancel():
                future.set_exception(QueueFullError("The server is shutting down."))

    def _take_waiting(self) -> list[Job]:
        """Waiting jobs, oldest first, for the engine's free rows (called with the lock held)."""
        joining = []
        while self._waiting and len(joining) < self.engine.free_rows:
            job = self._waiting.popleft()
            job.state = "running"
            joining.append(job)
        return joining

    def _start(self, job: Job):
        job.metrics.started_at = time.perf_counter()
        if job.cancelled:  # cancelled between leaving the line and starting: spend no engine time
            self._finish(job, "cancelled")
            return
        try:
            stream = self.engine.start(job.request)
        except Exception as exc:
            self._fail(job, exc)
            return
        job.decode_context = getattr(stream, "decode_context", None)
        with self._lock:
            self._running[job] = stream

    def _deliver(self):
        """Each running job's new chunks to its consumer; jobs that ended are finished."""
        for job, stream in list(self._running.items()):
            try:
                self._hand_over(job, stream)
            except FellBehind as exc:
                self.engine.stop(stream)
                self._fail(job, exc)
                continue
            if job.cancelled:
                self.engine.stop(stream)
                self._finish(job, "cancelled")
            elif stream.done:
                if stream.error is not None:
                    self._fail(job, stream.error)
                else:
                    self._finish(job, "done")

    def _hand_over(self, job: Job, stream):
        self._report_text(job, stream)
        while stream.chunks:
            chunk = stream.chunks.popleft()
            chunk.audio = audio = np.asarray(chunk.audio, dtype=np.float32)
            now = time.perf_counter()
            ends = job.segment_ends
            while len(ends) <= chunk.segment:
                ends.append(job.metrics.samples)
            if job.metrics.first_chunk_at is None:
                job.metrics.first_chunk_at = now
            delivery = Delivery(chunk, job.metrics.samples, now - job.metrics.started_at)
            job.metrics.patches += 1
            job.metrics.samples += audio.shape[0]
            ends[chunk.segment] = job.metrics.samples
            job.patches.append(chunk.latents)
            job._emit("chunk", delivery)
            if (why := self.unread.check(job, audio.shape[0])) is not None:
                raise FellBehind(why)

    def _report_text(self, job: Job, stream):
        plan = getattr(stream, "plan", None)  # stand-in engines in tests have none
        if plan is None:
            return
        job.text_report = report = plan.snapshot()
        for retry in report.retries[job.retries_logged:]:
            log.warning("request %s: segment %d ran away (%d patches without a stop, seed %d); generating it "
                        "again with seed %d", job.id, retry["segment"], retry["patches"], retry["seed"], retry["seed"] + 1)
        job.retries_logged = len(report.retries)

    def _fail(self, job: Job, exc: BaseException):
        """One job's failure: the message its consumer may see, and the log line."""
        if isinstance(exc, InputError):
            self._finish(job, "failed", str(exc), outcome="input_error")
        elif isinstance(exc, FellBehind):
            self._finish(job, "failed", str(exc), outcome="too_slow")
        else:  # one bad request must not take the worker down
            out_of_memory = is_out_of_memory(exc)
            self._log_failure(job, exc)
            self._finish(job, "failed", OUT_OF_MEMORY if out_of_memory else INTERNAL_ERROR,
                         outcome="out_of_memory" if out_of_memory else "error")
            if out_of_memory:
                release_memory()  # now that the failed request's frames are gone, so the next one fits

    def _log_failure(self, job: Job, exc: BaseException):
        # The traceback goes to the log as text, then its frames drop their locals: a log handler
        # that keeps records (or the exception itself) must not keep a failed request's tensors.
        log.error("job %s failed:\n%s", job.id, "".join(traceback.format_exception(exc)).rstrip())
        traceback.clear_frames(exc.__traceback__)

    def _finish(self, job: Job, state: str, error: str | None = None, outcome: str | None = None):
        with self._lock:
            self._running.pop(job, None)
        job.metrics.finished_at = time.perf_counter()
        job.request = None
        if self.latents is not None and state != "failed":  # a stopped take has an offline render too
            self.latents.keep(job.id, job.patches, job.decode_context)
        job.patches, job.decode_context = [], None
        if state == "cancelled":
            job._drain()  # nobody wants the audio of a cancelled job; finished jobs are kept a while
        job.state = state
        job.error = error
        job.outcome = outcome or ("ok" if state == "done" else state)
        self._log(job, job.outcome)  # before the consumer hears the end, so the line is there when it does
        job._emit("error" if error else "end", error)

    def _log(self, job: Job, outcome: str):
        m = job.metrics.as_dict(self.sample_rate)
        fmt = lambda v, unit="s": "-" if v is None else f"{v:.3f}{unit}"  # noqa: E731
        log.info("request %s #%d mode=%s text_chars=%d queue=%s streams=%d ttfp=%s rtf=%s patches=%d audio=%s "
                 "outcome=%s segments=%d retries=%d", job.id, next(self._served), job.mode, job.text_chars,
                 fmt(m["queue_s"]), len(self._running), fmt(m["ttfp_s"]), fmt(m["rtf"], ""), m["patches"],
                 fmt(m["audio_s"]), outcome, len(job.segment_ends), job.retries_logged)
