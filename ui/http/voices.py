"""HTTP routes of the voice library (ui/library/voice_store.py), under /voxcpm/voices.

    GET    /voxcpm/voices               the voices, whether this client may change them, the limits
    POST   /voxcpm/voices               {"name", "clip_id", "transcript"?}: save an uploaded clip
    PATCH  /voxcpm/voices/{name}        {"name": new name}
    DELETE /voxcpm/voices/{name}
    GET    /voxcpm/voices/{name}/audio  the clip as FLAC, to listen to

A voice is saved from a clip already in the upload store: one uploaded or recorded in the page,
or a take the page uploads as a WAV (its text as the transcript). Saving encodes the clip on the
engine's thread (worker.call, between two steps) with the very call a request makes
(Engine.encode_audio, on each side a request will want), so the saved voice holds the patches a
request would make from the start, and no request with it ever runs the VAE encoder.
"""
from __future__ import annotations

import asyncio

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError

from inference.errors import InputError
from inference.serving.services import encode_voice
from inference.serving.worker import QueueFullError

from .common import Refusal, busy, guarded, read_json
from .schema import blank, check_text, describe_validation
from ..context import app_context
from ..library.voice_names import RULE

voice_router = APIRouter()
READ_ONLY = ("this server's voice library is read-only: the server is reachable by others without a token. "
             "Start it with --token (or VOXCPM_TOKEN) so that token holders can change the library")


class SaveBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str
    clip_id: str
    transcript: str | None = None


class RenameBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str


def voice_lookup(voices, encoder_identity: str):
    """name -> (Voice, ReferenceClip) for ui/schema.to_request, or None without a library."""
    if voices is None:
        return None
    return lambda name: voices.clip(name, encoder_identity)


def library(request: Request, change: bool = False):
    ctx = app_context(request)
    if ctx.voices is None:
        raise Refusal(404, "this server keeps no voice library (start it with --data-dir, or with "
                             "--voice-store postgresql://... for one shared by several servers)")
    if change and not ctx.settings.library.writable:
        raise Refusal(403, READ_ONLY)
    return ctx.voices


async def body_of(request: Request, model: type[BaseModel]):
    raw = await read_json(request)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InputError(describe_validation(exc, model.model_fields)) from None


@voice_router.get("")
@guarded
async def list_voices(request: Request):
    voices = library(request)
    listed = await anyio.to_thread.run_sync(voices.list)
    return {"voices": [v.public() for v in listed], "writable": bool(app_context(request).settings.library.writable),
            "max_voices": voices.max_voices, "max_mb": voices.max_bytes / 2**20, "name_rule": RULE}


@voice_router.post("")
@guarded
async def save_voice(request: Request):
    voices, state = library(request, change=True), app_context(request)
    body = await body_of(request, SaveBody)
    transcript = None if blank(body.transcript) else body.transcript.strip()
    check_text("transcript", transcript, state.limits.max_text_chars)
    clip = state.clips.get(body.clip_id)
    await anyio.to_thread.run_sync(voices.check_room, body.name, clip.audio)  # before any work
    sides = await encode(request, state.worker, clip.as_engine_input(), transcript, state.encoder_identity)
    latents = {state.encoder_identity: sides}
    voice = await anyio.to_thread.run_sync(voices.save, body.name, clip.audio, transcript, latents)
    return JSONResponse(voice.public(), status_code=201)


async def encode(request: Request, worker, reference, transcript: str | None, identity: str) -> dict:
    """The clip's patches, {side: array}, encoded on an engine's thread (any GPU's: they hold the
    same weights) as a request with the voice would encode them (serving/services.encode_voice)."""
    try:
        return await asyncio.wrap_future(encode_voice(worker, reference, transcript, identity))
    except QueueFullError as exc:
        raise busy(request, f"the voice was not saved: {exc}") from None
    except InputError as exc:  # anything else: guarded() answers 500 and logs the traceback
        raise Refusal(400, f"the clip could not be encoded: {exc}") from None


@voice_router.patch("/{name}")
@guarded
async def rename_voice(request: Request, name: str):
    voices = library(request, change=True)
    body = await body_of(request, RenameBody)
    return (await anyio.to_thread.run_sync(voices.rename, name, body.name)).public()


@voice_router.delete("/{name}")
@guarded
async def delete_voice(request: Request, name: str):
    voices = library(request, change=True)
    deleted = await anyio.to_thread.run_sync(voices.delete, name)
    return {"deleted": deleted.name}


@voice_router.get("/{name}/audio")
@guarded
async def voice_audio(request: Request, name: str):
    voices = library(request)
    data = await anyio.to_thread.run_sync(voices.audio_bytes, name)
    return Response(data, media_type="audio/flac", headers={"Cache-Control": "no-store"})
