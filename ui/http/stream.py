"""A request from the page: POST /voxcpm/stream, its audio as it is made, as bare PCM or framed
(ui/http/frames.py); then its job, /voxcpm/jobs/{id}: its status (the page's metrics panel), its
cancellation, and a finished job's offline render (ui/services/renders.py).

The page plays audio through an AudioWorklet fed by fetch(), which needs a plain byte stream, not
Gradio's event protocol.
"""
from __future__ import annotations

import contextlib
import functools
import time

from fastapi import APIRouter, Request

from inference.serving.job import Job

from . import frames
from .common import Refusal, guarded, page_asked, submit
from .listen import ClientWatch, Heard, WatchedResponse, heard
from ..context import app_context
from ..library.uploads import client_key
from ..services.metrics import observe_stream
from ..services.words import WordTrack

stream_router = APIRouter()


async def pcm_stream(job: Job, first, words: WordTrack | None = None, watch: ClientWatch | None = None):
    """Samples only; words asked for are in the job's status (GET /voxcpm/jobs/ID) as they come."""
    async with contextlib.aclosing(heard(job, first, words=words, watch=watch)) as audio:
        async for piece in audio:
            yield piece.int16()
    if words is not None:
        await words.rest()


async def framed_stream(job: Job, first, status: dict, words: WordTrack | None = None,
                        watch: ClientWatch | None = None):
    """Each patch as a metadata frame and an audio frame, then the final status (ui/http/frames.py).
    A frame's offset and length are those of the audio sent (the audio as its listener hears it; the
    stretch's tail follows the last patch as an audio frame alone). Word timestamps, when asked
    for: a segment's words frame between two patches once they are ready, the rest before the status."""
    async with contextlib.aclosing(heard(job, first, words=words, watch=watch)) as audio:
        async for piece in audio:
            ready = b"".join(frames.json_frame(frames.WORDS, w) for w in words.ready()) if words is not None else b""
            if piece.delivery is None:
                if len(piece.audio):
                    yield frames.frame(frames.AUDIO, piece.int16()) + ready
                elif ready:
                    yield ready
                continue
            yield ready + frames.json_frame(frames.META, sent_meta(piece, job)) + \
                frames.frame(frames.AUDIO, piece.int16())
    if words is not None:
        for segment in words.ready() + await words.rest():
            yield frames.json_frame(frames.WORDS, segment)
    yield frames.json_frame(frames.STATUS, frames.final_status(job, **status))


def sent_meta(piece: Heard, job: Job) -> dict:
    """A patch's metadata frame: placed in the audio sent, with the server's clock as it leaves."""
    meta = frames.chunk_meta(piece.delivery, job) | {"offset": piece.offset, "samples": len(piece.audio)}
    meta["sent_ms"] = round((time.perf_counter() - job.started_at) * 1000.0, 3)
    return meta


def wants_frames(request: Request) -> bool:
    """Framed when asked for (?format=frames, or the frames type in Accept); bare PCM otherwise,
    so plain clients (curl, ffplay) keep getting samples only."""
    chosen = request.query_params.get("format")
    if chosen is not None:
        if chosen not in ("frames", "pcm"):
            raise Refusal(400, f"format {chosen[:20]!r} is unknown: use format=frames or format=pcm")
        return chosen == "frames"
    return frames.MEDIA_TYPE in request.headers.get("accept", "")


@stream_router.post("/stream")
@guarded
async def stream(request: Request):
    entered, state = time.perf_counter(), app_context(request)
    framed = wants_frames(request)
    asked = functools.partial(page_asked, fmt="frames" if framed else "pcm")
    job, body, first, watch = await submit(request, state, describe=asked)
    rate = state.worker.sample_rate
    words = word_track(state, job, rate) if body.timestamps == "word" else None
    headers = {
        "X-Sample-Rate": str(rate), "X-Channels": "1", "X-Sample-Format": "s16le",
        "X-Seed": str(job.seed), "X-Request-Id": job.id, "X-Mode": body.mode,
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
    }
    if framed:
        # Job-level facts for the final status frame; intake_s: from this handler's start to the job
        # in the worker's line (body read, checks, preparation), where a slow first audio may go.
        status = dict(seed=job.seed, intake_s=job.queued_at - entered, **state.build)
        framed_body = observe_stream(state.metrics, job, framed_stream(job, first, status, words, watch))
        return WatchedResponse(framed_body, watch, media_type=frames.MEDIA_TYPE, headers=headers)
    # audio/L16 is big-endian by definition (RFC 2586); this body is little-endian, so audio/pcm.
    media = f"audio/pcm;rate={rate};channels=1;format=s16le"
    return WatchedResponse(observe_stream(state.metrics, job, pcm_stream(job, first, words, watch)), watch,
                           media_type=media, headers=headers)


def word_track(state, job: Job, rate: int) -> WordTrack:
    return WordTrack(state.analysis, job, rate, state.settings.evaluation.words_wait_s)


@stream_router.get("/jobs/{job_id}")
@guarded
async def job_status(request: Request, job_id: str):
    # With the model and app version the stream's status frame carries: a stopped stream gets none.
    # From the moment serving took the request: preparing, queued, running, its end, or refused.
    return {**find_job(request, job_id).status(), **app_context(request).build}


@stream_router.get("/jobs/{job_id}/offline.wav")
@guarded
async def job_offline(request: Request, job_id: str):
    """The VAE decode from silence of a finished job's latents, as WAV: the reference its stream
    is compared with, made as the stream's listener heard it (so the two still
    compare sample for sample). Decoded a piece at a time on an engine's worker thread
    (ui/services/renders.py)."""
    store = app_context(request).latents
    kept = store.get(job_id)
    if kept is None:
        raise Refusal(404, f"no offline render for this request: the latents of finished requests are kept "
                             f"for {store.ttl_s / 60:.0f} min (the most recent, within {store.max_bytes >> 20} MB)")
    client = client_key(request.client.host if request.client else None)
    return await app_context(request).renders.respond(app_context(request).worker, store, kept, job_id, client)


@stream_router.post("/jobs/{job_id}/cancel")
@guarded
async def job_cancel(request: Request, job_id: str):
    job = find_job(request, job_id)
    job.cancel()
    return {"id": job.id, "state": job.state}


def find_job(request: Request, job_id: str) -> Job:
    job = app_context(request).worker.get(job_id)
    if job is None:
        raise Refusal(404, "no such request (finished requests are kept only for a while)")
    return job
