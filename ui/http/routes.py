"""Same-origin HTTP routes: PCM streaming (framed or bare), clip uploads by id, job status for the
metrics panel, and a finished job's offline render.

The page plays audio through an AudioWorklet fed by fetch(), which needs a plain byte stream, not
Gradio's event protocol. Errors come back as 4xx JSON `{"error": ...}` before any audio is sent:
the route waits for the job's first patch (or its failure) before it sends the status line.
"""
from __future__ import annotations

import functools
import json
import logging

import anyio
import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from inference.errors import InputError
from inference.serving.job import Job
from inference.serving.pool import gpu_status
from inference.serving.worker import QueueFullError

from . import frames
from .offline import render_offline
from .schema import parse_body, to_request
from ..guard.limits import too_large
from ..library.uploads import StoreFull, client_key

log = logging.getLogger("voxcpm.http")
POLL_S = 0.05  # how often a waiting route looks for a closed connection and new audio
MAX_JSON_BYTES = 256 * 1024  # 20,000 CJK characters escaped as \uXXXX, and room to spare


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def errors_as(respond):
    """A route decorator: input errors become 4xx answers made by `respond(status, message,
    headers)`; anything else a generic 500 (the traceback stays in the log)."""
    def decorate(handler):
        @functools.wraps(handler)
        async def wrapper(*args, **kwargs):
            try:
                return await handler(*args, **kwargs)
            except HTTPError as exc:
                return respond(exc.status, exc.message, exc.headers)
            except InputError as exc:
                return respond(getattr(exc, "status", 400), str(exc), None)
            except ClientDisconnect:  # the client left mid-request: nothing failed here, and nobody reads this
                log.info("client left during %s before its request was complete", handler.__name__)
                return respond(499, "the client closed the connection", None)
            except Exception:
                log.exception("route %s failed", handler.__name__)
                return respond(500, "internal error on the server; it has been logged", None)
        return wrapper
    return decorate


guarded = errors_as(error_response)


def to_pcm(audio: np.ndarray) -> bytes:
    """float32 [-1, 1] -> int16 little-endian, rounded to nearest (clipping only what overflows)."""
    return np.clip(np.rint(audio * 32767.0), -32768, 32767).astype("<i2").tobytes()


async def read_limited(request: Request, limit: int, what: str) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, too_large(what, limit))
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            raise HTTPError(413, too_large(what, limit))
    return bytes(data)


async def next_event(job: Job, request: Request | None):
    """The job's next event, or None once the client has gone (the job is then cancelled)."""
    while True:
        # abandon_on_cancel: when the client goes, Starlette cancels this at once and the finally
        # below stops the job, instead of first waiting for the patch being made after this one.
        event = await anyio.to_thread.run_sync(job.next_event, POLL_S, abandon_on_cancel=True)
        if event is not None:
            return event
        if request is not None and await request.is_disconnected():
            job.cancel()
            return None


async def pcm_stream(job: Job, first):
    try:
        yield to_pcm(first.chunk.audio)
        while True:
            event = await next_event(job, None)  # Starlette cancels this body when the client goes
            if event[0] != "chunk":
                return
            yield to_pcm(event[1].chunk.audio)
    finally:
        job.discard()  # stops a live job within one patch; drops audio a finished one still holds


async def framed_stream(job: Job, first, status: dict):
    """Each patch as a metadata frame and an audio frame, then the final status (ui/http/frames.py)."""
    try:
        event = ("chunk", first)
        while event[0] == "chunk":
            delivery = event[1]
            yield (frames.json_frame(frames.META, frames.chunk_meta(delivery, job))
                   + frames.frame(frames.AUDIO, to_pcm(delivery.chunk.audio)))
            event = await next_event(job, None)
        yield frames.json_frame(frames.STATUS, frames.final_status(job, **status))
    finally:
        job.discard()


def wants_frames(request: Request) -> bool:
    """Framed when asked for (?format=frames, or the frames type in Accept); bare PCM otherwise,
    so plain clients (curl, ffplay) keep getting samples only."""
    chosen = request.query_params.get("format")
    if chosen is not None:
        if chosen not in ("frames", "pcm"):
            raise HTTPError(400, f"format {chosen[:20]!r} is unknown: use format=frames or format=pcm")
        return chosen == "frames"
    return frames.MEDIA_TYPE in request.headers.get("accept", "")


router = APIRouter()


def _state(request: Request):
    """What create_app put on the app: the worker, the clip store and the limits."""
    return request.app.state


@router.post("/stream")
@guarded
async def stream(request: Request):
    state = _state(request)
    framed = wants_frames(request)
    job, req, body = await _submit(request, state)
    first = await first_audio(job, request)
    rate = state.worker.sample_rate
    headers = {
        "X-Sample-Rate": str(rate), "X-Channels": "1", "X-Sample-Format": "s16le",
        "X-Seed": str(req.seed), "X-Request-Id": job.id, "X-Mode": body.mode,
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
    }
    if framed:
        status = dict(seed=req.seed, **state.build)  # job-level facts for the final status frame
        return StreamingResponse(framed_stream(job, first, status), media_type=frames.MEDIA_TYPE, headers=headers)
    # audio/L16 is big-endian by definition (RFC 2586); this body is little-endian, so audio/pcm.
    media = f"audio/pcm;rate={rate};channels=1;format=s16le"
    return StreamingResponse(pcm_stream(job, first), media_type=media, headers=headers)


