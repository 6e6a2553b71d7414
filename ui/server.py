"""Puts the pieces together: the engine's worker, the HTTP routes, the player's files and the
Gradio page, all on one FastAPI app so the stream is same-origin with the page.

Every HTTP route besides the Gradio page, by job and prefix (ui/http/):

    /voxcpm/stream                   a request's audio as it is made (stream.py)
    /voxcpm/upload                   a reference clip, kept by id (clips.py)
    /voxcpm/transcribe               a clip's automatic transcript, for ultimate cloning (clips.py)
    /voxcpm/evaluate                 a take's WER/CER and speaker similarity (evaluate.py)
    /voxcpm/jobs/{id}[...]           a job's status, cancellation and offline render (stream.py)
    /voxcpm/voices[...]              the voice library (voices.py)
    /voxcpm/health, /voxcpm/spec     the probe, and the modes' spec the page reads (status.py)
    /v1/...                          OpenAI-compatible speech (openai.py)
    /metrics, /ready                 Prometheus' metrics and the readiness probe (status.py)
    /voxcpm/playback                 a page's report of a take's underruns, for /metrics (status.py)

and Gradio's own API, the named endpoints gradio_client calls (/generate, /generate_stream,
/transcribe, /voices: ui/page/api.py), on the same intake as the routes.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import replace
from pathlib import Path

import gradio as gr
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.routing import Match, Route

from inference.analysis.process import Analysis
from inference.serving.latent_store import LatentStore
from inference.serving.pool import WorkerPool
from inference.serving.worker import EngineWorker
from inference.text.normalize import Normalizer

from .context import AppContext
from .settings import Settings
from .guard.auth import TokenGate
from .guard.events import KnownEvents
from .guard.hosts import HostGuard
from .guard.limits import RequestLimits
from .http.clips import clips_router
from .http.evaluate import evaluate_router
from .http.openai import openai_router, speech
from .http.live import live_router
from .http.status import status_router
from .http.stream import stream, stream_router
from .http.words import words_router
from .http.voices import voice_lookup, voice_router
from .library.uploads import UploadStore
from .library.voice_store import VoiceLibrary, VoiceStore, library_options
from .page.layout import build_blocks, served_line
from .services.metrics import Metrics
from .services.renders import OfflineRenders

log = logging.getLogger("voxcpm.app")
ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
ASSETS = ROOT / "assets"
# The limits an engine enforces itself (RequestPreparer): the served ones are the engine's.
ENGINE_LIMITS = ("max_text_chars", "max_audio_seconds", "max_output_seconds")
# The streaming doors a burst of requests comes through: served by DoorLane, ahead of FastAPI's router.
LANE = (stream, speech)
ROUTERS = ((stream_router, "/voxcpm"), (clips_router, "/voxcpm"), (evaluate_router, "/voxcpm"), (words_router, "/voxcpm"),
           (voice_router, "/voxcpm/voices"),
           (live_router, "/v1"), (openai_router, "/v1"), (status_router, ""))


def _asset_version() -> str:
    # Browsers cache modules hard; a content hash in the URL makes a new deploy load the new player.
    digest = hashlib.sha256()
    for path in sorted(p for p in STATIC.rglob("*") if p.is_file()):  # vendor/ holds folders
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _head() -> str:
    # The rate, the prebuffer and the limits are not in the URL: the page reads them from GET /voxcpm/spec.
    return f'<script type="module" src="voxcpm/static/app.js?v={_asset_version()}"></script>'


def create_app(engine, settings: Settings | None = None) -> tuple[FastAPI, EngineWorker | WorkerPool]:
    """engine: one engine, or a list of them (one per GPU), served by one WorkerPool whose
    workers each warm up their engine on their own thread, in turn (Engine.warmup's lock)."""
    engines = list(engine) if isinstance(engine, (list, tuple)) else [engine]
    settings = served_settings(settings or Settings(), engines[0])
    limits = settings.limits
    latents = LatentStore(max_bytes=limits.latents_mb * 2**20, ttl_s=limits.latents_ttl_s)
    normalizer = Normalizer(limits.normalize_processes)
    worker = _worker(engines, settings, latents, normalizer)
    voices = _library(settings, engines[0])

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        if settings.warm_up:  # the first text sent with normalize on does not wait for its process to load
            normalizer.start_soon()
        yield
        worker.close()  # on shutdown: cancel what is queued, finish the current patch, end the thread
        ctx.analysis.close()
        normalizer.close()
        if voices is not None:
            voices.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.ctx = ctx = _context(engines[0], settings, worker, latents, voices)
    for router, prefix in ROUTERS:
        app.include_router(router, prefix=prefix)
    app.mount("/voxcpm/static", StaticFiles(directory=STATIC), name="voxcpm-static")
    demo = _mount_page(app, ctx)
    _guard(app, settings, demo)
    return app, worker


def served_settings(settings: Settings, engine) -> Settings:
    """The settings with the engine's own limits, the ones it enforces: one Limits, which the
    worker, the routes (ctx.limits) and the page (the spec) are all given. app.py loads the engine
    from these settings, so they agree; an engine built apart (a test's) keeps its own, and the log
    names each limit the settings asked otherwise. `engine`: the first one (every GPU's is the same)."""
    own = {name: type(getattr(settings.limits, name))(getattr(engine, name)) for name in ENGINE_LIMITS}
    ignored = [f"{name} {getattr(settings.limits, name)} (the engine's: {value})"
               for name, value in own.items() if getattr(settings.limits, name) != value]
    if ignored:
        log.warning("the engine was built with other limits than the settings give; it serves its own: %s",
                    ", ".join(ignored))
    return replace(settings, limits=replace(settings.limits, **own))


def _worker(engines: list, settings: Settings, latents: LatentStore, normalizer: Normalizer) -> EngineWorker | WorkerPool:
    # One normalizer for every GPU's intake: its processes are the app's, as the analysis process is.
    options = dict(settings.limits.worker_options(), warm_up=settings.warm_up, latents=latents, normalizer=normalizer)
    # One engine keeps its plain worker: nothing to route, and one thread fewer.
    if len(engines) == 1:
        return EngineWorker(engines[0], **options)
    return WorkerPool(engines, failing_pause_s=settings.limits.failing_gpu_pause_s, **options)


def _context(engine, settings: Settings, worker, latents: LatentStore, voices: VoiceStore | None) -> AppContext:
    """What the routes read (ui/context.app_context). `engine`: the first one; `settings`: the
    served ones (served_settings), whose limits are the engine's."""
    clips = UploadStore.of(settings, _input_rate(engine))
    build = {"model": settings.build.model_id, "revision": settings.build.model_revision, "lora": settings.build.lora,
             "app_version": _asset_version()}
    lookup = voice_lookup(voices, engine.encoder_identity)
    return AppContext(settings=settings, worker=worker, limits=settings.limits, clips=clips, latents=latents,
                      renders=OfflineRenders(settings.renders), metrics=Metrics(worker), analysis=Analysis(_analysis_settings(settings, engine)),
                      voices=voices, voice_lookup=lookup, encoder_identity=engine.encoder_identity, build=build)


def _analysis_settings(settings: Settings, engine):
    """The analysis process on the first engine's device unless the settings name one."""
    analysis = settings.analysis
    return analysis if analysis.device != "auto" else replace(analysis, device=str(engine.device))


def _mount_page(app: FastAPI, ctx: AppContext) -> gr.Blocks:
    """The Gradio page at /, on the same app as the routes (so the stream is same-origin)."""
    settings = ctx.settings
    demo = build_blocks(ctx.clips, sample_rate=ctx.worker.sample_rate, prebuffer_ms=settings.page.prebuffer_ms,
                        notice=settings.page.notice, max_text_chars=ctx.limits.max_text_chars,
                        served=served_line(settings.build.model_id, settings.build.lora), api=ctx)
    demo.queue(max_size=settings.page.gradio_queue, default_concurrency_limit=4,
               poll_s=settings.page.gradio_poll_ms / 1000.0)
    gr.mount_gradio_app(
        app, demo, path="/", css_paths=[STATIC / "app.css"], head=_head(),
        allowed_paths=[str(ASSETS)], max_file_size=f"{settings.http.max_upload_mb}mb", show_error=False, ssr_mode=False,
        # "Use via API": Gradio's documentation of the named endpoints (ui/page/api.py), with its
        # gradio_client snippets; the HTTP routes are in the page's "Use via HTTP" list (ui/page/workbench.py).
        footer_links=["api", "gradio"], run_history=False,
    )
    # Gradio checks that a file named in an event's input was uploaded by a user, but skips the
    # check until the Blocks has "launched", which mount_gradio_app never marks: without this any
    # server path (a secret, a symlink, /dev/zero read on the event loop) is copied into its cache
    # for every fn_index. Gradio's own hot reload marks a swapped-in Blocks the same way.
    demo.has_launched = True
    return demo


def _guard(app: FastAPI, settings: Settings, demo: gr.Blocks):
    """The middlewares every request passes; the last added runs first, so a request for another
    host is refused before its token is looked at, and a body is counted only once admitted. The
    streaming doors leave the stack last, after every guard (DoorLane)."""
    app.add_middleware(DoorLane, routes=lane_routes())
    app.add_middleware(KnownEvents, demo=demo)
    app.add_middleware(RequestLimits, max_body_bytes=settings.http.max_upload_mb * 2**20,
                       max_files=settings.http.max_request_files, body_timeout_s=settings.http.body_timeout_s)
    if settings.access.token:
        app.add_middleware(TokenGate, token=settings.access.token)
    app.add_middleware(HostGuard, allowed_hosts=settings.access.allowed_hosts)


class DoorLane:
    """The innermost middleware: a request for one of the streaming doors (LANE) goes from the
    guards straight to its handler, as a plain Starlette route; everything else goes on to FastAPI.

    FastAPI's router matches a path against every included router in turn (the page's routes
    among them), and its exception and exit-stack layers wrap each response message: about 110 us
    of the event loop per request on a 2-core CPU (a GET through the whole stack 138 us, through
    this lane 25), paid 64 times in a burst of 64 before the last one is admitted. The doors' own
    handlers answer every error themselves (ui/http/common.errors_as), so the layers skipped have
    nothing to catch. The routes stay registered with FastAPI too: the lane only reaches them first."""

    def __init__(self, app, routes: list[Route]):
        self.app, self.routes = app, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            for route in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:  # a PARTIAL one (another method) goes on to FastAPI, as before
                    scope.update(child)
                    return await route.handle(scope, receive, send)
        await self.app(scope, receive, send)


def lane_routes() -> list[Route]:
    """The doors of LANE as Starlette routes, at the paths and methods their routers give them."""
    return [Route(prefix + route.path, route.endpoint, methods=route.methods) for router, prefix in ROUTERS
            for route in router.routes if isinstance(route, APIRoute) and route.endpoint in LANE]


def _library(settings: Settings, engine) -> VoiceStore | None:
    """The store the settings name: PostgreSQL at `voice_store`, else DATA_DIR/voices, else none."""
    library = settings.library
    if library.voice_store:
        from .library.pg_voice_store import PostgresVoiceLibrary  # psycopg only where it is used

        return PostgresVoiceLibrary(library.voice_store, **PostgresVoiceLibrary.options(settings, _input_rate(engine)))
    if library.data_dir is None:
        return None
    return VoiceLibrary(Path(library.data_dir) / "voices", **library_options(settings, _input_rate(engine)))


def _input_rate(engine) -> int:
    """The rate the engine encodes clips at, so stored clips need no further resampling."""
    return int(engine.clip_rate)
