"""One utterance of a live-text session (ui/http/live.py): the text between two input.done, spoken
as one request, and its audio sent sentence by sentence in the protocol's frames (audio.start, the
audio as binary frames or audio.chunk messages, audio.done), with its words when asked for.

`Voice` is a session.config as built once: every utterance takes the one in force when it began,
so a config sent while it plays changes only the utterances after it.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

import anyio
import numpy as np

from inference.errors import InputError
from inference.request.feed import TextFeed
from inference.request.request import SynthesisRequest
from inference.serving.job import Job
from inference.text.clauses import SENTENCE_END, Clauses

from .common import admit
from .listen import Heard, heard
from .speech_body import openai_message
from ..guard.answers import Refusal
from ..services.audio import encode_whole
from ..services.words import WordTrack

FRAME_BYTES = 512 * 1024  # a binary frame's most: under the 1 MiB a `websockets` client takes by default

# Each sentence's first audio as it leaves, at DEBUG (bench/lab/step_trace.py turns it on): how long
# after the worker handed it over. Beside the scheduler's step log it says whether a silence a client
# hears at a seam was a patch made late or one sent late. Off, an utterance only asks whether it is on.
SEND_LOG = logging.getLogger("voxcpm.sends")


class Socket(Protocol):
    """What an utterance needs of its session (ui/http/live.py Session): the app's context, and its
    way out, which raises Stalled once nothing more can be sent."""
    state: object

    async def send(self, message: dict): ...

    async def send_bytes(self, data: bytes): ...

    async def error(self, message: str): ...

    def describe(self, data, body=None): ...


@dataclass(frozen=True)
class Voice:
    """One session.config, checked and built once: each utterance's request is `template` with its
    text. An utterance keeps the Voice it began with, whatever config follows it."""
    template: SynthesisRequest
    fmt: str
    rate: int
    stream_audio: bool
    word_timestamps: bool
    split: str
    streaming_mode: str

    @property
    def per_unit(self) -> bool:
        """Each committed piece of text is a sentence of its own (audio.start ... audio.done)."""
        return self.split != "none" and self.streaming_mode == "sentence"

    @property
    def live(self) -> bool:
        """The utterance's text goes to its request as it comes, not at input.done."""
        return self.split != "none" or self.streaming_mode != "sentence"

    def request(self, text: str) -> SynthesisRequest:
        return dataclasses.replace(self.template, text=text, feed=TextFeed() if self.live else None)

    def committer(self, min_clause_chars: int) -> Clauses:
        """What cuts the text into the pieces that go to the model."""
        if self.streaming_mode == "sentence_commit" or not self.live:
            return Clauses(math.inf)  # the client commits (input.commit, input.done)
        if self.split == "sentence":
            return Clauses(1, SENTENCE_END)
        return Clauses(min_clause_chars)


@dataclass(frozen=True)
class Unit:
    """What admit() reads for an utterance: the text its request starts with."""
    text: str
    request_id = None


class Closed(Exception):
    """The session ends with `code`: the client left or broke a rule the error event named (what
    is being spoken stops), or closed it (`finish`: what it sent is spoken first)."""

    def __init__(self, code: int, finish: bool = False):
        super().__init__(code)
        self.code, self.finish = code, finish


class Stalled(Closed):
    """Nothing more can be sent: the client read none of its audio for the stall timeout, or has
    gone. What waits for it is dropped."""

    def __init__(self):
        super().__init__(1008)


@dataclass
class Sentence:
    """One audio.start ... audio.done."""
    index: int
    start: int  # samples sent before it, at the rate sent
    samples: int = 0
    bytes: int = 0
    held: list = dataclasses.field(default_factory=list)  # its audio, when it is sent whole at its end
    chunks: int = 0


