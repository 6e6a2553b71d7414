"""Every HTTP route of the app besides the Gradio page, by job and prefix:

    /voxcpm/stream                   a request's audio as it is made (stream.py)
    /voxcpm/upload                   a reference clip, kept by id (uploads.py)
    /voxcpm/transcribe               a clip's automatic transcript, for ultimate cloning (transcribe.py)
    /voxcpm/jobs/{id}[...]           a job's status, cancellation and offline render (jobs.py)
    /voxcpm/voices[...]              the voice library (voices.py)
    /voxcpm/health, /voxcpm/spec     the probe, and the modes' spec the page reads (health.py)
    /v1/...                          OpenAI-compatible speech (openai.py)
    /metrics, /ready                 Prometheus' metrics and the readiness probe (metrics.py)
    /voxcpm/playback                 a page's report of a take's underruns, for /metrics (playback.py)
"""
from __future__ import annotations

from fastapi import FastAPI

from .health import health_router
from .jobs import jobs_router
from .metrics import metrics_router
from .openai import openai_router
from .playback import playback_router
from .stream import stream_router
from .transcribe import transcribe_router
from .uploads import upload_router
from .voices import voice_router

ROUTERS = ((stream_router, "/voxcpm"), (upload_router, "/voxcpm"), (jobs_router, "/voxcpm"),
           (voice_router, "/voxcpm/voices"), (health_router, "/voxcpm"), (openai_router, "/v1"),
           (metrics_router, ""), (playback_router, "/voxcpm"), (transcribe_router, "/voxcpm"))


def include_routes(app: FastAPI):
    for router, prefix in ROUTERS:
        app.include_router(router, prefix=prefix)
