"""What the server is and how it does, besides the requests themselves:

    GET /voxcpm/health     the probe (needs no token): alive, sample rate, rows in use and waiting
    GET /voxcpm/spec       the modes and request settings (inference/request/modes.py), with the sample
                           rate, the prebuffer and the limits: all the page reads of the server
    GET /metrics           Prometheus' text format (ui/services/metrics.py; needs the token when set)
    GET /ready             200 only once every engine is warm and serving, else 503 (no token)
    POST /voxcpm/playback  a page's report of how a take played, {"job", "underruns", "gap_ms"}: underruns
                           are heard in the browser only, so this is how /metrics learns of them

The player (static/player/player.js) sends its playback report when it keeps a take, finished or
stopped; each request the worker lists is counted once.
"""
from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference.errors import InputError
from inference.request import modes
from inference.serving.pool import gpu_status

from . import frames
from .common import guarded, read_json
from ..services import audio
from ..context import app_context

status_router = APIRouter()


@status_router.get("/voxcpm/health")
async def health(request: Request):
    worker = app_context(request).worker
    gpus = gpu_status(worker)  # each GPU's rows in use and waiting jobs (one entry without a pool)
    return {"ok": any(g["alive"] for g in gpus), "sample_rate": worker.sample_rate, "busy": worker.running > 0,
            "waiting": worker.waiting, "max_queue": worker.max_queue, "gpus": gpus}


@status_router.get("/voxcpm/spec")
async def spec(request: Request):
    """The one spec of the modes, defaults and ranges (modes.spec_json()), and what the page's
    player and form need of this server: its sample rate, the prebuffer and the limits; and what
    /v1/audio/speech accepts beyond OpenAI's own values (its formats and `sample_rate`s)."""
    ctx = app_context(request)
    limits, worker = ctx.limits, ctx.worker
    return {**modes.spec_json(), "sample_rate": worker.sample_rate, "patch_samples": worker.patch_samples,
            "prebuffer_ms": ctx.settings.page.prebuffer_ms, "frames": frames.spec(),
            "workbench": dataclasses.asdict(ctx.settings.workbench),
            "limits": {"max_text_chars": limits.max_text_chars, "max_audio_seconds": limits.max_audio_seconds,
                       "max_output_seconds": limits.max_output_seconds, "max_upload_mb": ctx.settings.http.max_upload_mb},
            "openai": {"formats": {fmt: list(audio.rates_for(fmt)) for fmt in audio.FORMATS},
                       "pcm_rate": audio.PCM_RATE}}


@status_router.get("/metrics")
async def metrics(request: Request):
    return Response(generate_latest(app_context(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)


@status_router.get("/ready")
async def ready(request: Request):
    """200 only once every engine has warmed up and every GPU's worker serves; else 503."""
    ctx = app_context(request)
    worker = ctx.worker
    gpus = worker.gpus()
    warm = worker.ready.is_set() and worker.warmup_error is None
    serving = bool(gpus) and all(g["alive"] and not g["failing"] for g in gpus)
    body = {"ready": warm and serving, "warm": warm, "gpus": gpus}
    return JSONResponse(body, status_code=200 if warm and serving else 503,
                        headers=None if warm and serving else {"Retry-After": str(ctx.settings.page.loading_retry_s)})


class PlaybackReport(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    job: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$")
    underruns: int = Field(ge=0, le=100_000)
    gap_ms: float = Field(ge=0, le=86_400_000, allow_inf_nan=False)


@status_router.post("/voxcpm/playback")
@guarded
async def playback(request: Request):
    """{"counted": true, "underruns", "gap_ms"} (as counted: clamped to what the request could have
    had, ui/services/metrics.py) the first time a request the worker lists is reported, else
    {"counted": false}."""
    try:
        report = PlaybackReport.model_validate(await read_json(request))
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        raise InputError(f"a playback report is {{job, underruns, gap_ms}}: {where[:40]}: {err['msg']}") from None
    counted = app_context(request).metrics.played(report)
    return JSONResponse({"counted": False} if counted is None else {"counted": True, **counted})