class Utterance:
    """The text between two input.done, spoken as one request: its pieces go to the job as they are
    committed (the first one starts it), its audio goes out as it is made."""

    def __init__(self, session: Socket, index: int, voice: Voice, after: Utterance | None = None):
        """after: the utterance before, whose audio goes out first (utterances are heard in turn)."""
        self.session, self.index, self.voice, self.after = session, index, voice, after
        self.units: list[str] = []  # committed, not yet given to the job
        self.spoken: list[str] = []  # given to the job, in its clauses' order
        self.ended = False  # input.done: no piece follows
        self.interrupted = False
        self.job: Job | None = None
        self.feed: TextFeed | None = None  # a live utterance's later pieces go to its request through it
        self.kick = asyncio.Event()
        self.task: asyncio.Task | None = None

    @property
    def busy(self) -> bool:
        """The server owes this utterance's client something: audio, or a place in the line."""
        return self.task is not None and not self.task.done()

    @property
    def waits_for_client(self) -> bool:
        """Live and not ended, with all it was given spoken and sent: the next move is the client's
        (more text, or input.done), and its silence is idleness."""
        job, feed = self.job, self.feed
        if self.ended or job is None or feed is None or self.units or not self.busy \
                or len(self.spoken) != len(feed.clause_segments):
            return False
        report = job.text_report
        return (len(report.seeds) if report is not None else 0) >= sum(feed.clause_segments) \
            and job.unread_chunks() == 0

    def add(self, text: str):
        self.units.append(text)
        if self.task is None:
            self.task = asyncio.create_task(self.speak())
        self.kick.set()

    def end(self):
        self.ended = True
        self.kick.set()

    def interrupt(self):
        self.interrupted = self.ended = True
        self.units.clear()
        if self.job is not None:
            self.job.cancel()
        self.kick.set()

    async def next_unit(self) -> str | None:
        """The next committed piece, waited for; None once none will follow."""
        while True:
            if self.interrupted:
                return None
            if self.units:
                return self.units.pop(0)
            if self.ended:
                return None
            await self.kick.wait()
            self.kick.clear()

    async def speak(self):
        """The job started with the first piece that can be spoken, fed the others as they come,
        and its audio sent; then session.done, in utterance order."""
        if self.after is not None and self.after.task is not None:
            await asyncio.gather(self.after.task, return_exceptions=True)
            self.after = None
        try:
            job, first = await self.start()
            sentences = 0
            if job is not None:
                feeding = asyncio.create_task(self.feed_more()) if self.voice.live else None
                try:
                    sentences = await self.send_audio(job, first)
                finally:
                    if feeding is not None:
                        feeding.cancel()
                    job.discard()
                    self.session.state.metrics.job_ended(job)
            done = {"type": "session.done", "utterance_index": self.index, "total_sentences": sentences}
            # request_id (an extension vLLM-Omni's clients ignore): the page reads the job's figures by it
            await self.session.send(done | ({"interrupted": True} if self.interrupted else {})
                                    | ({"request_id": job.id} if job is not None else {}))
        except Stalled:  # the session is closing; the job's audio goes with it
            pass

    async def start(self) -> tuple[Job | None, object]:
        """The job, from the first piece its checks accept: a piece refused is said and skipped;
        a refusal of the server's (busy) ends the utterance with it."""
        s = self.session
        while (text := await self.next_unit()) is not None:
            self.spoken.append(text)
            try:
                job, _, first = await admit(s.state, lambda: _ready(Unit(text)), _unit, build=self.build,
                                            describe=s.describe,
                                            submitted=lambda job: setattr(self, "job", job))
            except Refusal as exc:
                self.spoken.pop()
                if self.interrupted:  # cancelled while it waited for a row
                    return None, None
                if exc.status >= 500 or exc.status == 409:  # the server could not take it: the rest cannot follow
                    await s.error(f"{openai_message(exc)}: the utterance is not spoken")
                    self.units.clear()
                    return None, None
                await s.error(f"{openai_message(exc)} (not spoken: {text.strip()[:40]!r})")
            except InputError as exc:
                self.spoken.pop()
                await s.error(f"{openai_message(exc)} (not spoken: {text.strip()[:40]!r})")
            else:
                return job, first
        return None, None

    def build(self, unit: Unit) -> SynthesisRequest:
        request = self.voice.request(unit.text)
        self.feed = request.feed
        return request

    async def feed_more(self):
        """Each later piece to the request's feed, made ready off the loop; then the end of its text."""
        s, feed = self.session, self.feed
        while (text := await self.next_unit()) is not None:
            self.spoken.append(text)  # before its audio can come
            try:
                await anyio.to_thread.run_sync(feed.add_text, text)
            except InputError as exc:  # this piece cannot be spoken: said, and the rest goes on
                self.spoken.pop()
                await s.error(f"{openai_message(exc)} (not spoken: {text.strip()[:40]!r})")
            except RuntimeError:  # the job has ended (cut, failed, fell behind): send_audio says why
                self.spoken.pop()
                return
        if not self.interrupted:
            feed.close()

    async def send_audio(self, job: Job, first) -> int:
        """The job's audio (ui/http/listen.heard), sentence by sentence; returns how many sentences it counts."""
        v, s = self.voice, self.session
        words = WordTrack(s.state.analysis, job, v.rate, s.state.settings.evaluation.words_wait_s) \
            if v.word_timestamps else None
        sentence = None
        async with contextlib.aclosing(heard(job, first, v.rate, words)) as audio:
            async for piece in audio:
                begins = False  # a sentence's first audio from the model (a seam, after the first)
                if piece.delivery is not None:
                    index = clause_of(self.feed.clause_segments, piece.delivery.chunk.segment) if v.per_unit else 0
                    if begins := sentence is None or index != sentence.index:
                        if sentence is not None:
                            await self.sentence_done(sentence, words)
                        sentence = await self.sentence_start(index, piece.offset)
                elif sentence is None and len(piece.audio):
                    sentence = await self.sentence_start(0, piece.offset)
                if sentence is not None:
                    await self.send_piece(sentence, piece)
                    if begins and v.stream_audio and SEND_LOG.isEnabledFor(logging.DEBUG):
                        log_sent(job, piece.delivery.server_s, sentence.index)
        failed = job.error is not None  # failed, or cut at the bound on a request's audio
        if failed:
            spoken = sentence.index + 1 if sentence is not None else 0
            left = len(self.spoken) + len(self.units) - spoken if v.per_unit else 0
            await s.error(f"{job.error}" + (f" ({left} more of this utterance's sentences not spoken)" if left > 0 else ""))
        if sentence is not None:
            await self.sentence_done(sentence, words, error=failed)
        if sentence is None:
            return 0
        return sentence.index + 1 if v.per_unit else len(self.spoken) if v.live else 1

    async def sentence_start(self, index: int, start: int) -> Sentence:
        v = self.voice
        text = self.spoken[index] if v.per_unit else "".join(self.spoken) if not v.live else self.spoken[0]
        await self.session.send({"type": "audio.start", "utterance_index": self.index, "sentence_index": index,
                                 "sentence_text": text, "format": v.fmt, "sample_rate": v.rate, "channels": 1,
                                 "request_id": self.job.id}  # ours, as on session.done: a stopped take's figures
                                | ({"word_timestamps": True} if v.word_timestamps else {}))
        return Sentence(index, start)

    async def send_piece(self, sentence: Sentence, piece: Heard):
        v, s, audio = self.voice, self.session, piece.audio
        sentence.samples += len(audio)
        if not v.stream_audio:
            sentence.held.append(audio)
            return
        data = piece.int16()
        if not data:
            return
        sentence.bytes += len(data)
        if v.word_timestamps:
            await self.audio_chunk(sentence, data, None, sentence.samples - len(audio), sentence.samples)
        else:
            await s.send_bytes(data)

    async def audio_chunk(self, sentence: Sentence, data: bytes, timestamps, start: int, end: int):
        rate = self.voice.rate
        await self.session.send({
            "type": "audio.chunk", "utterance_index": self.index, "sentence_index": sentence.index,
            "chunk_id": sentence.chunks, "chunk_start_ms": round(start * 1000 / rate),
            "chunk_end_ms": round(end * 1000 / rate), "sample_rate": rate, "channels": 1,
            "audio_b64": base64.b64encode(data).decode("ascii"), "timestamps": timestamps})
        sentence.chunks += 1

    async def sentence_done(self, sentence: Sentence, words: WordTrack | None, error: bool = False):
        v, s = self.voice, self.session
        if not v.stream_audio:  # the sentence whole, as one file of its format, in frames a client takes
            audio = np.concatenate(sentence.held) if sentence.held else np.zeros(0, np.float32)
            sentence.held = []
            data = await anyio.to_thread.run_sync(encode_whole, v.fmt, audio, v.rate)
            sentence.bytes = len(data)
            for at in range(0, len(data), FRAME_BYTES):
                await s.send_bytes(data[at:at + FRAME_BYTES])
        if words is not None:  # its words, timed from its start, as the last audio.chunk
            await self.audio_chunk(sentence, b"", await sentence_words(words, sentence, v.rate), 0, sentence.samples)
        await s.send({"type": "audio.done", "utterance_index": self.index, "sentence_index": sentence.index,
                      "total_bytes": sentence.bytes, "error": error})