async def first_audio(job: Job, request: Request):
    """The job's first Delivery (inference/serving/job.py), or the HTTPError that says why there is none (sent before any audio)."""
    event = await next_event(job, request)
    if event is None:
        raise HTTPError(499, "the client closed the connection")
    kind, value = event
    if kind == "error":
        status = {"input_error": 400, "out_of_memory": 503}.get(job.outcome, 500)
        raise HTTPError(status, value, {"Retry-After": "5"} if status == 503 else None)
    if kind == "end":
        raise HTTPError(409 if job.cancelled else 500, "the request ended before any audio")
    return value


async def _submit(request: Request, state, parse=None):
    """Parse, check and queue; a refusal here gets its own log line, as a finished job does.
    parse(json) -> StreamBody: the route's own body format (default: the page's), run off the event loop."""
    body = None
    try:
        data = _json(await read_limited(request, MAX_JSON_BYTES, "request body"))

        def prepare():
            nonlocal body
            body = (parse or parse_body)(data)
            return to_request(body, state.clips, state.max_text_chars, getattr(state, "voice_lookup", None))
        # Off the event loop: a saved voice is looked up, and its patches may be read from the disk.
        req = await anyio.to_thread.run_sync(prepare)
        return state.worker.submit(req, job_id=body.request_id), req, body
    except QueueFullError as exc:
        _log_refusal(body, 503, "busy")
        raise HTTPError(503, str(exc), {"Retry-After": "5"}) from None
    except HTTPError as exc:
        _log_refusal(body, exc.status, "too_large" if exc.status == 413 else "input_error")
        raise
    except InputError:
        _log_refusal(body, 400, "input_error")
        raise
    except ClientDisconnect:
        _log_refusal(body, 499, "client_left")
        raise
    except Exception:  # guarded() answers 500 and logs the traceback; the outcome line still goes out
        _log_refusal(body, 500, "error")
        raise


def _json(raw: bytes):
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise HTTPError(400, "the request body is not valid JSON") from None
    except ValueError:  # e.g. an integer of more digits than Python will convert
        raise HTTPError(400, "the request body holds a number too long to read") from None


def _log_refusal(body, status: int, outcome: str):
    mode = body.mode if body is not None else "?"
    chars = len(body.text) if body is not None else -1
    log.info("request refused mode=%s text_chars=%d ttfp=- rtf=- patches=0 outcome=%s status=%d",
             mode, chars, outcome, status)


@router.post("/upload")
@guarded
async def upload(request: Request):
    clips = _state(request).clips
    data = await read_limited(request, clips.max_bytes, "upload")
    client = client_key(request.client.host if request.client else None)
    try:
        clip_id, clip = await anyio.to_thread.run_sync(clips.add_bytes, data, client)
    except StoreFull as exc:
        raise HTTPError(exc.status, str(exc), {"Retry-After": "60"}) from None
    return {"id": clip_id, "seconds": round(clip.seconds, 3), "sample_rate": clip.source_rate,
            "channels": clip.source_channels, "expires_in_s": clips.ttl_s}


@router.get("/jobs/{job_id}")
@guarded
async def job_status(request: Request, job_id: str):
    return _job(request, job_id).status()


@router.get("/jobs/{job_id}/offline.wav")
@guarded
async def job_offline(request: Request, job_id: str):
    """The whole-sequence VAE decode of a finished job's latents, as WAV: the reference its stream
    is compared with. Decoded on an engine's worker thread, awaited here without blocking."""
    store = _state(request).latents
    kept = store.get(job_id)
    if kept is None:
        raise HTTPError(404, f"no offline render for this request: the latents of finished requests are kept "
                             f"for {store.ttl_s / 60:.0f} min (the most recent, within {store.max_bytes >> 20} MB)")
    body = await render_offline(_state(request).worker, kept, job_id)
    return Response(body, media_type="audio/wav", headers={"Cache-Control": "no-store"})


@router.post("/jobs/{job_id}/cancel")
@guarded
async def job_cancel(request: Request, job_id: str):
    job = _job(request, job_id)
    job.cancel()
    return {"id": job.id, "state": job.state}


@router.get("/health")
async def health(request: Request):
    worker = _state(request).worker
    gpus = gpu_status(worker)  # each GPU's rows in use and waiting jobs (one entry without a pool)
    return {"ok": any(g["alive"] for g in gpus), "sample_rate": worker.sample_rate, "busy": worker.busy,
            "waiting": worker.waiting, "max_queue": worker.max_queue, "gpus": gpus}


def _job(request: Request, job_id: str) -> Job:
    job = _state(request).worker.get(job_id)
    if job is None:
        raise HTTPError(404, "no such request (finished requests are kept only for a while)")
    return job
