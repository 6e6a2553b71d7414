"""The app's settings and what it holds while it serves, each built once.

`AppSettings`: frozen, read by create_app (ui/server.py) and by app.py's command line (options.py
takes its defaults and help from these fields). The engine's and the serving layer's limits live in
`inference.config.Limits`, held here as `limits`. `AppContext`: everything the routes read, built by
create_app and stored as the one attribute `app.state.ctx`, which every route reads through
`app_context` (below).

Deliberately free of Gradio, so that app.py's command line answers in about a second.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from inference.config import LIMITS, AnalysisSettings, Limits

if TYPE_CHECKING:
    from inference.analysis.process import Analysis
    from inference.serving.latent_store import LatentStore

    from starlette.requests import Request

    from .services.metrics import Metrics
    from .services.renders import OfflineRenders
    from .library.uploads import UploadStore
    from .library.voice_store import VoiceStore


@dataclass(frozen=True)
class AppSettings:
    limits: Limits = LIMITS  # the engine's and the serving layer's (max_queue, backlog, latents...)
    gradio_queue: int = 64  # Gradio's own events (clip uploads) waiting
    prebuffer_ms: float = 80.0  # audio the page's player holds before it starts (GET /voxcpm/spec)
    upload_ttl_s: float = 1800.0
    max_upload_mb: int = 25
    clips_per_client: int = 16  # clips one client (address) may hold at once; more are refused
    notice: str | None = None  # a banner above the page, e.g. that the weights are random
    warm_up: bool = False  # warm the engine on its worker thread (when from_pretrained did not)
    token: str | None = None  # when set, every request but the health probe must carry it (ui/guard/auth.py)
    allowed_hosts: list[str] | None = None  # Host names answered (ui/guard/hosts.py); None: any
    max_request_files: int = 1  # files in one request to Gradio's upload route (the page sends one clip)
    body_timeout_s: float = 60.0  # a request body must arrive within this (25 MiB at 3.5 Mbit/s)
    idle_timeout_s: float = 30.0  # a connection must send its request within this (ui/guard/connections.py)
    stall_timeout_s: float = 30.0  # a client that reads none of its response for this long is cut off
    send_buffer_bytes: int = 256 * 1024  # the kernel's send buffer per connection (ui/guard/connections.py)
    model_id: str = "tiny random model"  # what each take records as its model (app.py describes it)
    model_revision: str | None = None
    lora: str | None = None  # the LoRA merged into the served weights (--lora), as the page and /v1/models name it
    data_dir: str | None = None  # the voice library lives in DATA_DIR/voices (ui/library/data_dir.py); None: no library
    # A postgresql:// URL: the voice library in that database, one for every replica
    # (ui/library/pg_voice_store.py); None: the folder DATA_DIR/voices.
    voice_store: str | None = None
    max_voices: int = 100
    max_library_mb: int = 500
    library_writable: bool = True  # app.py: False when others can reach the server without a token
    # The analysis process: automatic transcripts' and speaker similarity's models (inference/analysis/).
    analysis: AnalysisSettings = AnalysisSettings()


@dataclass
class AppContext:
    """What the routes read. Its fields are set once by create_app; the objects they hold keep
    their own state (the worker its jobs, the stores their clips). `limits` are the served ones:
    the engine's own, which may differ from settings.limits where a test built the engine apart."""
    settings: AppSettings
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