async def sentence_words(words: WordTrack, sentence: Sentence, rate: int) -> list[dict] | None:
    """The words of the segments ended so far (the sentence's), from the sentence's start; None
    when the aligner could not time them (vLLM-Omni's null: failed; [] is silence)."""
    start = sentence.start / rate
    timed, failed = [], False
    for segment in words.ready() + await words.rest():
        failed |= "error" in segment
        timed += [{"word": w["word"], "start_ms": round((w["start_s"] - start) * 1000),
                   "end_ms": round((w["end_s"] - start) * 1000)} for w in segment["words"]]
    return None if failed and not timed else timed


def log_sent(job: Job, server_s: float, sentence: int):
    """SEND_LOG's line for a sentence's first audio, just sent: `server_s` is when the worker
    handed it over, in seconds from the job's start on the engine (Delivery.server_s)."""
    late = time.perf_counter() - job.started_at - server_s
    SEND_LOG.debug("%s", json.dumps({"t": time.monotonic(), "sentence": sentence,
                                     "sent_after_ms": round(1000 * late, 2)}))


def clause_of(clause_segments: list[int], segment: int) -> int:
    """Which clause a segment belongs to, from how many segments each clause was cut into."""
    seen = 0
    for k, count in enumerate(clause_segments):
        seen += count
        if segment < seen:
            return k
    return max(0, len(clause_segments) - 1)


async def _ready(value):
    return value


def _unit(unit: Unit) -> Unit:
    return unit
