"""OpenAI-compatible speech: POST /v1/audio/speech, GET /v1/audio/voices, GET /v1/models.

Any OpenAI client (the official SDKs, tools built on them) can use the demo's server: point its
base URL at http://HOST:PORT/v1 and, with --token, use the token as the API key. A request
becomes the page's own request (ui/schema.StreamBody) and goes through the same checks, limits,
queue and worker; only the body format and the errors' shape are OpenAI's:

- `voice`: a saved voice's name (or {"id": name}) clones it: continuing from its clip when it has
  a transcript and no `instructions` are given (ultimate cloning), else as a reference with
  `instructions` as the style. `voice: "design"` designs a voice from `instructions`.
- `response_format`: wav, pcm (16-bit mono at 48 kHz), flac, mp3 or opus (ui/http/audio_encoders.py).
- `stream_format`: "audio" (the file, sent as it is encoded) or "sse" (events
  `speech.audio.delta` with base64 audio, then `speech.audio.done` with usage).
- `speed`: only 1.0; the model has no speed control, so any other value is refused.
- Extensions: seed, cfg_value, inference_timesteps, max_len, normalize, trim_silence.
"""
from __future__ import annotations

import base64
import json

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from inference.errors import InputError
from inference.request import modes
from inference.serving.job import Job

from .audio_encoders import FORMATS, MEDIA_TYPES, Encoder, missing_formats
from .common import errors_as, first_audio, next_event, submit
from .schema import StreamBody, blank
from ..library.voice_names import RESERVED

openai_router = APIRouter()
MODEL_ID = "voxcpm2"
MODEL_NAMES = (MODEL_ID, "openbmb/voxcpm2")  # compared without regard to case
DESIGN = RESERVED[0]
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
          409: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error", 499: "client_closed",
          503: "server_overloaded"}


def openai_error(status: int, message: str, headers: dict | None = None, param: str | None = None,
                 code: str | None = None) -> JSONResponse:
    body = {"message": message, "type": _TYPES.get(status, "server_error"), "param": param, "code": code}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


openai_guarded = errors_as(openai_error)


