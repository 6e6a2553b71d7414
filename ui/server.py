"""Puts the pieces together: the engine's worker, the HTTP routes, the player's files and the
Gradio page, all on one FastAPI app so the stream is same-origin with the page."""
from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from inference.serving.asr import Transcriber
from inference.serving.latent_store import LatentStore
from inference.serving.pool import WorkerPool
from inference.serving.worker import EngineWorker

from .guard.auth import TokenGate
from .guard.events import KnownEvents
from .guard.hosts import HostGuard
from .guard.limits import RequestLimits
from .http.offline import OfflineRenders
from .http.routes import include_routes
from .http.metrics import Metrics
from .http.voices import voice_lookup
from .library.uploads import UploadStore
from .library.voice_store import VoiceLibrary
from .page.layout import build_blocks, served_line

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
ASSETS = ROOT / "assets"


@dataclass
class AppSettings:
    max_queue: int = 16  # requests waiting for the engine (the running one not counted)
    gradio_queue: int = 64  # Gradio's own events (clip uploads) waiting
    prebuffer_ms: float = 80.0
    upload_ttl_s: float = 1800.0
    max_upload_mb: int = 25
    clips_per_client: int = 16  # clips one client (address) may hold at once; more are refused
    notice: str | None = None  # a banner above the page, e.g. that the weights are random
    warm_up: bool = False  # warm the engine on its worker thread (when from_pretrained did not)
    token: str | None = None  # when set, every request but the health probe must carry it (ui/guard/auth.py)
    allowed_hosts: list[str] | None = None  # Host names answered (ui/guard/hosts.py); None: any
    max_request_files: int = 1  # files in one request to Gradio's upload route (the page sends one clip)
    body_timeout_s: float = 60.0  # a request body must arrive within this (25 MiB at 3.5 Mbit/s)
    max_backlog_s: float = 120.0  # unread audio a stream may pile up before it is stopped
    max_unread_s: float = 240.0  # unread audio all streams together may hold (inference/serving/backlog.py)
    idle_timeout_s: float = 30.0  # a connection must send its request within this (ui/guard/connections.py)
    stall_timeout_s: float = 30.0  # a client that reads none of its response for this long is cut off
    send_buffer_bytes: int = 256 * 1024  # the kernel's send buffer per connection (ui/guard/connections.py)
    keep_finished: int = 256  # finished requests whose status (metrics) can still be asked for
    latents_mb: int = 64  # finished requests' latents kept for their offline render (inference/serving/latent_store.py)
    latents_ttl_s: float = 1800.0  # ... and for how long
    model_id: str = "tiny random model"  # what each take records as its model (app.py sets them)
    model_revision: str | None = None
    lora: str | None = None  # the LoRA merged into the served weights (--lora), as the page and /v1/models name it
    data_dir: str | None = None  # the voice library lives in DATA_DIR/voices (ui/library/data_dir.py); None: no library
    max_voices: int = 100
    max_library_mb: int = 500
    library_writable: bool = True  # app.py: False when others can reach the server without a token
    asr_model: str | None = None  # automatic transcripts' model, loaded on first use (inference/serving/asr.py); None: off


def _asset_version() -> str:
    # Browsers cache modules hard; a content hash in the URL makes a new deploy load the new player.
    digest = hashlib.sha256()
    for path in sorted(p for p in STATIC.rglob("*") if p.is_file()):  # vendor/ holds folders
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _head(sample_rate: int, prebuffer_ms: float) -> str:
    query = f"v={_asset_version()}&rate={int(sample_rate)}&prebuffer_ms={float(prebuffer_ms):g}"
    return f'<script type="module" src="voxcpm/static/app.js?{query}"></script>'


def create_app(engine, settings: AppSettings | None = None) -> tuple[FastAPI, EngineWorker | WorkerPool]:
    """engine: one engine, or a list of them (one per GPU), served by one WorkerPool whose
    workers each warm up their engine on their own thread, in turn (Engine.warmup's lock)."""
    settings = settings or AppSettings()
    engines = list(engine) if isinstance(engine, (list, tuple)) else [engine]
    latents = LatentStore(max_bytes=settings.latents_mb * 2**20, ttl_s=settings.latents_ttl_s)
    worker = _worker(engines, settings, latents)
    voices = _library(settings, engines[0])

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        worker.close()  # on shutdown: cancel what is queued, finish the current patch, end the thread
        if voices is not None:
            voices.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    _fill_state(app.state, engines[0], settings, worker, latents, voices)
    include_routes(app)
    app.mount("/voxcpm/static", StaticFiles(directory=STATIC), name="voxcpm-static")
    app.state.demo = _mount_page(app, settings)
    _guard(app, settings)
    return app, worker


