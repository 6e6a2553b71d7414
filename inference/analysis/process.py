"""The analysis process: the models that listen to audio (Whisper, WavLM) and the scores, in a
process of their own beside the app, fed through a queue; `Analysis` is its handle in the app.

Why a process, not the engine's worker thread (where they ran before) or another thread: a
recognizer call held every stream on the GPU for up to a second between two patches, and even on a
thread of its own Whisper's Python (a generate() loop per token) would take the GIL from the worker
that launches the patches. A process has its own interpreter, its own CUDA context and its own
memory: nothing it does can make a stream wait, and a crash in it (a driver fault, an out-of-memory)
fails only the analysis asked of it. As nano-vllm-voxcpm runs its engine in a spawned process fed
by a queue, and vLLM its engine core apart from the API server, the process is spawned (never
forked: CUDA and threads do not survive a fork) and talks through multiprocessing queues; a
separate service (what nano-vllm-voxcpm's deployment does for recognition) would ask every host of
the demo to deploy and secure a second server for what one process does here.

The process starts on first use, loads each model on first use (loading.py), and takes the jobs
waiting together as one batch: their recognizer windows go through Whisper together. A job that
finds the queue full (`max_pending` waiting or running) is refused at once (AnalysisBusy); if the
process dies, the jobs it held fail with AnalysisStopped, and the next job starts a new one.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import logging
import multiprocessing
import queue
import threading
import time
from typing import Any

from ..config import AnalysisSettings
from ..errors import QueueFullError
from .loading import ModelUnavailable

log = logging.getLogger("voxcpm.analysis")


class AnalysisBusy(QueueFullError):
    """The analysis queue is full: the caller answers 503 at once, with Retry-After."""


class AnalysisStopped(RuntimeError):
    """The analysis process stopped while it held this job (it is started again for the next)."""


class Analysis:
    """The app's handle on its analysis process: any thread submits; futures carry the results."""

    def __init__(self, settings: AnalysisSettings):
        self.settings = settings
        self._spawn = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._process: Any = None
        self._inbox: Any = None
        self._generation = 0  # counts processes started: a job fails only with the process that held it
        self._pending: dict[int, tuple[int, concurrent.futures.Future, str]] = {}  # job -> (generation, future, kind)
        self._ids = itertools.count(1)
        self._refusals: dict[str, tuple[float, ModelUnavailable]] = {}  # model option -> (until, why)
        self.submitted: dict[str, int] = {}  # jobs asked for, by kind (the metrics and the tests read it)
        self.pids: list[int] = []  # of every process started, oldest first

    # -- what the app asks ---------------------------------------------------------------------
    def transcribe(self, rate: int, audio) -> concurrent.futures.Future:
        """A clip's transcript (str), made in the analysis process. Raises ModelUnavailable at once
        when the recognizer is switched off or failed to load a moment ago; AnalysisBusy when full."""
        self.check_recognizer()
        return self._submit("transcribe", (rate, audio))

    def evaluate(self, take) -> concurrent.futures.Future:
        """A take's scores (evaluation.Take -> the route's JSON), made in the analysis process."""
        return self._submit("evaluate", take)

    def align(self, take) -> concurrent.futures.Future:
        """A take's words timed (evaluation.Take -> [{"word", "start_s", "end_s", "segment"}], its
        text's words in order), made in the analysis process. Raises as transcribe() does: the
        aligner is the recognizer's model."""
        self.check_recognizer()
        return self._submit("align", take)

    def ping(self) -> concurrent.futures.Future:
        """The process's id once it answers (started first if it is not running)."""
        return self._submit("ping", None)

    def check_recognizer(self):
        """ModelUnavailable at once when transcripts are off, or their model failed to load a
        moment ago (its process said so): nothing is sent to the process for them."""
        from .recognition import KIND

        if self.settings.recognizer is None:
            raise ModelUnavailable(KIND.off, state="off", option=KIND.option)
        refusal = self._refusals.get(KIND.option)
        if refusal is not None and time.monotonic() < refusal[0]:
            why = refusal[1]
            raise ModelUnavailable(str(why), refusal[0] - time.monotonic(), why.state, why.option)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def close(self, timeout: float = 5.0):
        with self._lock:
            process, inbox, self._process = self._process, self._inbox, None
        if process is None:
            return
        try:
            inbox.put(None)
            process.join(timeout)
        finally:
            if process.is_alive():
                process.kill()
                process.join(timeout)

    # -- the queue -------------------------------------------------------------------------------
    def _submit(self, kind: str, payload) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            words = kind == "align"
            waiting = sum(k == "align" for _, _, k in self._pending.values()) if words else \
                sum(k != "align" for _, _, k in self._pending.values())
            if waiting >= (self.settings.max_pending_words if words else self.settings.max_pending):
                raise AnalysisBusy(f"the server's audio analysis is busy ({waiting} {'alignments' if words else 'jobs'} "
                                   "waiting or running): try again shortly")
            if self._process is None or not self._process.is_alive():
                self._start()
            job = next(self._ids)
            self._pending[job] = (self._generation, future, kind)
            self.submitted[kind] = self.submitted.get(kind, 0) + 1
            self._inbox.put((job, kind, payload))  # pickled and sent by the queue's own thread
        return future

    def _start(self):
        """A new process (the lock held), and the thread that reads what it answers."""
        from .runner import serve

        self._generation += 1
        inbox, outbox = self._spawn.Queue(), self._spawn.Queue()
        process = self._spawn.Process(target=serve, args=(self.settings, inbox, outbox), daemon=True,
                                      name=f"voxcpm-analysis-{self._generation}")
        process.start()
        self._process, self._inbox = process, inbox
        self.pids.append(process.pid)
        threading.Thread(target=self._read, args=(process, outbox, self._generation), daemon=True,
                         name=f"analysis-results-{self._generation}").start()
        log.info("analysis process %d started on %s (pid %d)", self._generation, self.settings.device, process.pid)

    def _read(self, process, outbox, generation: int):
        while True:
            try:
                job, ok, value = outbox.get(timeout=0.5)
            except queue.Empty:
                if process.is_alive():
                    continue
                self._stopped(process, generation)
                return
            except (EOFError, OSError):
                self._stopped(process, generation)
                return
            with self._lock:
                _, future, _ = self._pending.pop(job, (None, None, None))
            if future is None:
                continue
            if ok:
                future.set_result(value)
            else:
                self._remember(value)
                future.set_exception(value)

    def _remember(self, exc: BaseException):
        """A model that could not be loaded is refused at once until it may be tried again (one
        being loaded is asked about again: the process answers that at once too)."""
        if isinstance(exc, ModelUnavailable) and exc.retry_after_s and exc.state == "failed" and exc.option:
            self._refusals[exc.option] = (time.monotonic() + exc.retry_after_s, exc)

    def _stopped(self, process, generation: int):
        code = process.exitcode
        with self._lock:
            lost = [job for job, (gen, _, _) in self._pending.items() if gen == generation]
            futures = [self._pending.pop(job)[1] for job in lost]
        if futures or code not in (0, None):
            log.error("analysis process %d stopped (exit code %s) holding %d job(s); the next job starts a new one",
                      generation, code, len(futures))
        for future in futures:
            future.set_exception(AnalysisStopped(
                "the server's audio analysis stopped while it worked on this request; it is being restarted: "
                "try again shortly"))

