"""A request as serving holds it, from the moment the server takes it: the one record of a stream
above the engine. Its state, metrics, the audio channel, cancellation and the error its consumer
gets when it fails or is refused; and, while it runs, what the worker keeps of it on the engine
(the engine's stream, the latents and pauses delivered for the offline render).

Its states: preparing (its request checked and made ready, off the worker's thread), then queued
and running, and at the end done, cut (it reached the most audio one request may have: what it
made is its take, and the message says where it stopped), cancelled or failed; or refused, when its request did not pass
the checks (`refusal` holds why, for the route to answer with). The state has one owner, the
worker that holds the job (inference/serving/worker.py): only the worker calls the lifecycle
methods at the end of the class (accept, refuse, begin, started, deliver, report_text, finish,
hang_up); a consumer reads the state and uses the channel, and asks the worker's line (the `Line`
it was given) for its position or to be withdrawn when it cancels."""
from __future__ import annotations

import collections
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Protocol

from ..request.continuation import Report
from ..request.listener import Listener
from ..request.request import AudioChunk, SynthesisRequest

IN_LINE = ("preparing", "queued")  # states before a row: the line (the worker) knows its place
LIVE = IN_LINE + ("running",)  # states before the end; then done, cut, cancelled, failed or refused


class JobIds:
    """Job ids: UUID4s of the OS's randomness (an id is what cancels its job, so it must not be
    guessable), read BATCH at a time. The event loop draws one per request, and every read of that
    randomness is a system call that lets another thread take the GIL, which the loop then waits to
    get back while a burst is still coming in."""

    BATCH = 256

    def __init__(self):
        self._lock = threading.Lock()
        self._ids: list[str] = []

    def __call__(self) -> str:
        with self._lock:
            if not self._ids:
                raw = os.urandom(16 * self.BATCH)
                self._ids = [uuid.UUID(bytes=raw[i:i + 16], version=4).hex for i in range(0, len(raw), 16)]
            return self._ids.pop()


new_job_id = JobIds()


@dataclass
class Delivery:
    """One patch as its consumer gets it: the engine's chunk (audio as float32), where its first
    sample falls in the utterance, and when the worker handed it over."""
    chunk: AudioChunk
    offset: int  # samples of this job delivered before this chunk
    server_s: float  # seconds from the job leaving the queue to this hand-over


class JobFailed(RuntimeError):
    """Raised to a job's consumer; the message is safe to show to the person who asked."""


class Line(Protocol):
    """What a job asks of the worker that holds it, from its consumer's thread."""

    def position(self, job: Job) -> int:
        """1 for the next job to run, 0 once it has left the line."""

    def withdraw(self, job: Job) -> None:
        """Takes a cancelled job out of the line, if it is still there, and ends it."""


