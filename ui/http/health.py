"""What the server is and serves: GET /voxcpm/health (the probe, needing no token) and
GET /voxcpm/spec (the modes and request settings, inference/request/modes.py, with the sample rate,
prebuffer and limits: all the page reads of the server)."""
from __future__ import annotations

from fastapi import APIRouter, Request

from inference.request import modes
from inference.serving.pool import gpu_status

from ..context import app_context

health_router = APIRouter()


@health_router.get("/health")
async def health(request: Request):
    worker = app_context(request).worker
    gpus = gpu_status(worker)  # each GPU's rows in use and waiting jobs (one entry without a pool)
    return {"ok": any(g["alive"] for g in gpus), "sample_rate": worker.sample_rate, "busy": worker.running > 0,
            "waiting": worker.waiting, "max_queue": worker.max_queue, "gpus": gpus}


@health_router.get("/spec")
async def spec(request: Request):
    """The one spec of the modes, defaults and ranges (modes.spec_json()), and what the page's
    player and form need of this server: its sample rate, the prebuffer and the limits."""
    ctx = app_context(request)
    limits = ctx.limits
    return {**modes.spec_json(), "sample_rate": ctx.worker.sample_rate, "prebuffer_ms": ctx.settings.prebuffer_ms,
            "limits": {"max_text_chars": limits.max_text_chars, "max_audio_seconds": limits.max_audio_seconds,
                       "max_upload_mb": ctx.settings.max_upload_mb}}
