"""What the app holds while it serves, built once: `AppContext`, everything the routes read, built
by create_app (ui/server.py) and stored as the one attribute `app.state.ctx`, which every route
reads through `app_context` (below). Its settings are the one tree of ui/settings.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from inference.config import Limits

from .settings import Settings

if TYPE_CHECKING:
    from inference.analysis.process import Analysis
    from inference.serving.latent_store import LatentStore

    from starlette.requests import Request

    from .services.metrics import Metrics
    from .services.renders import OfflineRenders
    from .library.uploads import UploadStore
    from .library.voice_store import VoiceStore


@dataclass
class AppContext:
    """What the routes read. Its fields are set once by create_app; the objects they hold keep
    their own state (the worker its jobs, the stores their clips). `limits` are the served ones:
    the engine's own, which may differ from settings.limits where a test built the engine apart."""
    settings: Settings
    worker: Any  # an EngineWorker, or a WorkerPool with several GPUs (inference/serving/interfaces.Serving)
    limits: Limits
    clips: UploadStore
    latents: LatentStore
    renders: OfflineRenders
    metrics: Metrics
    analysis: Analysis  # the models that listen to audio, in their own process
    voices: VoiceStore | None  # the folder's (VoiceLibrary) or PostgreSQL's (PostgresVoiceLibrary)
    voice_lookup: Callable | None  # name -> (Voice, ReferenceClip) for requests naming a saved voice
    encoder_identity: str  # whose encoded patches a saved voice keeps (the same on every GPU)
    build: dict = field(default_factory=dict)  # model, revision, lora and app version, as each take records them


def app_context(request: Request) -> AppContext:
    """What create_app (ui/server.py) built for the routes, as every route reads it."""
    return request.app.state.ctx