class VoiceId(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: str


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    model: str
    input: str
    voice: str | VoiceId | None = None
    instructions: str | None = None
    response_format: str = "mp3"
    speed: float | None = None
    stream_format: str = "audio"
    # Our extensions, documented in the README (the page's advanced settings).
    seed: int | None = None
    cfg_value: float = modes.default("cfg_value")
    inference_timesteps: int = modes.default("inference_timesteps")
    max_len: int = modes.default("max_len")
    normalize: bool = False
    trim_silence: bool = False


def parse_speech(raw, library=None) -> tuple[SpeechBody, StreamBody]:
    """The OpenAI body and the page's body it becomes; `library` (ui/library/voice_store.py) tells whether
    a saved voice has a transcript. Reads the index: call it off the event loop."""
    try:
        speech = SpeechBody.model_validate(raw)
    except ValidationError as exc:
        raise InputError(_describe(exc)) from None
    if speech.model.lower() not in MODEL_NAMES:
        raise InputError(f"model {speech.model[:80]!r} is not served here: use {MODEL_ID!r} (GET /v1/models)")
    _choice("response_format", speech.response_format, [f for f in FORMATS if f not in missing_formats()])
    _choice("stream_format", speech.stream_format, ["audio", "sse"])
    if speech.speed is not None and speech.speed != 1.0:
        raise InputError(f"speed {speech.speed:g} is not supported: VoxCPM2 has no speed control; "
                         "leave speed out or send 1.0")
    return speech, to_stream_body(speech, library)


def to_stream_body(speech: SpeechBody, library=None) -> StreamBody:
    voice = speech.voice.id if isinstance(speech.voice, VoiceId) else speech.voice
    if blank(voice):
        raise InputError(f"voice is required: the name of a saved voice (GET /v1/audio/voices), or {DESIGN!r} "
                         "to design one from `instructions`")
    common = dict(text=speech.input, cfg_value=speech.cfg_value, inference_timesteps=speech.inference_timesteps,
                  max_len=speech.max_len, seed=speech.seed, control=speech.instructions,
                  normalize=speech.normalize, trim_silence=speech.trim_silence)
    if voice.strip().casefold() == DESIGN:
        return StreamBody(mode="design", **common)
    if library is None:
        raise InputError(f"this server keeps no voice library: use voice {DESIGN!r} with `instructions`")
    # Continued from (ultimate cloning) when the voice has a transcript (ui/schema.to_request takes
    # it from the voice) and no style is asked for, which would be read aloud there.
    continued = blank(speech.instructions) and bool(library.get(voice).transcript)
    return StreamBody(mode="ultimate" if continued else "cloning", voice=voice, **common)


def _choice(field: str, value: str, accepted: list[str]):
    if value not in accepted:
        raise InputError(f"{field} {value[:40]!r} is not supported: use one of {', '.join(accepted)}")


def _describe(exc: ValidationError) -> str:
    err = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "body"
    if err.get("type") == "extra_forbidden":
        return f"unknown parameter {where[:40]!r}: the accepted ones are {', '.join(SpeechBody.model_fields)}"
    if err.get("type") == "missing":
        return f"missing required parameter {where!r}"
    return f"parameter {where[:40]!r}: {err.get('msg', 'invalid value')}"


@openai_router.post("/audio/speech")
@openai_guarded
async def speech(request: Request):
    state = request.app.state
    parsed = {}

    def parse(raw):
        parsed["speech"], body = parse_speech(raw, state.voices)
        return body
    job, req, body = await submit(request, state, parse=parse)
    fmt, events = parsed["speech"].response_format, parsed["speech"].stream_format == "sse"
    first = await first_audio(job, request)
    headers = {"X-Seed": str(req.seed), "X-Request-Id": job.id, "Cache-Control": "no-store",
               "X-Sample-Rate": str(state.worker.sample_rate)}
    chunks = encoded(job, first, Encoder(fmt, state.worker.sample_rate))
    if events:
        return StreamingResponse(sse(chunks, job, len(req.text)), media_type="text/event-stream", headers=headers)
    media = MEDIA_TYPES[fmt] + (f";rate={state.worker.sample_rate};channels=1" if fmt == "pcm" else "")
    return StreamingResponse(chunks, media_type=media, headers=headers)


async def encoded(job: Job, first, encoder: Encoder):
    """The job's audio in the requested format; lossy encoders run off the event loop."""
    inline = encoder.fmt in ("pcm", "wav")
    feed = encoder.feed if inline else (lambda audio: anyio.to_thread.run_sync(encoder.feed, audio))
    try:
        out = feed(first.chunk.audio) if inline else await feed(first.chunk.audio)
        while True:
            if out:
                yield out
            event = await next_event(job, None)  # Starlette cancels this body when the client goes
            if event[0] != "chunk":
                break
            out = feed(event[1].chunk.audio) if inline else await feed(event[1].chunk.audio)
        tail = encoder.finish() if inline else await anyio.to_thread.run_sync(encoder.finish)
        if tail:
            yield tail
    finally:
        encoder.close()
        job.discard()


async def sse(chunks, job: Job, text_chars: int):
    async for data in chunks:
        yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
    if job.state == "failed":
        yield _event({"type": "error", "error": {"message": job.error, "type": "server_error"}})
        return
    patches = job.metrics.patches
    yield _event({"type": "speech.audio.done",
                  "usage": {"input_tokens": text_chars, "output_tokens": patches, "total_tokens": text_chars + patches}})


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


@openai_router.get("/models")
async def models():
    return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "openbmb"}]}


@openai_router.get("/audio/voices")
@openai_guarded
async def voices(request: Request):
    library = request.app.state.voices
    saved = [] if library is None else await anyio.to_thread.run_sync(library.list)
    data = [{"id": v.name, "name": v.name, "object": "voice", "seconds": round(v.seconds, 2),
             "has_transcript": bool(v.transcript)} for v in saved]
    return {"object": "list", "voices": [v["name"] for v in data] + [DESIGN], "data": data}
