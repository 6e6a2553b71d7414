"""The reference clip's routes (ui/library/uploads.py keeps the clips):

POST /voxcpm/upload: a clip, decoded and checked once, kept by id for later requests. The clip is the
raw body (any audio Content-Type), or a multipart form's "file" field, as /voxcpm/transcribe takes it.
    -> 200 {"id": ..., "seconds": ..., "sample_rate": ..., "channels": ..., "expires_in_s": ...}

POST /voxcpm/transcribe: a clip's automatic transcript (inference/analysis/recognition.py, made
in the analysis process), for ultimate cloning, kept with the clip (ui/library/transcripts.py) so
that each clip is transcribed once.

    JSON {"reference_id": ID}              a clip uploaded to /voxcpm/upload or through the page
    JSON {"voice": NAME, "save": false}    a saved voice's clip; "save": true also makes it the voice's
                                           transcript, when it has none (needs write access, as any change)
    multipart/form-data, a "file" field    an audio file (WAV, FLAC, OGG or MP3), not kept
    -> 200 {"text": ..., "automatic": true, "model": ...}

400: no clip or more than one, an unreadable one, one longer than 30 s; 404: no such clip or voice;
409: save asked for a voice that has a transcript; 503: transcripts switched off (--asr-model none),
a model that cannot be loaded (the message says how to fix it) or still loading, an analysis queue
that is full or whose process stopped.
"""
from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from typing import Callable

import anyio
import numpy as np
import soundfile as sf
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference.analysis.loading import ModelUnavailable
from inference.analysis.process import AnalysisStopped
from inference.analysis.recognition import MAX_SECONDS, check_length
from inference.errors import InputError, QueueFullError

from .common import Refusal, guarded, read_json, read_limited, retry_later, unavailable
from .schema import blank, check_voice_chars, describe_validation
from .voices import READ_ONLY
from ..context import app_context
from ..library.transcripts import content_hash
from ..library.uploads import StoreFull, client_key

clips_router = APIRouter()
SOURCES = "give one clip: reference_id (from /voxcpm/upload), voice (a saved voice's name), or a multipart file"


class TranscribeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reference_id: str | None = None
    voice: str | None = None  # at most the settings' max_voice_chars
    save: bool = False


@dataclass
class Source:
    """A clip to transcribe: its samples, what is kept for it, and how to keep a new transcript."""
    rate: int
    audio: Callable[[], np.ndarray]  # called off the event loop (a saved voice reads its FLAC)
    cached: str | None
    keep: Callable[[str], object]  # called off the event loop too
    save: bool = False  # keep even a transcript found kept (it becomes a saved voice's own)


@clips_router.post("/upload")
@guarded
async def upload(request: Request):
    clips = app_context(request).clips
    if is_multipart(request):
        data = await form_file(request, "send the clip as the raw body, or as a multipart form's file field")
    else:
        data = await read_limited(request, clips.max_bytes, "upload")
    client = client_key(request.client.host if request.client else None)
    try:
        clip_id, clip = await anyio.to_thread.run_sync(clips.add_bytes, data, client)
    except StoreFull as exc:
        raise Refusal(exc.status, str(exc), {"Retry-After": str(app_context(request).settings.clips.full_retry_s)}) from None
    return {"id": clip_id, "seconds": round(clip.seconds, 3), "sample_rate": clip.source_rate,
            "channels": clip.source_channels, "expires_in_s": clips.ttl_s}


@clips_router.post("/transcribe")
@guarded
async def transcribe(request: Request):
    state = app_context(request)
    text = await transcript_of(state, lambda model: read_source(request, state, model))
    return {"text": text, "automatic": True, "model": state.analysis.settings.recognizer}


async def transcript_of(state, find) -> str:
    """A clip's automatic transcript, for this route and Gradio's /transcribe alike: `await
    find(model)` -> the clip's Source, asked for only once the recognizer is known to be on; made
    in the analysis process unless kept from before, then kept. The analysis process's refusals
    are 503s, with a Retry-After where one can be told."""
    analysis, model = state.analysis, state.analysis.settings.recognizer
    try:
        analysis.check_recognizer()  # before reading anything: off, or a model that just failed to load
        source = await find(model)
        text = source.cached
        if text is None:
            audio = await anyio.to_thread.run_sync(source.audio)
            text = await asyncio.wrap_future(await anyio.to_thread.run_sync(analysis.transcribe, source.rate, audio))
        if source.cached is None or source.save:
            await anyio.to_thread.run_sync(source.keep, text)
    except ModelUnavailable as exc:
        raise unavailable(exc) from None
    except (QueueFullError, AnalysisStopped) as exc:
        raise retry_later(state, f"the clip was not transcribed: {exc}") from None
    return text


