"""WS /v1/audio/speech/stream: text spoken while it is still being written (an LLM's tokens as they
come), in one voice, with audio going out as it is made.

The protocol is vLLM-Omni's streaming-text WebSocket, message for message, so its clients work
unchanged (it serves VoxCPM2 too, at the same path; its messages are published in its repository,
docs/serving/speech_api.md, where Mistral's realtime TTS names only some of its fields):

  client                                         server
  {"type": "session.config", ...}                (first; again between utterances to change it)
  {"type": "input.text", "text": "..."}          {"type": "audio.start", "utterance_index", "sentence_index",
                                                  "sentence_text", "format": "pcm", "sample_rate"}
                                                 binary frames: the sentence's int16 PCM (one, or with
                                                  "stream_audio": true each piece as it is made)
                                                 {"type": "audio.done", "utterance_index", "sentence_index",
                                                  "total_bytes", "error"}
  {"type": "input.done"}                         {"type": "session.done", "utterance_index", "total_sentences"}
  {"type": "session.close"}                      (what is buffered is spoken, then the socket closes)
                                                 {"type": "error", "message": "..."}

session.config takes the body of POST /v1/audio/speech (ui/http/speech_body.py) without `input`:
`voice` (a saved voice, a built-in name, or "design" with `instructions`), `instructions`, `seed`,
`sample_rate` and the spec's other settings; or, instead of `voice`, a clip as vLLM-Omni takes one
(`ref_audio`, a data: URL of base64 audio, and `ref_text`, its transcript, for ultimate cloning;
our `reference_id` names a clip uploaded to POST /voxcpm/upload); `response_format` is "pcm" (16-bit mono, 24 kHz by
default). One extension: {"type": "input.interrupt"} stops the utterance being spoken within one
patch (barge-in) and drops the text not yet spoken; session.done then says "interrupted": true.

Where vLLM-Omni speaks each sentence as its own request, here a "sentence" is a clause committed to
the model (inference/text/clauses.py): the clauses of one utterance are one request (one job, one row), each
continuing the voice of the one before as a long text's segments do (inference/request/feed.py),
so the seam has no gap while text runs ahead of the audio and is silence, not garbage, when it
falls behind. An utterance counts against the same rows and line as every other request.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import time

import anyio
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from inference.errors import InputError
from inference.request import modes
from inference.request.feed import TextFeed
from inference.serving.job import Job
from inference.text.clauses import Clauses

from .common import admit, next_event, page_asked
from .schema import parse_body
from .schema import to_request as page_request
from .speech_body import check_rate, openai_asked, openai_message, parse_speech, to_request
from ..context import app_context
from ..library.uploads import client_key
from ..services.audio import Encoder, sent_rate

log = logging.getLogger("voxcpm.live")
live_router = APIRouter()

# What session.config may set beside a clip (the page's body's settings; as OpenAI's body, no min_len).
CLIP_SETTINGS = {"seed", "normalize", "trim_silence"} | {name for name in modes.TUNING if name != "min_len"}
LARGE_MESSAGE = 64 * 1024  # characters of a message parsed on the event loop
MESSAGES = ("session.config", "input.text", "input.done", "input.interrupt", "session.close")


class Closed(Exception):
    """The session ends with `code`: the client left or broke a rule the error event named (what
    is being spoken stops), or closed it (`finish`: what it sent is spoken first)."""

    def __init__(self, code: int, finish: bool = False):
        super().__init__(code)
        self.code, self.finish = code, finish


class Stalled(Closed):
    """The client read none of its audio for the stall timeout: what waits for it is dropped."""

    def __init__(self):
        super().__init__(1008)


class Utterance:
    """The text between two input.done, spoken as one request: its clauses go to the job as they
    are committed (the first one starts it), its audio goes out as it is made."""

    def __init__(self, session: Session, index: int, after: Utterance | None = None):
        """after: the utterance before, whose audio goes out first (utterances are heard in turn)."""
        self.session, self.index, self.after = session, index, after
        self.job: Job | None = None
        self.clauses: list[str] = []  # as committed
        self.fed = 0  # clauses the job has
        self.ended = False  # input.done: no clause follows
        self.interrupted = False
        self.kick = asyncio.Event()
        self.task: asyncio.Task | None = None

    def add(self, clause: str):
        self.clauses.append(clause)
        if self.task is None:
            self.task = asyncio.create_task(self.speak())
        self.kick.set()

    def end(self):
        self.ended = True
        self.kick.set()

    def interrupt(self):
        self.interrupted = self.ended = True
        if self.job is not None:
            self.job.cancel()
        self.kick.set()

    async def speak(self):
        """The job started with the first clause, fed the others as they come, and its audio sent."""
        s = self.session
        if self.after is not None and self.after.task is not None:
            await asyncio.gather(self.after.task, return_exceptions=True)
            self.after = None
        if self.interrupted:
            return await s.send({"type": "session.done", "utterance_index": self.index, "total_sentences": 0,
                                 "interrupted": True})
        first = None
        try:
            body = s.body_of(self.clauses[0])
            self.fed = 1
            job, _, first = await admit(s.state, lambda: _ready(body), s.parse, build=s.build, describe=s.describe,
                                        submitted=lambda job: setattr(self, "job", job))
        except InputError as exc:
            await s.error(openai_message(exc))
            await s.send({"type": "session.done", "utterance_index": self.index, "total_sentences": 0})
            return
        feeding = asyncio.create_task(self.feed(job))
        try:
            await self.send_audio(job, first)
        except Stalled:  # the session is closing; the job's audio goes with it (below)
            pass
        finally:
            feeding.cancel()
            job.discard()
            s.state.metrics.job_ended(job)

    async def feed(self, job: Job):
        """Each later clause to the job, prepared off the loop; then the end of its text."""
        while True:
            await self.kick.wait()
            self.kick.clear()
            while self.fed < len(self.clauses) and not self.interrupted:
                clause = self.clauses[self.fed]
                try:
                    await anyio.to_thread.run_sync(job.add_text, clause)
                except InputError as exc:  # this clause cannot be spoken: said, and the rest goes on
                    await self.session.error(f"{openai_message(exc)} (not spoken: {clause.strip()[:40]!r})")
                    del self.clauses[self.fed]
                    continue
                except RuntimeError:  # the job has ended (failed, or fell behind): send_audio says why
                    return
                self.fed += 1
            if self.ended:
                job.end_text()
                return

    async def send_audio(self, job: Job, first):
        s = self.session
        encoder = Encoder("pcm", job.listener.output(s.rate), s.rate)
        sentence, held, sent_bytes, event = -1, [], 0, ("chunk", first)
        try:
            while event is not None and event[0] == "chunk":
                chunk = event[1].chunk
                clause = clause_of(job.clause_segments, chunk.segment)
                if clause != sentence:
                    if sentence >= 0:
                        await self.sentence_done(sentence, held, sent_bytes)
                    sentence, held, sent_bytes = clause, [], 0
                    await s.send({"type": "audio.start", "utterance_index": self.index, "sentence_index": sentence,
                                  "sentence_text": self.clauses[sentence], "format": "pcm", "sample_rate": s.rate})
                data = encoder.feed(chunk.audio, chunk.pause) if encoder.inline else \
                    await anyio.to_thread.run_sync(encoder.feed, chunk.audio, chunk.pause)
                sent_bytes += len(data)
                if s.stream_audio and data:
                    await s.send_bytes(data)
                elif data:
                    held.append(data)
                event = await next_event(job, None)
            tail = encoder.finish()
            if tail and s.stream_audio:
                await s.send_bytes(tail)
            elif tail:
                held.append(tail)
            sent_bytes += len(tail)
            failed = job.state == "failed"
            if sentence >= 0:
                await self.sentence_done(sentence, held, sent_bytes, error=failed)
            if failed:
                await s.error(job.error or "the utterance failed on the server")
            done = {"type": "session.done", "utterance_index": self.index, "total_sentences": sentence + 1}
            await s.send(done | ({"interrupted": True} if self.interrupted else {}))
        finally:
            encoder.close()

    async def sentence_done(self, sentence: int, held: list[bytes], total: int, error: bool = False):
        if held:
            await self.session.send_bytes(b"".join(held))
        await self.session.send({"type": "audio.done", "utterance_index": self.index, "sentence_index": sentence,
                                 "total_bytes": total, "error": error})


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


def parse_live(config: dict):
    """session.config as the OpenAI body it is (without `input`, which each utterance's first clause
    fills), its values checked as that route checks them."""
    return parse_speech(config)


class Session:
    def __init__(self, ws: WebSocket):
        self.ws, self.state = ws, app_context(ws)
        self.settings = self.state.settings.live
        self.config: dict | None = None  # the body of each utterance's request, but its text
        self.clip = False  # the voice is a clip (ref_audio or reference_id): the page's body, not OpenAI's
        self.stream_audio = False
        self.rate = 0
        self.clauses = Clauses(self.settings.min_clause_chars)
        self.utterance: Utterance | None = None
        self.utterances = 0
        self.chars = 0  # text received in this session
        self.pieces: list[float] = []  # when the pieces of the last second came
        self.send_lock = asyncio.Lock()
        self.stall_s = self.state.settings.http.stall_timeout_s
        self.stalled = False
        self.reading = anyio.CancelScope()  # the reader's wait for the client, cancelled when it stalls

    # The request an utterance makes: OpenAI's body (a designed, built-in or saved voice), or with a clip the
    # page's (ui/http/schema.py), each read and checked as its own route reads and checks it.
    def body_of(self, text: str) -> dict:
        return dict(self.config, **{"text" if self.clip else "input": text})

    def parse(self, raw):
        return parse_body(raw) if self.clip else parse_live(raw)

    def describe(self, data, body=None):
        return page_asked(data, body) if self.clip else openai_asked(data, body)

    def build(self, body):
        if self.clip:
            request = page_request(body, self.state.clips, self.state.voice_lookup)
        else:
            request = to_request(body, self.state.voices, self.state.voice_lookup)
        request.feed = TextFeed()
        return request

    def clip_config(self, config: dict) -> dict:
        """session.config with a clip (vLLM-Omni's `ref_audio`, a data: URL of base64 audio, or an id of
        POST /voxcpm/upload as `reference_id`; `ref_text` its transcript for ultimate cloning) as the
        page's body; blocking (a clip is decoded and stored): call it off the event loop."""
        if config.pop("voice", None) is not None:
            raise InputError("give either `voice` or a clip (`ref_audio` or `reference_id`), not both", "voice")
        audio, reference_id = config.pop("ref_audio", None), config.pop("reference_id", None)
        if (audio is None) == (reference_id is None):
            raise InputError("give the clip once: `ref_audio` (a data: URL of base64 audio) or `reference_id` "
                             "(from POST /voxcpm/upload)", "ref_audio")
        if audio is not None:
            reference_id = self.store_clip(audio)
        transcript = config.pop("ref_text", None)
        instructions = config.pop("instructions", None)
        for name in ("model", "response_format", "sample_rate"):
            config.pop(name, None)
        unknown = sorted(set(config) - CLIP_SETTINGS)
        if unknown:
            raise InputError(f"unknown setting {unknown[0]!r} with a clip: use ref_text, instructions, sample_rate, "
                             f"{', '.join(sorted(CLIP_SETTINGS))}")
        return {**config, "mode": "ultimate" if transcript else "cloning", "reference_id": reference_id,
                "prompt_text": transcript, "control": instructions}

    def store_clip(self, audio) -> str:
        if not isinstance(audio, str) or not audio.startswith("data:") or ";base64," not in audio[:100]:
            raise InputError("ref_audio must be a data: URL of base64 audio (data:audio/wav;base64,...): this "
                             "server fetches no URLs; or upload the clip (POST /voxcpm/upload) and send its "
                             "reference_id", "ref_audio")
        limit = self.state.clips.max_bytes
        encoded = audio.split(";base64,", 1)[1]
        if len(encoded) * 3 // 4 > limit:
            raise InputError(f"ref_audio holds more than {limit // 2**20} MiB of audio", "ref_audio")
        try:
            data = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise InputError("ref_audio is not valid base64", "ref_audio") from None
        client = self.ws.client.host if self.ws.client else None
        clip_id, _ = self.state.clips.add_bytes(data, client_key(client))
        return clip_id

    # -- out ----------------------------------------------------------------------------------------
    async def send(self, message: dict):
        await self._send(self.ws.send_text, json.dumps(message, ensure_ascii=False))

    async def send_bytes(self, data: bytes):
        await self._send(self.ws.send_bytes, data)

    async def _send(self, send, payload):
        """One message out, within the stall timeout: a client that reads nothing for that long (its
        buffers full) is closed, and the audio waiting for it dropped, as an HTTP stream's is
        (ui/guard/connections.py)."""
        if self.stalled:
            raise Stalled()
        async with self.send_lock:
            if self.ws.application_state != WebSocketState.CONNECTED:
                return
            try:
                with anyio.fail_after(self.stall_s):
                    await send(payload)
            except TimeoutError:
                self.stall()
                raise Stalled() from None

    def stall(self):
        if self.stalled:
            return
        self.stalled = True
        log.warning("closed a live-text session: it read none of its audio for %g s", self.stall_s)
        self.interrupt_all()
        self.reading.cancel()  # the reader waits for the client's next message: it ends now

    async def error(self, message: str):
        await self.send({"type": "error", "message": message})

    async def fatal(self, message: str, code: int = 1008):
        await self.error(message)
        raise Closed(code)

    # -- in -----------------------------------------------------------------------------------------
    async def run(self):
        last, finish, code = time.monotonic(), False, 1011  # 1011: the server failed, unless a way out below says
        try:
            with self.reading:
                await self.read(last)
            raise Stalled()  # only a stall ends the reading without a way out of its own
        except (Closed, WebSocketDisconnect) as closing:
            finish = isinstance(closing, Closed) and closing.finish
            code = closing.code if isinstance(closing, Closed) else 1000
        finally:
            speaking = self.utterance is not None and self.utterance.task is not None and not self.utterance.task.done()
            if speaking:
                if not finish or self.ws.client_state != WebSocketState.CONNECTED:
                    self.interrupt_all()  # nobody hears it any more, or the session broke a rule
                await asyncio.gather(self.utterance.task, return_exceptions=True)
        if self.ws.application_state == WebSocketState.CONNECTED and self.ws.client_state == WebSocketState.CONNECTED:
            with anyio.move_on_after(1.0):  # a stalled client's buffers may not take even the close frame
                await self.ws.close(code)

    async def read(self, last: float):
        """The client's messages, until a way out (Closed) or a stall cancels the wait."""
        while True:
            waiting = self.clauses.buffer.strip() != ""
            timeout = self.settings.commit_after_s if waiting else self.settings.session_idle_s
            message = None
            with anyio.move_on_after(timeout):
                message = await self.ws.receive()
            if message is None:
                if waiting:  # the pieces stopped: speak what is there, up to its last word
                    if (text := self.clauses.idle()) is not None:
                        await self.commit(text)
                if time.monotonic() - last >= self.settings.session_idle_s:
                    await self.fatal(f"the session sent nothing for {self.settings.session_idle_s:g} s and is "
                                     f"closed: send input.text, input.done or session.close within that", 1000)
                continue
            last = time.monotonic()
            if message["type"] == "websocket.disconnect":
                raise Closed(1000)
            if message.get("bytes") is not None:
                await self.error("binary frames are not accepted: send JSON text messages, each with a "
                                 f"`type` of {', '.join(MESSAGES)}")
                continue
            await self.handle(message.get("text") or "")

    async def handle(self, raw: str):
        try:  # a clip's base64 may make a message megabytes long: parsed off the event loop
            message = json.loads(raw) if len(raw) < LARGE_MESSAGE else await anyio.to_thread.run_sync(json.loads, raw)
        except ValueError:
            return await self.error("the message is not JSON: send JSON text messages, each with a `type` of "
                                    f"{', '.join(MESSAGES)}")
        kind = message.get("type") if isinstance(message, dict) else None
        if kind not in MESSAGES:
            return await self.error(f"unknown message type {str(kind)[:40]!r}: use one of {', '.join(MESSAGES)}")
        await getattr(self, "on_" + kind.replace(".", "_"))(message)

    async def on_session_config(self, message: dict):
        if self.clauses.buffer.strip() or (self.utterance is not None and not self.utterance.ended):
            return await self.error("session.config is refused while an utterance is open: send input.done "
                                    "first, so that no text is dropped")
        config = {k: v for k, v in message.items() if k not in ("type", "stream_audio")}
        config.setdefault("model", "voxcpm2")
        config.setdefault("response_format", "pcm")
        stream_audio = message.get("stream_audio", False)
        if not isinstance(stream_audio, bool):
            return await self.error("stream_audio must be true or false")
        if "input" in config:
            return await self.error("session.config takes no `input`: send the text as input.text messages")
        if config["response_format"] != "pcm":
            return await self.error(f"response_format {str(config['response_format'])[:20]!r} is not offered here: "
                                    f"this socket sends raw 16-bit PCM (\"pcm\")")
        rate = config.get("sample_rate")
        clip = any(name in config for name in ("ref_audio", "reference_id", "ref_text"))
        before = self.config, self.clip
        try:  # checked now, as the route checks a body, so that a bad voice is said before any text
            if clip:
                config = await anyio.to_thread.run_sync(self.clip_config, dict(config))
            self.config, self.clip = config, clip
            body = self.parse(self.body_of("."))
            await anyio.to_thread.run_sync(self.build, body)
            if clip:
                check_rate(rate, "pcm")
        except InputError as exc:
            self.config, self.clip = before
            return await self.error(openai_message(exc))
        self.stream_audio = stream_audio
        self.rate = sent_rate("pcm", rate, self.state.worker.sample_rate)

    async def on_input_text(self, message: dict):
        text = message.get("text")
        if not isinstance(text, str):
            return await self.error("input.text needs `text`, a string")
        if self.config is None:
            return await self.error("send session.config first: it says which voice speaks the text")
        now = time.monotonic()
        self.pieces = [t for t in self.pieces if now - t < 1.0] + [now]
        if len(self.pieces) > self.settings.max_pieces_per_s:
            await self.fatal(f"more than {self.settings.max_pieces_per_s} input.text messages in a second: "
                             "send larger pieces")
        limit = self.state.settings.limits.max_text_chars
        if self.chars + len(text) > limit:
            return await self.error(f"the session's text would pass {limit} characters: this piece "
                                    f"({len(text)} characters) is not spoken; open a new session for more")
        self.chars += len(text)
        for clause in self.clauses.add(text):
            await self.commit(clause)

    async def commit(self, clause: str):
        if self.utterance is None or self.utterance.ended:  # a new one, heard after the one before
            self.utterance = Utterance(self, self.utterances, after=self.utterance)
            self.utterances += 1
        self.utterance.add(clause)

    async def on_input_done(self, _message: dict):
        if (text := self.clauses.rest()) is not None:
            await self.commit(text)
        if self.utterance is None or self.utterance.ended:
            index = self.utterances
            self.utterances += 1
            return await self.send({"type": "session.done", "utterance_index": index, "total_sentences": 0})
        self.utterance.end()

    async def on_input_interrupt(self, _message: dict):
        self.clauses.rest()  # the text not yet spoken is dropped with the audio
        self.interrupt_all()

    def interrupt_all(self):
        """The utterance being heard, and any after it waiting for its turn, stop."""
        utterance = self.utterance
        while utterance is not None:
            if not utterance.interrupted and (utterance.task is None or not utterance.task.done()):
                utterance.interrupt()
            utterance = utterance.after

    async def on_session_close(self, message: dict):
        await self.on_input_done(message)
        raise Closed(1000, finish=True)


@live_router.websocket("/audio/speech/stream")
async def speech_stream(ws: WebSocket):
    await ws.accept()
    await Session(ws).run()
