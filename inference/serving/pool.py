"""Several GPUs of one host: one batched engine and one EngineWorker (thread) per GPU, behind the
API the UI uses for a single worker (interfaces.Serving), so the routes and the page do not know
how many GPUs serve them.

Each new request goes to the worker with the most free rows minus waiting jobs (ties: the shorter
line): rows minus the jobs it holds (waiting, running, or between the two). A request is refused
only when every worker refuses it, that is when each one's rows and waiting line are full. A GPU
that fails is routed around: a worker whose thread died has its jobs failed and gets no more; a
worker whose warm-up failed, or whose last few jobs all ended in internal errors (a lost device),
gets requests only when no other can take them, and is tried again after a pause.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time

from ..config import LIMITS
from ..errors import InputError
from ..errors import QueueFullError
from .interfaces import BatchEngine
from .job import Job, new_job_id
from .worker import EngineWorker

log = logging.getLogger("voxcpm.pool")

FAILURES_TO_AVOID = 3  # this many internal errors in a row mark a GPU as failing (for the pool's failing_pause_s)
REAP_EVERY_S = 0.5  # how often finished jobs are counted and dead worker threads are looked for


class _Member:
    """One GPU: its worker, the jobs the pool gave it whose outcome it has not counted yet, and
    recent outcomes."""

    def __init__(self, worker: EngineWorker, warm_up: bool, failing_pause_s: float):
        self.worker = worker
        self.failing_pause_s = failing_pause_s
        self.device, self.rows = worker.device, worker.rows
        self.warm_up = warm_up
        self.live: list[Job] = []
        self.outcomes: collections.deque[str] = collections.deque(maxlen=FAILURES_TO_AVOID)
        self.last_error = 0.0
        self.dead = False

    @property
    def alive(self) -> bool:
        return not self.dead and self.worker.alive

    def warm_up_failed(self) -> bool:
        return self.warm_up and self.worker.warmup_error is not None  # the worker logged why

    def failing(self, now: float) -> bool:
        errors = len(self.outcomes) == FAILURES_TO_AVOID and all(o == "error" for o in self.outcomes)
        return self.warm_up_failed() or (errors and now - self.last_error < self.failing_pause_s)

    def count_finished(self):
        for job in [j for j in self.live if not j.live]:
            self.live.remove(job)
            self.outcomes.append(job.outcome or job.state)
            if job.outcome == "error":
                self.last_error = time.monotonic()

    def status(self) -> dict:
        own = self.worker.gpus()[0]
        return {**own, "alive": self.alive, "failing": self.failing(time.monotonic())}


class WorkerPool:
    """One EngineWorker per engine; requests go to the least loaded one that is serving."""

    def __init__(self, engines: list[BatchEngine], max_queue: int = LIMITS.max_queue, warm_up: bool = False,
                 serial_warm_up: bool = False, failing_pause_s: float = LIMITS.failing_gpu_pause_s, **worker_options):
        """max_queue: requests allowed to wait on each GPU once its rows are taken. failing_pause_s:
        a GPU whose last jobs all failed gets none (while another can take them) for this long. serial_warm_up:
        start each worker only once the previous one is ready (its warm-up done); by default all
        start at once and each warms up its engine on its own thread, which Engine.warmup's lock
        makes take turns."""
        if not engines:
            raise ValueError("a worker pool needs at least one engine")
        rates = {int(e.sample_rate) for e in engines}
        if len(rates) != 1:
            raise ValueError(f"the engines disagree on the sample rate: {sorted(rates)}")
        self.sample_rate = rates.pop()
        self.patch_samples = int(engines[0].patch_samples)
        self.max_queue = max_queue * len(engines)
        self.failing_pause_s = failing_pause_s
        self._lock = threading.Lock()
        self._members: list[_Member] = []
        for engine in engines:
            worker = EngineWorker(engine, max_queue=max_queue, warm_up=warm_up, **worker_options)
            self._members.append(_Member(worker, warm_up, failing_pause_s))
            if serial_warm_up:
                _wait_ready(worker)
        self.ready = threading.Event()
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="worker-pool", daemon=True).start()

    @property
    def workers(self) -> list[EngineWorker]:
        return [m.worker for m in self._members]

    @property
    def warmup_error(self) -> BaseException | None:
        """An error only when no GPU warmed up (the app then stops); otherwise the others serve."""
        errors = [w.warmup_error for w in self.workers]
        return errors[0] if all(errors) else None

    # -- the API of one worker --------------------------------------------------------------------
    def submit(self, request, job_id: str | None = None) -> Job:
        """The least loaded serving GPU's worker admits it (EngineWorker.submit: prepared there, once)."""
        job_id = job_id or new_job_id()  # before the lock, as EngineWorker.submit draws its own
        with self._lock:
            if any(m.worker.get(job_id) is not None for m in self._members):
                raise InputError(f"request id {job_id!r} is already in use")
            for member in self._choices():
                try:
                    job = member.worker.submit(request, job_id)
                except QueueFullError:
                    continue
                member.live.append(job)
                self._log_choice(job, member)
                return job
        if not any(m.alive for m in self._members):
            raise QueueFullError("No GPU is serving requests; the server log says why.")
        raise QueueFullError(f"The server is busy: all {sum(m.rows for m in self._members)} streams are in use "
                             f"and {self.waiting} requests are already waiting. Try again shortly.")

    def call(self, fn, kind: str = "call") -> concurrent.futures.Future:
        """fn(engine) on one serving GPU's worker thread (every engine holds the same weights)."""
        with self._lock:
            choices = self._choices()
        if not choices:
            raise QueueFullError("No GPU is serving requests; the server log says why.")
        return choices[0].worker.call(fn, kind)

    def get(self, job_id: str) -> Job | None:
        return next((job for m in self._members if (job := m.worker.get(job_id)) is not None), None)

    def worker_of(self, job: Job) -> EngineWorker | None:
        """The worker that holds `job` (while it is listed there), e.g. to see where it went."""
        return next((m.worker for m in self._members if m.worker.get(job.id) is job), None)

    @property
    def busy(self) -> bool:
        return any(m.worker.busy for m in self._members)

    @property
    def running(self) -> int:
        return sum(m.worker.running for m in self._members)

    @property
    def waiting(self) -> int:
        return sum(m.worker.waiting for m in self._members)

    @property
    def serving(self) -> bool:
        return any(m.alive for m in self._members)

    def gpus(self) -> list[dict]:
        """Each GPU's rows, rows in use and waiting jobs, for /health."""
        with self._lock:
            self._reap()
            return [m.status() for m in self._members]

    def close(self, timeout: float | None = 10.0):
        self._closed.set()
        for member in self._members:
            member.worker.close(timeout)

    # -- routing ------------------------------------------------------------------------------------
    def _choices(self) -> list[_Member]:
        """Serving workers, best first: healthy before failing, then most free rows minus waiting
        jobs, then the shorter line (called with the lock held)."""
        self._reap()
        now = time.monotonic()
        alive = [m for m in self._members if m.alive]
        return sorted(alive, key=lambda m: (m.failing(now), -(m.rows - m.worker.held), m.worker.waiting))

    def _reap(self):
        """Counts finished jobs, and fails the jobs of a worker whose thread has died (called with
        the lock held)."""
        for member in self._members:
            member.count_finished()
            if not member.dead and not member.worker.alive:
                member.dead = True
                log.error("the worker of %s has stopped: its %d requests fail, the other GPUs serve",
                          member.device, len(member.live))
                # Nothing else would end them: they would wait forever on a loop that no longer runs.
                member.worker.fail_all(RuntimeError(f"the worker thread of {member.device} died"))
                member.count_finished()

    def _watch(self):
        """Sets `ready` once every worker is ready (or dead), then reaps periodically."""
        for member in self._members:
            _wait_ready(member.worker)
        log.info("%d GPU workers ready: %s", len(self._members), self._summary())
        self.ready.set()
        while not self._closed.wait(REAP_EVERY_S):
            with self._lock:
                self._reap()

    def _log_choice(self, job: Job, member: _Member):
        log.info("request %s -> %s; %s", job.id, member.device, self._summary())

    def _summary(self) -> str:
        parts = []
        for m in self._members:
            state = "" if m.alive else " (stopped)"
            parts.append(f"{m.device} rows {m.worker.running}/{m.rows} waiting {m.worker.waiting}{state}")
        return ", ".join(parts)


def _wait_ready(worker: EngineWorker):
    while not worker.ready.wait(REAP_EVERY_S) and worker.alive:
        pass


def gpu_status(worker: EngineWorker | WorkerPool) -> list[dict]:
    """Per-GPU status of a pool, or of a single worker as a list of one, for /health."""
    return worker.gpus()
