"""A request's job after it was queued: its status (the page's metrics panel), its cancellation,
and a finished job's offline render (ui/http/offline.py)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from inference.serving.job import Job

from .common import HTTPError, app_state, guarded
from .offline import render_offline

jobs_router = APIRouter()


@jobs_router.get("/jobs/{job_id}")
@guarded
async def job_status(request: Request, job_id: str):
    # With the model and app version the stream's status frame carries: a stopped stream gets none.
    return {**find_job(request, job_id).status(), **app_state(request).build}


@jobs_router.get("/jobs/{job_id}/offline.wav")
@guarded
async def job_offline(request: Request, job_id: str):
    """The whole-sequence VAE decode of a finished job's latents, as WAV: the reference its stream
    is compared with. Decoded on an engine's worker thread, awaited here without blocking."""
    store = app_state(request).latents
    kept = store.get(job_id)
    if kept is None:
        raise HTTPError(404, f"no offline render for this request: the latents of finished requests are kept "
                             f"for {store.ttl_s / 60:.0f} min (the most recent, within {store.max_bytes >> 20} MB)")
    body = await render_offline(app_state(request).worker, kept, job_id)
    return Response(body, media_type="audio/wav", headers={"Cache-Control": "no-store"})


@jobs_router.post("/jobs/{job_id}/cancel")
@guarded
async def job_cancel(request: Request, job_id: str):
    job = find_job(request, job_id)
    job.cancel()
    return {"id": job.id, "state": job.state}


def find_job(request: Request, job_id: str) -> Job:
    job = app_state(request).worker.get(job_id)
    if job is None:
        raise HTTPError(404, "no such request (finished requests are kept only for a while)")
    return job