class Job:
    """One request's life: preparing, queued, running, then done, cancelled or failed; or refused."""

    def __init__(self, job_id: str, sample_rate: int, line: Line):
        self.id = job_id
        self.mode, self.text_chars, self.seed = "?", -1, None  # known once its request is (accept)
        # Who hears it (how long its audio lasts for them, the rate it is sent at, their clock), shared with the
        # engine's stream: the unread-audio budget and the status read it. Made with its request.
        self.listener: Listener | None = None
        # Its timings (perf_counter seconds) and what it made: taken by the server (then prepared),
        # in the line, started on the engine, its first chunk handed over, its end; the model's
        # patches, samples handed over, and chunks (the patches and the pieces of each pause's silence).
        self.submitted_at = time.perf_counter()
        self.queued_at: float | None = None
        self.started_at: float | None = None
        self.first_chunk_at: float | None = None
        self.finished_at: float | None = None
        self.patches = self.samples = self.chunks = 0
        self._request: SynthesisRequest | None = None
        self._prepared = None  # engine.prepare(request), made on the worker's intake thread
        self._sample_rate = sample_rate
        self._line = line
        self._state = "preparing"
        self._error: str | None = None
        self._outcome: str | None = None  # ok, cancelled, input_error, too_slow, too_long, out_of_memory or error
        self._refusal: BaseException | None = None
        # The channel: the worker appends, the one consumer pops. An event loop's poll() takes no
        # lock (a deque's ends are atomic); only a thread that waits (next_event) takes `_arrived`,
        # under which every event is put, so its wait cannot miss one.
        self._events: collections.deque = collections.deque()
        self._arrived = threading.Condition(threading.Lock())
        self._cancel = threading.Event()
        self._ended = False
        self._text_report: Report | None = None
        self._segment_ends: list[int] = []  # the listener's samples sent when each segment ended
        # Its words timed on the audio sent, when its consumer asked for them (ui/services/words.py
        # adds each segment's as the analysis process aligns it); None: not asked.
        self._words: list[dict] | None = None
        self._word_errors: list[dict] = []  # {"segment", "error"}: the segments whose words were not made, and why
        self._taken = 0  # the model's samples the consumer took from the channel (its thread writes)
        # What the worker keeps of it on the engine (its thread alone reads and writes these): the
        # engine's stream, the latents delivered (filed in the LatentStore at the end), where each
        # pause's silence fell among them ([patches delivered before it, samples]), and how many of
        # its runaway retries were logged.
        self.stream = None
        self.latents: list = []
        self.pauses: list[list[int]] = []
        self.retries_logged = 0
        # Called by the worker's thread after each event it puts; replaced whole, never changed in
        # place, so the worker iterates a consistent tuple while a consumer adds or removes one.
        self._wakers: tuple[Callable[[], None], ...] = ()

    # -- what anyone may read -------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def error(self) -> str | None:
        return self._error

    @property
    def outcome(self) -> str | None:
        return self._outcome

    @property
    def refusal(self) -> BaseException | None:
        """Why its request was refused (the InputError its checks raised), for the route's answer."""
        return self._refusal

    @property
    def request(self) -> SynthesisRequest | None:
        """None once finished: it may hold a minute of reference audio."""
        return self._request

    @property
    def prepared(self):
        """What the worker starts on the engine; None once finished, as the request."""
        return self._prepared

    @property
    def text_report(self) -> Report | None:
        """A long text's progress (continuation.Report), as the worker last saw it."""
        return self._text_report

    @property
    def segment_ends(self) -> list[int]:
        """The samples its listener was sent when each segment's audio ended."""
        return list(self._segment_ends)

    @property
    def live(self) -> bool:
        return self._state in LIVE

    @property
    def position(self) -> int:
        """1 for the next job to run, 0 once running or finished (the line, and its lock, asked
        only while the job is in it: a finished stream's status frame is built on the event loop)."""
        return self._line.position(self) if self._state in IN_LINE else 0

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    # -- what its consumer does -----------------------------------------------------------------
    def cancel(self):
        """Stop at the next patch boundary (or leave the line at once) and free the slot."""
        self._cancel.set()
        self._line.withdraw(self)

    def discard(self):
        """The consumer has gone: stop the job if it is live, and drop audio it will never read
        (finished jobs stay listed a while, and must not hold a whole utterance meanwhile)."""
        if self.live:
            self.cancel()
        else:
            self._drain()

    def unread_chunks(self) -> int:
        return len(self._events)

    def unread_samples(self) -> int:
        """The model's samples handed over and not yet taken by the consumer (what the channel holds)."""
        return self.samples - self._taken

    def watch(self, wake: Callable[[], None]):
        """wake() is called on the worker's thread after each event is put (so a consumer that
        clears its flag before a non-blocking `poll()` never misses one); it must be quick and must
        not raise, e.g. `loop.call_soon_threadsafe(flag.set)`. Lets an event loop wait for many
        jobs without a thread per job."""
        self._wakers = self._wakers + (wake,)

    def unwatch(self, wake: Callable[[], None]):
        self._wakers = tuple(w for w in self._wakers if w is not wake)

    def poll(self):
        """next_event() without waiting: None when no event is there yet."""
        return self._take(block=False, timeout=None)

    def next_event(self, timeout: float | None = None):
        """('chunk', Delivery) | ('end', None) | ('error', message); None when nothing came in time."""
        return self._take(block=True, timeout=timeout)

    def _take(self, block: bool, timeout: float | None):
        if self._ended:
            return ("end", None)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                kind, value = self._events.popleft()
                break
            except IndexError:  # nothing yet
                if not block:
                    return None
            with self._arrived:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                if not self._events:
                    self._arrived.wait(left)
        if kind == "chunk":
            self._taken += len(value.chunk.audio)
            self.listener.take(len(value.chunk.audio), value.chunk.pause)
        else:
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
        out = {"id": self.id, "state": self._state, "position": self.position, "error": self._error,
               "outcome": self._outcome}
        out.update(self.timings())
        if self.listener is not None:  # what they were sent: a stopped take's marks
            out.update(self.listener.status())
        out.update(self.text_status())
        if self._words is not None:
            out.update(timestamps="word", words=list(self._words))
            if self._word_errors:
                out.update(word_errors=list(self._word_errors))
        return out

    def timings(self) -> dict:
        """Its figures in seconds: intake, waiting in the line, first audio, generation, audio made."""
        audio_s = self.samples / self._sample_rate
        gen_s = None if self.started_at is None else (self.finished_at or time.perf_counter()) - self.started_at
        return {
            "intake_s": None if self.queued_at is None else self.queued_at - self.submitted_at,
            "queue_s": None if self.started_at is None else self.started_at - self.queued_at,
            "ttfp_s": None if self.first_chunk_at is None else self.first_chunk_at - self.started_at,
            "generation_s": gen_s,
            "audio_s": audio_s,
            "rtf": gen_s / audio_s if gen_s is not None and audio_s > 0 else None,
            "patches": self.patches,
            "samples": self.samples,
        }

    @property
    def words(self) -> list[dict] | None:
        """Its words timed so far, in order; None when its consumer did not ask for them."""
        return None if self._words is None else list(self._words)

    def ask_words(self):
        self._words = []

    def add_words(self, words: list[dict]):
        self._words = sorted(self._words + words, key=lambda w: (w["segment"], w["start_s"]))

    @property
    def word_errors(self) -> list[dict]:
        """The segments whose words could not be made ({"segment", "error"}), in the order said."""
        return list(self._word_errors)

    def add_word_error(self, segment: int, error: str):
        self._word_errors = self._word_errors + [{"segment": segment, "error": error}]

    def text_status(self) -> dict:
        """What the page shows of the text: as spoken, which segment ends where in the audio sent,
        the seed each segment kept, and any runaway retries."""
        report, ends = self._text_report, self.segment_ends
        if report is None:
            return {}
        return {"spoken_text": report.spoken_text(), "segments": report.segments, "pauses": report.pauses,
                "segment_count": report.segment_count, "segment_ends": ends, "seeds": report.seeds,
                "retries": report.retries, "cut_segments": report.cut, "released_early": report.released_early}

    # -- its lifecycle: called by the worker that runs it, and by nothing else --------------------
    def accept(self, request: SynthesisRequest, prepared):
        """Its request passed the checks and is ready for the engine: it joins the line."""
        self.mode, self.text_chars, self.seed = request.mode, len(request.text), request.seed
        self.listener = request.listener(self._sample_rate)
        self._request, self._prepared = request, prepared
        self.queued_at = time.perf_counter()
        self._state = "queued"

    def refuse(self, reason: BaseException, message: str):
        """Its request did not pass the checks: it ends here, with why."""
        self._refusal = reason
        self.finish("refused", message, "input_error")

    def begin(self):
        """It has left the line for a free row (the worker holds its lock)."""
        self._state = "running"

    def started(self):
        """The engine is about to get it: the queue time ends here."""
        self.started_at = time.perf_counter()

    def deliver(self, chunk: AudioChunk):
        """Hands one patch (audio already float32) to the consumer and counts it."""
        now, ends = time.perf_counter(), self._segment_ends
        while len(ends) <= chunk.segment:
            ends.append(self.listener.sent_samples())
        if self.first_chunk_at is None:
            self.first_chunk_at = now
        delivery = Delivery(chunk, self.samples, now - self.started_at)
        self.listener.deliver(len(chunk.audio), chunk.pause)
        self.patches += not chunk.pause  # the model's patches; a pause's silence counts in samples only
        self.samples += chunk.audio.shape[0]
        self.chunks += 1
        ends[chunk.segment] = self.listener.sent_samples()
        self._put(("chunk", delivery))

    def report_text(self, report: Report):
        self._text_report = report

    def finish(self, state: str, error: str | None = None, outcome: str | None = None):
        """Its end: state done, cut, cancelled, failed or refused. Its consumer hears of it at hang_up(), once
        the worker has logged it, so the log line is there when the consumer returns."""
        self.finished_at = time.perf_counter()
        if self._request is not None and self._request.feed is not None:
            self._request.feed.close()  # a live session's next clause is told the stream has ended
        self._request = self._prepared = None
        # Filed by now (the worker's LatentStore), and finished jobs stay listed a while: let go of
        # the engine's stream (its text plan, tails) and the latents, which grow with the take.
        self.stream, self.latents, self.pauses = None, [], []
        if state == "cancelled":
            self._drain()  # nobody wants the audio of a cancelled job; finished jobs are kept a while
        self._state, self._error = state, error
        self._outcome = outcome or ("ok" if state == "done" else state)

    def hang_up(self):
        self._put(("error", self._error) if self._error else ("end", None))

    def _put(self, event):
        with self._arrived:
            self._events.append(event)
            self._arrived.notify()
        for wake in self._wakers:  # after the put: a woken consumer finds the event
            wake()

    def _drain(self):
        try:
            while True:
                kind, value = self._events.popleft()
                if kind == "chunk":
                    self._taken += len(value.chunk.audio)  # dropped: no longer held
        except IndexError:
            pass

