"""OpenAI-compatible speech: POST /v1/audio/speech, GET /v1/audio/voices, GET /v1/models.

Any OpenAI client (the official SDKs, tools built on them) can use the demo's server: point its
base URL at http://HOST:PORT/v1 and, with --token, use the token as the API key. A request's body
becomes the engine's request (ui/http/speech_body.py) and goes through the same checks, limits,
queue and worker as the page's; only the body format and the errors' shape are OpenAI's (every
error under /v1, an unknown path or method included):

- `model` (optional): voxcpm2, or OpenAI's tts-1, tts-1-hd, gpt-4o-mini-tts: all the one model.
- `voice` (vLLM-Omni's `speaker`): a saved voice's name (or {"id": name}) clones it: continuing from
  its clip when it has a transcript and no `instructions` are given (ultimate cloning), else as a
  reference with `instructions` as the style. `voice: "design"` designs a voice from `instructions`;
  `"default"` (what vLLM-Omni's VoxCPM2 clients send), or none, is VoxCPM2 with no voice prompt
  (`instructions`, when given, describe one). OpenAI's voice names (alloy, ash, ...) are built-in
  designed voices (ui/http/builtin_voices.py).
- A clip instead of `voice`, as vLLM-Omni's clients send one: `ref_audio` (a data: URL; never
  fetched), with `ref_text`, its transcript, for ultimate cloning; VoxCPM2's `prompt_audio` and
  `prompt_text` for the clip continued; or `reference_id` (POST /voxcpm/upload).
- `response_format`: wav, pcm (16-bit mono, no header), flac, mp3 or opus (ui/services/audio.py).
- `sample_rate` (an extension): 8000 to 48000 Hz (audio.SAMPLE_RATES), in any format; left out, pcm
  is sent at 24 kHz as OpenAI's is (its clients have no header to read a rate from), the other
  formats at the model's 48 kHz. X-Sample-Rate (and pcm's content type) say the rate sent.
- `stream_format`: "audio" (the file, sent as it is encoded) or "sse" (events
  `speech.audio.delta` with base64 audio, then `speech.audio.done` with usage, or an `error` event
  for a take that failed or was cut at --max-output-seconds); vLLM-Omni's `stream: true` without a
  stream_format means "sse". vLLM-Omni's fields for its other models are accepted and not used
  (speech_body.IGNORED; docs/api.md).
- `timestamps` (an extension, with "sse" only): "word" adds a `speech.audio.words` event with each
  segment's words timed on the audio sent, as soon as they are aligned (ui/services/words.py).
- OpenAI's pace field and the extensions (seed, normalize, trim_silence, sample_rate and the spec's
  other settings) are the spec's (inference/request/modes.py): the pace is applied as the audio
  streams, pitch kept, pauses as written (the stream's listener, inference/request/listener.py).
"""
from __future__ import annotations

import base64
import contextlib
import functools
import json

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from inference.errors import InputError
from inference.serving.job import Job

from .builtin_voices import listed
from .common import errors_as, submit
from .listen import ClientWatch, WatchedResponse, heard
from .speech_body import (DEFAULT_VOICE, DESIGN, MODEL_ID, OPENAI_MODELS, openai_asked, openai_message, openai_param, parse_speech,
                          to_request)
from ..context import app_context
from ..guard.answers import OPENAI_PREFIX, openai_error_body
from ..guard.answers import Refusal
from ..services.audio import MEDIA_TYPES, Encoder, sent_rate
from ..services.metrics import observe_stream
from ..services.words import WordTrack

openai_router = APIRouter()


def openai_error(status: int, message: str, headers: dict | None = None, param: str | None = None,
                 code: str | None = None) -> JSONResponse:
    return JSONResponse(openai_error_body(status, message, param, code, headers), status_code=status, headers=headers)


def openai_guarded(handler):
    """errors_as (ui/http/common.py) in OpenAI's shape, naming the parameter that was refused in
    this route's terms (`input`, not the engine's `text`)."""
    @functools.wraps(handler)
    async def named(*args, **kwargs):
        try:
            return await handler(*args, **kwargs)
        except InputError as exc:
            refusal = isinstance(exc, Refusal)  # carries its status, and a 503 its Retry-After
            return openai_error(exc.status if refusal else 400, openai_message(exc),
                                exc.headers if refusal else None, param=openai_param(exc.param))
    return errors_as(openai_error)(named)


