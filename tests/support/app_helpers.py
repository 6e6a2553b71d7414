"""Shared by the web-app tests: the tiny random model, and the app served on a free loopback port."""
from __future__ import annotations

import contextlib
import functools
import socket
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np
import uvicorn

from inference import Engine, SynthesisRequest
from inference.runtime import offline
from inference.model.tiny_checkpoint import write_tiny_checkpoint

SAMPLE_RATE = 48000
CHROMIUM = "/usr/bin/chromium"
BROWSER_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--autoplay-policy=no-user-gesture-required", "--use-fake-ui-for-media-stream",
                 "--use-fake-device-for-media-stream"]


@functools.lru_cache(maxsize=1)
def tiny_checkpoint() -> str:
    path = tempfile.mkdtemp(prefix="voxcpm2-tiny-test-")
    write_tiny_checkpoint(path, seed=0)
    return path


def load_engine(warmup: bool = False, **limits) -> Engine:
    """The tiny model on the CPU. Without its warm-up unless asked: on the CPU there are no graphs to
    capture or kernels to compile, so it only runs four short requests, 1.5-15 s of every module
    that serves the app (tests/http/test_metrics_ready.py and tests/unit/test_worker.py test it)."""
    return Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", warmup=warmup, **limits)


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
    """The whole app (routes, player files, Gradio page) on 127.0.0.1, in a background thread.
    Without an engine, one is loaded from the settings' limits, as app.py loads it; an engine given
    keeps its own (create_app serves them, and logs the settings' that differ)."""
    from ui import Settings, create_app
    from ui.guard.connections import server_config

    settings = settings or Settings()
    app, worker = create_app(engine or load_engine(**settings.limits.engine_options()), settings)
    port = free_port()
    server = uvicorn.Server(server_config(app, app.state.ctx.settings, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the app did not start")
        time.sleep(0.05)
    return RunningApp(f"http://127.0.0.1:{port}", app, worker, server, thread)


def wait_healthy(base: str, proc, timeout: float = 120.0):
    """Until app.py (a subprocess) answers its health probe: 503 while it loads, 200 once ready."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"app.py exited early:\n{out}")
        try:
            if httpx.get(f"{base}/voxcpm/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("app.py did not become healthy in time")


# How long an analysis job may wait for a model being loaded, in an app served for tests that need
# the model: on a busy machine (tests beside others' on two cores) Whisper's load outlasts the
# app's 10 s, and the job would hear "still being loaded". The job's wait ends when the load does.
MODEL_LOAD_WAIT_S = 600.0


def recognizer_loaded(app: RunningApp):
    """Returns once the app's analysis process holds its recognizer, which it loads on first use:
    the process itself is asked for a short silence's transcript, a job that waits on the model's
    load. Raises the process's ModelUnavailable when the model cannot be loaded, or is still being
    loaded after the app's load_wait_s (serve the app with MODEL_LOAD_WAIT_S)."""
    app.app.state.ctx.analysis.transcribe(16000, np.zeros(1600, np.float32)).result()


@contextlib.contextmanager
def state_swapped(ctx, name: str, value):
    """Sets one field of the app's context (`app.state.ctx`, ui/context.AppContext) for a block and
    puts the old one back, however the block ends."""
    old = getattr(ctx, name)
    setattr(ctx, name, value)
    try:
        yield value
    finally:
        setattr(ctx, name, old)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out waiting for a condition")


def resources(app: RunningApp | None = None) -> dict:
    """What a leak would make grow, in this process (the server runs in it): resident and
    Python-traced memory, live torch tensors, open files and sockets, threads, and what the app
    holds on to (listed jobs, stored clips)."""
    import gc
    import os
    import tracemalloc

    import torch

    gc.collect()
    tensors = [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]  # type(): no proxy warnings
    out = {
        "rss_mb": _rss_mb(),
        "traced_mb": tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else None,
        "tensors": len(tensors),
        "tensor_mb": sum(t.nelement() * t.element_size() for t in tensors) / 2**20,
        "open_fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
    }
    if torch.cuda.is_available():
        out["cuda_mb"] = torch.cuda.memory_allocated() / 2**20
    if app is not None:
        out["jobs"] = len(app.worker._jobs)
        out["clips"] = len(app.app.state.ctx.clips)
    return out


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def record_figure(line: str):
    """Figures the robustness tests measured, for the CI log and tests/artifacts/robust-figures.txt."""
    from pathlib import Path

    artifacts = Path(__file__).resolve().parents[1] / "artifacts"
    artifacts.mkdir(exist_ok=True)
    with open(artifacts / "robust-figures.txt", "a", encoding="utf-8") as out:
        out.write(line.rstrip() + "\n")
    print(line)


def set_max_len(page, patches: int):
    """Open the advanced settings and set the maximum length in the page (Playwright page)."""
    box = page.locator("#vox-max-len input[type=number]")
    if not box.is_visible():  # the accordion toggles: open it only when closed
        page.get_by_text("Advanced settings").click()
    box.wait_for()
    # Gradio may still be rendering the accordion's content: retry until the slider holds the value.
    for _ in range(20):
        box.fill(str(patches))
        box.press("Enter")
        page.wait_for_timeout(250)
        if page.evaluate("document.querySelector('#vox-max-len input[type=range]').value") == str(patches):
            return
    raise AssertionError("could not set the maximum length")


def decode_whole(engine: Engine, latents: np.ndarray, context=None, pauses=()) -> np.ndarray:
    """The offline reference decode (inference/runtime/offline.py) of [n, D, P] latents on the engine's VAE."""
    return offline.decode_whole(engine.vae, latents, context, engine.runner.step.dtype, engine.device, pauses)


def first_prompt(engine: Engine, req: SynthesisRequest):
    """The prompt of the request's first segment, as the engine would prefill it."""
    return engine.preparer.plan(req).start.prompt


def step_into(engine, got: dict) -> list:
    """One engine step; the chunks it returned appended to got[stream] (a stream's list starts
    with its first chunks or its end). Returns what the step returned."""
    produced = engine.step()
    for stream, chunks in produced:
        got.setdefault(stream, []).extend(chunks)
    return produced


def run_to_end(engine: Engine, req: SynthesisRequest):
    """(released chunks, the stream) of one request on an engine, stepped to its end."""
    stream, got = engine.start(req), {}
    while not stream.done:
        step_into(engine, got)
    assert stream.error is None, stream.error
    return got.get(stream, []), stream


class FakeDeviceTime:
    """The scheduler's clock for an engine on the CPU, moved by its work alone: each launched patch
    takes `step_s` (settable as a test goes), each prefill `join_s` per joining stream. `prefilled`
    lists each prefill's rows, in order."""

    def __init__(self, step_s: float, join_s: float = 0.0, now: float = 100.0):
        self.step_s, self.join_s, self.now = step_s, join_s, now
        self.prefilled: list[list[int]] = []

    def __call__(self) -> float:
        return self.now


def on_fake_device_time(engine: Engine, monkeypatch, step_s: float, join_s: float = 0.0) -> FakeDeviceTime:
    """Gives the engine a scheduler that reads a FakeDeviceTime, and times its runner's prefills and
    launches on it."""
    from inference.runtime.scheduler import Scheduler

    clock, runner = FakeDeviceTime(step_s, join_s), engine.runner
    engine.scheduler = Scheduler(runner, engine.rows, clock)
    admit, launch = runner.admit, runner.launch

    def timed_admit(joins):
        clock.now += clock.join_s * len(joins)
        clock.prefilled.append([j.row for j in joins])
        admit(joins)

    def timed_launch(*args):
        clock.now += clock.step_s
        launch(*args)
    monkeypatch.setattr(runner, "admit", timed_admit)
    monkeypatch.setattr(runner, "launch", timed_launch)
    return clock
