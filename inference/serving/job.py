"""A queued request as its consumer sees it: state, metrics, the audio channel, cancellation;
and the error its consumer gets when it fails. inference/serving/worker.py runs jobs."""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Delivery:
    """One patch as its consumer gets it: the engine's chunk (audio as float32), where its first
    sample falls in the utterance, and when the worker handed it over."""
    chunk: Any  # inference.request.request.AudioChunk
    offset: int  # samples of this job delivered before this chunk
    server_s: float  # seconds from the job leaving the queue to this hand-over


class JobFailed(RuntimeError):
    """Raised to a job's consumer; the message is safe to show to the person who asked."""


@dataclass
class JobMetrics:
    queued_at: float
    started_at: float | None = None
    first_chunk_at: float | None = None
    finished_at: float | None = None
    patches: int = 0
    samples: int = 0

    def as_dict(self, sample_rate: int) -> dict:
        audio_s = self.samples / sample_rate
        gen_s = None if self.started_at is None else (self.finished_at or time.perf_counter()) - self.started_at
        return {
            "queue_s": None if self.started_at is None else self.started_at - self.queued_at,
            "ttfp_s": None if self.first_chunk_at is None else self.first_chunk_at - self.started_at,
            "generation_s": gen_s,
            "audio_s": audio_s,
            "rtf": gen_s / audio_s if gen_s is not None and audio_s > 0 else None,
            "patches": self.patches,
            "samples": self.samples,
        }


class Job:
    """One request's life: queued, running, then done, cancelled or failed."""

    def __init__(self, worker, request, job_id: str):  # worker: the EngineWorker that runs it
        self.id = job_id
        self.request = request  # dropped once finished: it may hold a minute of reference audio
        self.mode = getattr(request, "mode", "?")
        self.text_chars = len(getattr(request, "text", "") or "")
        self.state = "queued"
        self.error: str | None = None
        self.outcome: str | None = None  # ok, cancelled, input_error, too_slow, out_of_memory or error
        self.metrics = JobMetrics(queued_at=time.perf_counter())
        self._worker = worker
        self._events: queue.Queue = queue.Queue()
        self._cancel = threading.Event()
        self._ended = False
        self.text_report = None  # a long text's progress (continuation.Report), from the worker
        self.segment_ends: list[int] = []  # samples delivered when each segment's audio ended
        self.retries_logged = 0
        self.patches: list = []  # the latents delivered, until the worker files them (LatentStore)
        self.decode_context = None  # the patches the stream's decoder was warmed on, if any

    @property
    def position(self) -> int:
        """1 for the next job to run, 0 once running or finished."""
        return self._worker.position(self)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self):
        """Stop at the next patch boundary (or leave the line at once) and free the slot."""
        self._cancel.set()
        self._worker.withdraw(self)

    def discard(self):
        """The consumer has gone: stop the job if it is live, and drop audio it will never read
        (finished jobs stay listed a while, and must not hold a whole utterance meanwhile)."""
        if self.state in ("queued", "running"):
            self.cancel()
        else:
            self._drain()

    def unread_chunks(self) -> int:
        return self._events.qsize()

    def next_event(self, timeout: float | None = None):
        """('chunk', Delivery) | ('end', None) | ('error', message); None when nothing came in time."""
        if self._ended:
            return ("end", None)
        try:
            kind, value = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if kind != "chunk":
            self._ended = True
        return kind, value

    def __iter__(self):
        """Yield the new samples of each patch; raise JobFailed with a message fit for the user."""
        try:
            while True:
                kind, value = self.next_event()
                if kind == "chunk":
                    yield value.chunk.audio
                elif kind == "error":
                    raise JobFailed(value)
                else:
                    return
        finally:
            self.discard()

    def status(self) -> dict:
        out = {"id": self.id, "state": self.state, "position": self.position, "error": self.error,
               "outcome": self.outcome}
        out.update(self.metrics.as_dict(self._worker.sample_rate))
        out.update(self.text_status())
        return out

    def text_status(self) -> dict:
        """What the page shows of the text: as spoken, which segment ends where in the audio,
        the seed each segment kept, and any runaway retries."""
        report, ends = self.text_report, self.segment_ends
        if report is None:
            return {}
        return {"spoken_text": "".join(report.segments), "segments": report.segments,
                "segment_count": report.segment_count, "segment_ends": ends, "seeds": report.seeds,
                "retries": report.retries, "cut_segments": report.cut}

    def _emit(self, kind: str, value=None):
        self._events.put((kind, value))

    def _drain(self):
        try:
            while True:
                self._events.get_nowait()
        except queue.Empty:
            pass