@openai_router.post("/audio/speech")
@openai_guarded
async def speech(request: Request):
    state = app_context(request)
    # A clip may come in the body (ref_audio, prompt_audio: vLLM-Omni's clients send a whole file as
    # a data: URL), so the body may be as large as an upload.
    job, speech, first, watch = await submit(request, state, parse=parse_speech, describe=openai_asked,
                                      limit=state.settings.http.max_upload_mb * 2**20,
                                      build=functools.partial(to_request, library=state.voices,
                                                              voices=state.voice_lookup, clips=state.clips,
                                                              max_voice_chars=state.settings.http.max_voice_chars))
    fmt, events = speech.response_format, speech.events
    model_rate = state.worker.sample_rate
    rate = sent_rate(fmt, speech.sample_rate, model_rate)
    headers = {"X-Seed": str(job.seed), "X-Request-Id": job.id, "Cache-Control": "no-store",
               "X-Sample-Rate": str(rate)}
    encoder = Encoder(fmt, rate)
    words = None
    if speech.timestamps == "word":
        words = WordTrack(state.analysis, job, rate, state.settings.evaluation.words_wait_s)
    chunks = observe_stream(state.metrics, job, encoded(job, first, encoder, words, watch))
    if events:
        return WatchedResponse(sse(chunks, job, job.text_chars, words), watch, media_type="text/event-stream",
                               headers=headers)
    media = MEDIA_TYPES[fmt] + (f";rate={rate};channels=1" if fmt == "pcm" else "")
    return WatchedResponse(chunks, watch, media_type=media, headers=headers)


async def encoded(job: Job, first, encoder: Encoder, words: WordTrack | None = None,
                  watch: ClientWatch | None = None):
    """The job's audio (ui/http/listen.heard) in the requested format; lossy encoders run off the
    event loop. `words`: follows the audio sent, when word timestamps were asked for. `watch`: the
    client's (ui/http/listen.ClientWatch)."""
    async def run(fn, *args):
        return fn(*args) if encoder.inline else await anyio.to_thread.run_sync(fn, *args)
    try:
        async with contextlib.aclosing(heard(job, first, encoder.rate, words, watch)) as audio:
            async for piece in audio:
                if out := await run(encoder.encode, piece.audio, piece.pcm):
                    yield out
        if tail := await run(encoder.finish):
            yield tail
    finally:
        encoder.close()


async def sse(chunks, job: Job, text_chars: int, words: WordTrack | None = None):
    async for data in chunks:
        yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
        for segment in words.ready() if words is not None else ():
            yield _event({"type": "speech.audio.words", **segment})
    for segment in (words.ready() + await words.rest()) if words is not None else ():
        yield _event({"type": "speech.audio.words", **segment})
    if job.error is not None:  # failed, or cut at the bound on a request's audio (its audio is kept)
        yield _event({"type": "error", "error": {"message": job.error, "type": "server_error"}})
        return
    patches = job.patches
    yield _event({"type": "speech.audio.done",
                  "usage": {"input_tokens": text_chars, "output_tokens": patches, "total_tokens": text_chars + patches}})


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


@openai_router.get("/models")
async def models(request: Request):
    """VoxCPM2 under its own name and OpenAI's: every one is served by the same model, and `lora`
    names the LoRA merged into it (--lora; null without one)."""
    lora = app_context(request).build["lora"]
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "openbmb",
                                        "lora": lora} for name in (MODEL_ID,) + OPENAI_MODELS]}


@openai_router.get("/audio/voices")
@openai_guarded
async def voices(request: Request):
    library = app_context(request).voices
    saved = [] if library is None else await anyio.to_thread.run_sync(library.list)
    data = [{"id": v.name, "name": v.name, "object": "voice", "seconds": round(v.seconds, 2),
             "has_transcript": bool(v.transcript)} for v in saved]
    shadowed = {v.name.casefold() for v in saved}  # a saved voice of a built-in name wins
    data += [v for v in listed() if v["name"] not in shadowed]
    return {"object": "list", "voices": [v["name"] for v in data] + [DESIGN, DEFAULT_VOICE], "data": data}


@openai_router.api_route("", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
@openai_router.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def unknown(request: Request):
    """Last of the /v1 routes: what no other one answers gets OpenAI's error, not the page's 404."""
    served = [route for route in openai_router.routes if isinstance(route, APIRoute) and route.endpoint is not unknown]
    tail = request.scope["path"].removeprefix(OPENAI_PREFIX)
    allowed = sorted({m for route in served if route.path_regex.match(tail) for m in route.methods})
    if allowed:
        return openai_error(405, f"{request.method} is not allowed on {request.url.path[:100]}: use "
                                 f"{', '.join(allowed)}", {"Allow": ", ".join(allowed)})
    listed = ", ".join(f"{m} {OPENAI_PREFIX}{route.path}" for route in served for m in sorted(route.methods - {"HEAD"}))
    return openai_error(404, f"there is no {request.method} {request.url.path[:100]} here; this server "
                             f"serves {listed}")