async def read_source(request: Request, state, model: str) -> Source:
    if is_multipart(request):
        return await file_source(request, state, model)
    try:
        body = TranscribeBody.model_validate(await read_json(request))
    except ValidationError as exc:
        raise InputError(describe_validation(exc, TranscribeBody.model_fields)) from None
    check_voice_chars(body.voice, state.settings.http.max_voice_chars)
    if blank(body.voice) == blank(body.reference_id):
        raise InputError(SOURCES)
    if not blank(body.reference_id):
        if body.save:
            raise InputError("save keeps the transcript with a saved voice: give voice, not reference_id")
        return upload_source(state, body.reference_id, model)
    return await anyio.to_thread.run_sync(voice_source, state, body.voice, body.save, model)


def upload_source(state, clip_id: str, model: str) -> Source:
    clips = state.clips
    clip = clips.get(clip_id)
    check_length(clip.seconds)
    return Source(clip.sample_rate, lambda: clip.audio, clips.transcript(clip.digest, model),
                  lambda text: clips.keep_transcript(clip, model, text))


def voice_source(state, name: str, save: bool, model: str) -> Source:
    """A saved voice's clip (on a thread: it reads the disk)."""
    if state.voices is None:
        raise Refusal(404, "this server keeps no voice library (start it with --data-dir, or with "
                             "--voice-store postgresql://... for one shared by several servers)")
    if save and not state.settings.library.writable:
        raise Refusal(403, READ_ONLY)
    voice, cached = state.voices.automatic_transcript(name, model)
    if save and voice.transcript is not None:
        raise Refusal(409, f"the voice {voice.name!r} already has a transcript; save keeps an automatic one "
                             "only for a voice without one")
    check_length(voice.seconds)
    _, reference = state.voice_lookup(voice.name)
    return Source(reference.rate, lambda: reference.samples()[1], cached,
                  lambda text: state.voices.keep_automatic_transcript(voice, model, text, save), save)


async def file_source(request: Request, state, model: str) -> Source:
    """A multipart body's file, to be transcribed (bytes_source)."""
    return await bytes_source(state, await form_file(request, SOURCES), model)


async def bytes_source(state, data: bytes, model: str) -> Source:
    """A file sent to be transcribed, not kept: decoded as an upload is (the same limit on decodes
    at once), refused by its header's length when over the transcriber's bound, before any decoding."""
    clips = state.clips
    check_length(header_seconds(data))
    # decode_mono reads no further than the header's length, now known to be within the bound, so a
    # file whose header lies (or a format that only estimates it) cannot make it decode more.
    rate, audio = await anyio.to_thread.run_sync(clips.decode, data, MAX_SECONDS)
    check_length(len(audio) / rate)
    return Source(rate, lambda: audio, clips.transcript(content_hash(audio), model), lambda text: None)


def header_seconds(data: bytes) -> float:
    """The length a file's header claims (0 when it has none that can be read: the decode then says
    why), read without decoding any audio."""
    try:
        info = sf.info(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - libsndfile's reasons; read_mono refuses the file in the user's terms
        return 0.0
    return info.frames / info.samplerate if info.frames > 0 and info.samplerate > 0 else 0.0


def is_multipart(request: Request) -> bool:
    return request.headers.get("content-type", "").lower().startswith("multipart/form-data")


async def form_file(request: Request, how: str) -> bytes:
    """The bytes of a multipart body's one "file" field (its size capped by the body limit,
    ui/guard/limits.py); `how` tells the client what to send instead when there is none."""
    try:
        async with request.form(max_files=1, max_fields=8) as form:
            part = form.get("file")
            if part is None or isinstance(part, str):
                raise InputError(f"the multipart body has no file field: {how}")
            return await part.read()
    except StarletteHTTPException as exc:  # a malformed body, or more parts than one clip needs
        raise InputError(f"the multipart body could not be read ({exc.detail}): {how}") from None