def _worker(engines: list, settings: AppSettings, latents: LatentStore) -> EngineWorker | WorkerPool:
    options = dict(max_queue=settings.max_queue, warm_up=settings.warm_up, max_backlog_s=settings.max_backlog_s,
                   keep_finished=settings.keep_finished, max_unread_s=settings.max_unread_s, latents=latents)
    # One engine keeps its plain worker: nothing to route, and one thread fewer.
    return EngineWorker(engines[0], **options) if len(engines) == 1 else WorkerPool(engines, **options)


def _fill_state(state, engine, settings: AppSettings, worker, latents: LatentStore, voices: VoiceLibrary | None):
    """What the routes read (ui/http/common.app_state). `engine`: the first one; the limits and
    rates are the same on every GPU."""
    state.worker, state.latents, state.settings = worker, latents, settings  # ui/guard/connections reads settings
    state.renders = OfflineRenders()  # offline renders in progress (ui/http/offline.py)
    state.max_text_chars = int(engine.max_text_chars)
    state.clips = UploadStore(ttl_s=settings.upload_ttl_s, max_seconds=float(engine.max_audio_seconds),
                              max_bytes=settings.max_upload_mb * 2**20, target_rate=_input_rate(engine),
                              max_per_client=settings.clips_per_client)
    state.build = {"model": settings.model_id, "revision": settings.model_revision, "lora": settings.lora,
                   "app_version": _asset_version()}
    state.voices, state.library_writable = voices, settings.library_writable
    state.encoder_identity = engine.encoder_identity
    state.voice_lookup = voice_lookup(state)
    state.metrics = Metrics(worker)  # GET /metrics (ui/http/metrics.py)
    state.asr = Transcriber(settings.asr_model)  # POST /voxcpm/transcribe (ui/http/transcribe.py)


def _mount_page(app: FastAPI, settings: AppSettings) -> gr.Blocks:
    """The Gradio page at /, on the same app as the routes (so the stream is same-origin)."""
    worker = app.state.worker
    demo = build_blocks(app.state.clips, sample_rate=worker.sample_rate, prebuffer_ms=settings.prebuffer_ms,
                        notice=settings.notice, max_text_chars=app.state.max_text_chars,
                        served=served_line(settings.model_id, settings.lora))
    demo.queue(max_size=settings.gradio_queue, default_concurrency_limit=4)
    gr.mount_gradio_app(
        app, demo, path="/", css_paths=[STATIC / "app.css"], head=_head(worker.sample_rate, settings.prebuffer_ms),
        allowed_paths=[str(ASSETS)], max_file_size=f"{settings.max_upload_mb}mb", show_error=False, ssr_mode=False,
        # Gradio's "Use via API" page lists only Gradio events, none of which generate audio: the
        # real API is named in the page's "Use via HTTP" list (ui/page/workbench.py) and voice library.
        footer_links=["gradio"], run_history=False,
    )
    # Gradio checks that a file named in an event's input was uploaded by a user, but skips the
    # check until the Blocks has "launched", which mount_gradio_app never marks: without this any
    # server path (a secret, a symlink, /dev/zero read on the event loop) is copied into its cache
    # for every fn_index. Gradio's own hot reload marks a swapped-in Blocks the same way.
    demo.has_launched = True
    return demo


def _guard(app: FastAPI, settings: AppSettings):
    """The middlewares every request passes; the last added runs first, so a request for another
    host is refused before its token is looked at, and a body is counted only once admitted."""
    app.add_middleware(KnownEvents, demo=app.state.demo)
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_upload_mb * 2**20,
                       max_files=settings.max_request_files, body_timeout_s=settings.body_timeout_s)
    if settings.token:
        app.add_middleware(TokenGate, token=settings.token)
    app.add_middleware(HostGuard, allowed_hosts=settings.allowed_hosts)


def _library(settings: AppSettings, engine) -> VoiceLibrary | None:
    if settings.data_dir is None:
        return None
    return VoiceLibrary(Path(settings.data_dir) / "voices", sample_rate=_input_rate(engine),
                        max_voices=settings.max_voices, max_bytes=settings.max_library_mb * 2**20)


def _input_rate(engine) -> int:
    """The rate the engine encodes clips at, so stored clips need no further resampling."""
    return int(engine.cfg.vae.sample_rate)
