"""What the server is and serves: GET /voxcpm/health (the probe, needing no token) and
GET /voxcpm/spec (the modes and request settings, inference/request/modes.py, that the page reads)."""
from __future__ import annotations

from fastapi import APIRouter, Request

from inference.request import modes
from inference.serving.pool import gpu_status

from .common import app_state

health_router = APIRouter()


@health_router.get("/health")
async def health(request: Request):
    worker = app_state(request).worker
    gpus = gpu_status(worker)  # each GPU's rows in use and waiting jobs (one entry without a pool)
    return {"ok": any(g["alive"] for g in gpus), "sample_rate": worker.sample_rate, "busy": worker.running > 0,
            "waiting": worker.waiting, "max_queue": worker.max_queue, "gpus": gpus}


@health_router.get("/spec")
async def spec():
    """The one spec of the modes, defaults and ranges, as modes.spec_json() gives it."""
    return modes.spec_json()
