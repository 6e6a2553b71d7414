"""WS /v1/audio/speech/stream: text spoken while it is still being written (an LLM's tokens as they
come), in one voice, with audio going out as it is made.

The protocol is vLLM-Omni's streaming-text WebSocket (docs/serving/speech_api.md in its repository),
both its 2026-07 version and the newer one, message for message, so that its clients work unchanged:

  client                                         server
  {"type": "session.config", ...}                (first; again between utterances to change it)
  {"type": "input.text", "text": "..."}          per sentence: {"type": "audio.start", "utterance_index",
                                                  "sentence_index", "sentence_text", "format",
                                                  "sample_rate", "channels"}
                                                 the sentence's audio: binary frames, or with
                                                  word_timestamps JSON {"type": "audio.chunk", ...}
                                                 {"type": "audio.done", "utterance_index", "sentence_index",
                                                  "total_bytes", "error"}
  {"type": "input.commit", "commit_id"}          {"type": "input.committed", ...} (streaming_mode
                                                  "sentence_commit")
  {"type": "input.done"}                         {"type": "session.done", "utterance_index", "total_sentences"}
  {"type": "session.close"}                      (what is buffered is spoken, then the socket closes)
                                                 {"type": "error", "message": "..."}

What a "sentence" is follows the session's config, as in vLLM-Omni: `split_granularity` "none" (the
default) speaks each utterance (the text up to input.done) whole as sentence 0; "sentence" and
"clause" speak each sentence or clause (inference/text/clauses.py) as soon as it is complete, as
its own sentence; `streaming_mode` "token_level" and "sentence_commit" speak clauses (by our commit
policy, or as the client commits them) as they come, heard as one sentence. However they are cut,
the clauses of one utterance are one request (one job, one row), each continuing the voice of the
one before as a long text's segments do (inference/request/feed.py), so a seam has no gap while
text runs ahead of the audio and is silence, not garbage, when it falls behind.

One extension: {"type": "input.interrupt"} stops the utterance being spoken within one patch
(barge-in) and drops the text not yet spoken; session.done then says "interrupted": true.

The idle rule closes a session whose client sends nothing for `session_idle_s` while the server
waits for it; while the server owes it audio (making it, waiting for a row, or sending it) the
clock does not run. A client that stops reading is cut off by the stall rule instead.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from typing import Literal

import anyio
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from inference.errors import InputError
from inference.text.clauses import Clauses

from .common import aligner_ready
from .speech_body import (ParamError, VoiceFields, openai_asked, openai_message, to_request, validated,
                          with_tuning)
from .utterance import Closed, Stalled, Utterance, Voice
from ..context import app_context
from ..services.audio import sent_rate

log = logging.getLogger("voxcpm.live")
live_router = APIRouter()

LARGE_MESSAGE = 64 * 1024  # characters of a message parsed on the event loop
MESSAGES = ("session.config", "input.text", "input.commit", "input.done", "input.interrupt", "session.close")


class SessionFields(VoiceFields):
    """session.config: the voice as POST /v1/audio/speech takes it, and how the socket sends it."""
    type: Literal["session.config"]
    response_format: str = "wav"  # vLLM-Omni's default here
    stream_audio: bool = False  # each piece of a sentence's audio as it is made (pcm)
    word_timestamps: bool = False  # the audio as JSON audio.chunk frames, and each sentence's words timed
    split_granularity: Literal["none", "sentence", "clause"] = "none"
    streaming_mode: Literal["sentence", "token_level", "sentence_commit"] = "sentence"


SessionConfig = with_tuning("SessionConfig", SessionFields)


class Session:
    def __init__(self, ws: WebSocket):
        self.ws, self.state = ws, app_context(ws)
        self.settings = self.state.settings.live
        self.voice: Voice | None = None
        self.clauses = Clauses(self.settings.min_clause_chars)
        self.utterance: Utterance | None = None
        self.utterances = 0
        self.commits = 0  # input.commit messages taken (their sentence_index)
        self.chars = 0  # text received in this session
        self.pieces: collections.deque[float] = collections.deque()  # when the pieces of the last second came
        self.last = time.monotonic()  # when the client's last message came
        self.ended: Closed | None = None  # why the watch ended the session
        self.send_lock = asyncio.Lock()
        self.stall_s = self.state.settings.http.stall_timeout_s
        self.stalled = False
        self.reading = anyio.CancelScope()  # the reader's wait for the client, cancelled when it stalls

    def describe(self, data, body=None):
        config = self.voice
        return openai_asked({"input": getattr(data, "text", None), "response_format": config and config.fmt})

    # -- out ----------------------------------------------------------------------------------------
    async def send(self, message: dict):
        await self._send(self.ws.send_text, json.dumps(message, ensure_ascii=False))

    async def send_bytes(self, data: bytes):
        await self._send(self.ws.send_bytes, data)

    async def _send(self, send, payload):
        """One message out, within the stall timeout: a client that reads nothing for that long (its
        buffers full) is closed, and the audio waiting for it dropped, as an HTTP stream's is
        (ui/guard/connections.py); one that has gone takes nothing more."""
        if self.stalled:
            raise Stalled()
        async with self.send_lock:
            if self.ws.application_state != WebSocketState.CONNECTED:
                raise Stalled()
            try:
                with anyio.fail_after(self.stall_s):
                    await send(payload)
            except TimeoutError:
                self.stall(f"closed a live-text session: it read none of its audio for {self.stall_s:g} s")
                raise Stalled() from None
            except (WebSocketDisconnect, RuntimeError, OSError):  # the client has gone
                self.stall(None)
                raise Stalled() from None

    def stall(self, why: str | None):
        if self.stalled:
            return
        self.stalled = True
        if why:
            log.warning("%s", why)
        self.interrupt_all()
        self.reading.cancel()  # the reader waits for the client's next message: it ends now

    async def error(self, message: str):
        await self.send({"type": "error", "message": message})

    async def fatal(self, message: str, code: int = 1008):
        await self.error(message)
        raise Closed(code)

    # -- in -----------------------------------------------------------------------------------------
    async def run(self):
        finish, code = False, 1011  # 1011: the server failed, unless a way out below says
        watching = asyncio.create_task(self.watch())
        try:
            with self.reading:
                await self.read()
            raise self.ended or Stalled()  # the watch ended the reading: idle, or a stall
        except (Closed, WebSocketDisconnect) as closing:
            finish = isinstance(closing, Closed) and closing.finish
            code = closing.code if isinstance(closing, Closed) else 1000
        finally:
            watching.cancel()
            if self.utterance is not None and self.utterance.busy:
                if not finish or self.ws.client_state != WebSocketState.CONNECTED:
                    self.interrupt_all()  # nobody hears it any more, or the session broke a rule
                await asyncio.gather(self.utterance.task, return_exceptions=True)
        if self.ws.application_state == WebSocketState.CONNECTED and self.ws.client_state == WebSocketState.CONNECTED:
            try:
                with anyio.move_on_after(1.0):  # a stalled client's buffers may not take even the close frame
                    await self.ws.close(code)
            except (WebSocketDisconnect, RuntimeError, OSError):  # it left meanwhile: nothing to close
                pass

    def owed(self) -> bool:
        """The server owes the client audio, or a row for its text: its silence is not idleness."""
        utterance = self.utterance
        while utterance is not None:
            if utterance.busy and not utterance.waits_for_client:
                return True
            utterance = utterance.after
        return False

    async def read(self):
        """The client's messages, until a way out (Closed) or the watch cancels the wait. No timer
        per message: at thousands of pieces a second, the loop's time is the sessions' budget."""
        while True:
            message = await self.ws.receive()
            self.last = time.monotonic()
            if message["type"] == "websocket.disconnect":
                raise Closed(1000)
            if message.get("bytes") is not None:
                await self.error("binary frames are not accepted: send JSON text messages, each with a "
                                 f"`type` of {', '.join(MESSAGES)}")
                continue
            await self.handle(message.get("text") or "")

    async def watch(self):
        """The session's clocks, looked at a few times a second beside the reader: pieces that
        stopped for commit_after_s are spoken up to their last word; a session that sent nothing for
        session_idle_s while the server waited for it (it owed no audio and no row) is closed."""
        live = self.settings
        look = max(0.02, live.session_idle_s / 5)  # how often the idle clock looks whether audio is owed
        idle_from, wait = time.monotonic(), self.next_look(look)
        while True:
            await asyncio.sleep(wait)
            now = time.monotonic()
            quiet = now - self.last
            if quiet >= live.commit_after_s and self.idle_commits and (text := self.clauses.idle()) is not None:
                await self.commit(text)
            if self.owed():
                idle_from = now
            idle_from = max(idle_from, self.last)
            if now - idle_from >= live.session_idle_s:
                log.info("live session closed: it sent nothing for %g s while the server waited for it",
                         live.session_idle_s)
                self.ended = Closed(1000)
                with contextlib.suppress(Closed):  # a client gone meanwhile is closed all the same
                    await self.error(f"the session sent nothing for {live.session_idle_s:g} s while the server "
                                     f"waited for it, and is closed: send input.text, input.done or session.close "
                                     f"within that")
                self.reading.cancel()
                return
            wait = self.next_look(look)

    def next_look(self, look: float) -> float:
        """Seconds until the watch looks again: when the pieces will have stopped for commit_after_s,
        and at least every commit_after_s (pieces, or a config that commits by pauses, may come
        meanwhile), so that a commit by a pause comes on time; no sooner, since 128 sessions' watches
        ticking ten times a second were a thousand wake-ups a second of the loop their pieces need."""
        after = self.settings.commit_after_s
        due = self.last + after - time.monotonic() if self.idle_commits else after
        return max(0.02, min(look, after, due if due > 0 else after))

    @property
    def idle_commits(self) -> bool:
        """Pieces that stop are spoken up to their last word (clause by clause, and token level)."""
        v = self.voice
        return v is not None and v.live and v.streaming_mode != "sentence_commit" and v.split != "sentence"

    async def handle(self, raw: str):
        try:  # a clip's base64 may make a message megabytes long: parsed off the event loop
            message = json.loads(raw) if len(raw) < LARGE_MESSAGE else await anyio.to_thread.run_sync(json.loads, raw)
        except (ValueError, RecursionError):  # not JSON, or nested past what the parser follows
            return await self.error("the message is not JSON that can be read (or is nested too deeply): send "
                                    f"JSON objects, each with a `type` of {', '.join(MESSAGES)}")
        kind = message.get("type") if isinstance(message, dict) else None
        if kind not in MESSAGES:
            return await self.error(f"unknown message type {str(kind)[:40]!r}: use one of {', '.join(MESSAGES)}")
        await getattr(self, "on_" + kind.replace(".", "_"))(message)

    async def on_session_config(self, message: dict):
        if self.clauses.buffer.strip() or (self.utterance is not None and not self.utterance.ended):
            return await self.error("session.config is refused while an utterance is open: send input.done "
                                    "first, so that no text is dropped")
        try:  # checked whole, and its request built, before anything is kept: a refused config changes nothing
            voice = await anyio.to_thread.run_sync(self.configured, message)
        except InputError as exc:
            log.info("live session.config refused: %s", str(exc)[:200])
            return await self.error(f"session.config refused: {openai_message(exc)}")
        self.voice, self.clauses = voice, voice.committer(self.settings.min_clause_chars)

    def configured(self, message: dict) -> Voice:
        """A session.config as the Voice its utterances keep; blocking (a clip is decoded, a saved
        voice read): call it off the event loop."""
        config = validated(SessionConfig, message)  # its model, format, rate and max_len too (VoiceFields.served)
        if config.streaming_mode != "sentence" and config.split_granularity != "none":
            raise ParamError("streaming_mode", f"streaming_mode {config.streaming_mode!r} cuts the text itself: "
                                               "leave split_granularity out (or \"none\") with it")
        stream = config.stream_audio or config.word_timestamps or config.streaming_mode != "sentence"
        if stream and config.response_format != "pcm":
            raise ParamError("response_format", "audio sent as it is made (stream_audio, word_timestamps, or a "
                                                "streaming_mode) is raw pcm: set response_format \"pcm\"")
        if config.word_timestamps:
            aligner_ready(self.state)
        limit = self.state.limits.max_text_chars
        for name in ("instructions", "ref_text", "prompt_text"):
            if (value := getattr(config, name)) is not None and len(value) > limit:
                raise ParamError(name, f"{name} has {len(value)} characters; the limit is {limit}")
        template = to_request(config, ".", self.state.voices, self.state.voice_lookup, self.state.clips,
                              max_voice_chars=self.state.settings.http.max_voice_chars)
        rate = sent_rate(config.response_format, config.sample_rate, self.state.worker.sample_rate)
        return Voice(template, config.response_format, rate, stream, config.word_timestamps,
                     config.split_granularity, config.streaming_mode)

    async def on_input_text(self, message: dict):
        text = message.get("text")
        if not isinstance(text, str):
            return await self.error("input.text needs `text`, a string")
        if self.voice is None:
            return await self.error("send session.config first: it says which voice speaks the text")
        now = self.last
        while self.pieces and now - self.pieces[0] >= 1.0:
            self.pieces.popleft()
        self.pieces.append(now)
        if len(self.pieces) > self.settings.max_pieces_per_s:
            await self.fatal(f"more than {self.settings.max_pieces_per_s} input.text messages in a second: "
                             "send larger pieces")
        limit = self.state.limits.max_text_chars
        if self.chars + len(text) > limit:
            return await self.error(f"the session's text would pass {limit} characters: this piece "
                                    f"({len(text)} characters) is not spoken; open a new session for more")
        self.chars += len(text)
        for clause in self.clauses.add(text):
            await self.commit(clause)

    async def commit(self, text: str):
        if self.utterance is None or self.utterance.ended:  # a new one, heard after the one before
            self.utterance = Utterance(self, self.utterances, self.voice, after=self.utterance)
            self.utterances += 1
        self.utterance.add(text)

    async def on_input_commit(self, message: dict):
        """streaming_mode "sentence_commit": what was sent since the last commit goes to the model."""
        if self.voice is None or self.voice.streaming_mode != "sentence_commit":
            return await self.error('input.commit belongs to streaming_mode "sentence_commit": set it in '
                                    'session.config, or let the server commit the text')
        commit_id = message.get("commit_id")
        if commit_id is not None and not isinstance(commit_id, str):
            return await self.error("input.commit's commit_id must be a string")
        text = self.clauses.rest()
        if text is None:
            return await self.error("input.commit with no text since the last commit: send input.text first")
        await self.commit(text)
        await self.send({"type": "input.committed", "commit_id": commit_id, "sentence_index": self.commits,
                         "chars_committed": len(text)})
        self.commits += 1

    async def on_input_done(self, _message: dict):
        if self.voice is None:  # its client waits for a session.done that no voice can make: it is told, and let go
            log.info("live session closed: input.done with no session.config in force")
            await self.fatal("input.done with no session.config in force: nothing can be spoken; the session is "
                             "closed (send a session.config that is accepted first)")
        if (text := self.clauses.rest()) is not None:
            await self.commit(text)
            if self.voice.streaming_mode == "sentence_commit":  # the last commit, implied
                await self.send({"type": "input.committed", "commit_id": None, "sentence_index": self.commits,
                                 "chars_committed": len(text)})
        if self.utterance is not None and not self.utterance.ended:
            self.utterance.end()
            self.commits = 0
        # else: nothing was said since the last one: an empty flush has no utterance to end

    async def on_input_interrupt(self, _message: dict):
        self.clauses.rest()  # the text not yet spoken is dropped with the audio
        self.interrupt_all()

    def interrupt_all(self):
        """The utterance being heard, and any after it waiting for its turn, stop."""
        utterance = self.utterance
        while utterance is not None:
            if not utterance.interrupted and utterance.busy:
                utterance.interrupt()
            utterance = utterance.after

    async def on_session_close(self, message: dict):
        await self.on_input_done(message)
        raise Closed(1000, finish=True)


@live_router.websocket("/audio/speech/stream")
async def speech_stream(ws: WebSocket):
    await ws.accept()
    await Session(ws).run()
