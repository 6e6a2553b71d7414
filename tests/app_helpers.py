"""Shared by the web-app tests: the tiny random model, and the app served on a free loopback port."""
from __future__ import annotations

import functools
import socket
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np
import uvicorn

from inference import Engine, SynthesisRequest
from inference.tiny import write_tiny_checkpoint

SAMPLE_RATE = 48000


@functools.lru_cache(maxsize=1)
def tiny_checkpoint() -> str:
    path = tempfile.mkdtemp(prefix="voxcpm2-tiny-test-")
    write_tiny_checkpoint(path, seed=0)
    return path


def load_engine() -> Engine:
    return Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32")


@functools.lru_cache(maxsize=1)
def reference_engine() -> Engine:
    """A second engine on the same weights, used only by the test thread to compute expected audio
    (the app's engine belongs to its worker thread)."""
    return load_engine()


def expected_pcm(request: SynthesisRequest) -> np.ndarray:
    audio = reference_engine().synthesize(request)
    return np.clip(np.rint(audio * 32767.0), -32768, 32767).astype(np.int16)


def pcm_of(data: bytes) -> np.ndarray:
    assert len(data) % 2 == 0, "the stream must hold whole int16 samples"
    return np.frombuffer(data, dtype="<i2").astype(np.int16)


def assert_same_audio(got: np.ndarray, want: np.ndarray):
    assert got.shape == want.shape, f"{got.shape[0]} samples streamed, {want.shape[0]} synthesized"
    worst = int(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32)))) if got.size else 0
    assert worst <= 1, f"streamed audio differs from synthesize() by up to {worst} LSB"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningApp:
    url: str
    app: object
    worker: object
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(settings=None, engine: Engine | None = None) -> RunningApp:
    """The whole app (routes, player files, Gradio page) on 127.0.0.1, in a background thread."""
    from ui import create_app

    app, worker = create_app(engine or load_engine(), settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the app did not start")
        time.sleep(0.05)
    return RunningApp(f"http://127.0.0.1:{port}", app, worker, server, thread)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out waiting for a condition")
