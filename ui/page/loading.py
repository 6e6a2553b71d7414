"""Serving while the engine loads: the server listens from the start and answers every request with a
"loading… (phase)" page (503 for the API) until the real app is ready, then hands over to it.

A download of the real checkpoint takes minutes; without this, a page opened meanwhile would not
connect at all, and nothing would say whether the server is coming.
"""
from __future__ import annotations

import asyncio
import html
import json
import logging
import threading
import time

log = logging.getLogger("voxcpm.app")


class Phases:
    """The start-up phase under way, shown by the loading page, and one log line per finished phase
    with its time. Written by the loading thread, read by the server's: a str swap is atomic."""

    def __init__(self):
        self.current = "starting"
        self._started = time.perf_counter()

    def begin(self, name: str):
        self.current = name
        self._started = time.perf_counter()

    def end(self, seconds: float | None = None) -> float:
        """seconds: a figure measured closer to the work (the engine's own warm-up time) than ours."""
        took = time.perf_counter() - self._started if seconds is None else seconds
        log.info("%s: %.1f s", self.current, took)
        return took


ENGINE_WARMUP_LOG = "voxcpm.engine.warmup"  # the logger of the engine's own warm-up time (Engine.warmup)


def quiet_engine_warmup():
    """Leaves out the engine's own warm-up line, which it logs on a logger of its own for this: the
    warm-up phase line (Phases.end) reports that same figure, and two warm-up times in one start-up
    read as a contradiction. Its warnings still show."""
    logging.getLogger(ENGINE_WARMUP_LOG).setLevel(logging.WARNING)


class LoadingGate:
    """The ASGI app uvicorn serves: a loading page, then (after `open`) the real app, whose lifespan
    (Gradio's queue start-up, the worker's shutdown) it runs in a task of the server's event loop."""

    def __init__(self, phases: Phases, retry_s: int):
        """retry_s: how often the loading page reloads itself, and the Retry-After of a 503."""
        self.phases, self.retry_s = phases, retry_s
        self.app = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = threading.Event()
        self._stop: asyncio.Event | None = None
        self._lifespan_task: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._loading(scope, send)
        else:  # a websocket before the page exists: 1013 is "try again later"
            await send({"type": "websocket.close", "code": 1013})

    def open(self, app, timeout: float = 60.0) -> bool:
        """From the loading thread: start the app's lifespan, then route every request to it.
        False when the server stopped (or never started) meanwhile."""
        if not self._listening.wait(timeout) or self._stop.is_set():
            return False
        asyncio.run_coroutine_threadsafe(self._start(app), self._loop).result(timeout)
        return True

    async def _start(self, app):
        started = asyncio.Event()
        self._lifespan_task = asyncio.create_task(self._run_lifespan(app, started))
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({self._lifespan_task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._lifespan_task.done():
            self._lifespan_task.result()  # its start-up failed: raise that in open()
        self.app = app

    async def _run_lifespan(self, app, started: asyncio.Event):
        # Entered and left in this one task: Gradio's lifespan holds task groups, which must be.
        async with app.router.lifespan_context(app):
            started.set()
            await self._stop.wait()

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
                self._listening.set()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._stop.set()
                if self._lifespan_task is not None:
                    await asyncio.gather(self._lifespan_task, return_exceptions=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _loading(self, scope, send):
        phase = self.phases.current
        if scope["method"] == "GET" and not scope["path"].startswith("/voxcpm/"):
            body, kind = _page(phase, self.retry_s).encode(), "text/html; charset=utf-8"
        else:  # the health probe and the API: a machine-readable answer
            answer = {"ok": False, "loading": phase,
                      "error": f"The server is still starting ({phase}); try again in a moment."}
            body, kind = json.dumps(answer).encode(), "application/json"
        headers = [(b"content-type", kind.encode()), (b"retry-after", str(self.retry_s).encode()),
                   (b"cache-control", b"no-store"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _page(phase: str, retry_s: int) -> str:
    return (f'<!doctype html><html lang="en"><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="{retry_s}"><title>VoxCPM2 demo: loading…</title>'
            f'<body style="font: 18px system-ui, sans-serif; margin: 3em">'
            f'<p id="vox-loading">VoxCPM2 demo loading… ({html.escape(phase)})</p>'
            f'<p style="color: #666">This page reloads itself until the model is ready.</p></body></html>')
