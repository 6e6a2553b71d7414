"""The server answers while the engine loads: a "loading… (phase)" page and a 503 health probe, then
the real app, whose lifespan runs when it takes over and ends with the server."""
from __future__ import annotations

import contextlib
import threading
import time

import httpx
import uvicorn
from fastapi import FastAPI

from ui.page.loading import LoadingGate, Phases
from ui.settings import DEFAULTS

from ..support.app_helpers import free_port


def test_loading_page_then_the_real_app_with_its_lifespan():
    events = []

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        events.append("started")
        yield
        events.append("stopped")

    real = FastAPI(lifespan=lifespan)
    real.get("/")(lambda: {"page": "real"})
    phases = Phases()
    gate = LoadingGate(phases, retry_s=7)  # the settings' loading_retry_s, as app.py gives it
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(gate, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        phases.begin("loading weights")
        page = _get_when_listening(f"{base}/")
        assert page.status_code == 503 and "VoxCPM2 demo loading… (loading weights)" in page.text
        assert 'http-equiv="refresh" content="7"' in page.text  # it reloads itself into the real page
        health = httpx.get(f"{base}/voxcpm/health", timeout=5)
        assert health.status_code == 503 and health.json()["loading"] == "loading weights"
        assert health.headers["retry-after"] == "7"
        stream = httpx.post(f"{base}/voxcpm/stream", json={"text": "Hi."}, timeout=5)
        assert stream.status_code == 503 and "still starting" in stream.json()["error"]
        assert events == []
        assert gate.open(real)
        assert events == ["started"]
        assert httpx.get(f"{base}/", timeout=5).json() == {"page": "real"}
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert events == ["started", "stopped"]  # the real app's shutdown (the worker's close) ran


def test_open_after_the_server_stopped_says_so():
    gate = LoadingGate(Phases(), DEFAULTS.page.loading_retry_s)
    assert gate.open(FastAPI(), timeout=0.1) is False  # never listening: nothing to hand over to


def _get_when_listening(url: str, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
