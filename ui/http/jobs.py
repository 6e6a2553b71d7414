"""A request's job after it was queued: its status (the page's metrics panel), its cancellation,
and a finished job's offline render (ui/http/offline.py)."""
from __future__ import annotations

from fastapi import APIRouter, Request

from inference.serving.job import Job

from ..library.uploads import client_key
from .common import HTTPError, guarded
from ..context import app_context

jobs_router = APIRouter()


@jobs_router.get("/jobs/{job_id}")
@guarded
async def job_status(request: Request, job_id: str):
    # With the model and app version the stream's status frame carries: a stopped stream gets none.
    return {**find_job(request, job_id).status(), **app_context(request).build}


@jobs_router.get("/jobs/{job_id}/offline.wav")
@guarded
async def job_offline(request: Request, job_id: str):
    """The VAE decode from silence of a finished job's latents, as WAV: the reference its stream
    is compared with. Decoded a piece at a time on an engine's worker thread (offline.py)."""
    store = app_context(request).latents
    kept = store.get(job_id)
    if kept is None:
        raise HTTPError(404, f"no offline render for this request: the latents of finished requests are kept "
                             f"for {store.ttl_s / 60:.0f} min (the most recent, within {store.max_bytes >> 20} MB)")
    client = client_key(request.client.host if request.client else None)
    return await app_context(request).renders.respond(app_context(request).worker, store, kept, job_id, client)


@jobs_router.post("/jobs/{job_id}/cancel")
@guarded
async def job_cancel(request: Request, job_id: str):
    job = find_job(request, job_id)
    job.cancel()
    return {"id": job.id, "state": job.state}


def find_job(request: Request, job_id: str) -> Job:
    job = app_context(request).worker.get(job_id)
    if job is None:
        raise HTTPError(404, "no such request (finished requests are kept only for a while)")
    return job
