"""The HTTP routes wait for a job's audio on the event loop itself (Job.watch): a waiting stream
holds no thread, so dozens of them never queue for anyio's thread limiter, and a client that goes
still cancels its job. On the stand-in engine (tests/fixtures/engines.py), through the ASGI app."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import anyio
import httpx
import uvicorn
from fastapi import FastAPI

from inference import SynthesisRequest
from inference.config import LIMITS
from inference.serving.worker import EngineWorker
from ui import AppContext, Settings
from ui.services.metrics import Metrics
from ui.http.listen import next_event
from ui.http.stream import stream_router

from ..support.app_helpers import free_port, wait_until
from ..fixtures.engines import StandInEngine

PATCH_BYTES = 480 * 2  # one stand-in patch as int16


class QuietEngine(StandInEngine):
    """The stand-in, except that a stream whose text starts with "Quiet" makes no patch: its
    consumer waits as long as the test wants."""

    def step(self) -> list:
        quiet = [s for s in self.live if s.plan.report.segments[0].startswith("Quiet")]
        self.live = [s for s in self.live if s not in quiet]
        try:
            produced = super().step()
        finally:
            self.live += [s for s in quiet if s not in self.live]
        time.sleep(0.002)  # a paced engine: the worker's loop does not spin
        return produced


def stream_app(engine, max_queue: int) -> FastAPI:
    """Only the stream route, on a worker of the stand-in (no Gradio page, no clip store)."""
    app = FastAPI()
    app.include_router(stream_router, prefix="/voxcpm")
    worker = EngineWorker(engine, max_queue=max_queue)
    app.state.ctx = AppContext(settings=Settings(), worker=worker, limits=LIMITS, clips=None, latents=None,
                               renders=None, metrics=Metrics(worker), analysis=None, voices=None, voice_lookup=None,
                               encoder_identity="stand-in")
    return app


def body(i: int, patches: int, text: str = "Request") -> dict:
    return {"text": f"{text} {i}.", "seed": i, "max_len": patches, "min_len": patches, "request_id": f"request-{i}"}


async def burst_beside_quiet(app: FastAPI, quiet: int, n: int, patches: int) -> list[float]:
    """`quiet` streams that make no audio yet, then n streams at once, with anyio's thread limiter
    down to one token: each of the n's seconds to its end."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = 1
    worker = app.state.ctx.worker

    async def one(client, i, text="Request"):
        start = time.perf_counter()
        response = await client.post("/voxcpm/stream", json=body(i, patches, text))
        assert response.status_code == 200, response.text
        assert len(response.content) == patches * PATCH_BYTES
        return time.perf_counter() - start
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as client:
        waiting = [asyncio.create_task(one(client, n + i, "Quiet")) for i in range(quiet)]
        while worker.running < quiet:
            await asyncio.sleep(0.01)
        try:
            return await asyncio.gather(*(one(client, i) for i in range(n)))
        finally:
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)


def test_many_waiting_streams_take_no_thread_each():
    # 48 streams wait for their first audio (a busy engine, a long prompt) while 48 others run.
    # When each waiting route held a thread for POLL_S at a time, the running streams' every
    # patch queued behind them for the one token: about 48 x 50 ms a patch, twenty seconds in
    # all. Waiting on the loop, the 48 take well under one.
    engine = QuietEngine(rows=96)
    app = stream_app(engine, max_queue=0)
    try:
        took = asyncio.run(asyncio.wait_for(burst_beside_quiet(app, 48, 48, patches=8), timeout=120))
    finally:
        app.state.ctx.worker.close()
    assert len(took) == 48
    assert max(took) < 5.0, f"48 streams of 8 patches beside 48 waiting ones: the slowest took {max(took):.1f} s"


def serve_app(app: FastAPI) -> tuple[str, uvicorn.Server, threading.Thread]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=30)
    return f"127.0.0.1:{port}", server, thread


def raw_post(address: str, payload: dict) -> socket.socket:
    data = json.dumps(payload).encode()
    host, port = address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /voxcpm/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


def test_a_client_that_goes_cancels_its_job_before_and_after_its_first_audio():
    engine = QuietEngine(rows=4)
    app = stream_app(engine, max_queue=4)
    address, server, thread = serve_app(app)
    worker = app.state.ctx.worker
    try:
        # Before any audio: the route looks for the closed connection while it waits.
        quiet = raw_post(address, body(1, 50, text="Quiet"))
        job = wait_until(lambda: worker.get("request-1"), timeout=10)
        wait_until(lambda: job.state == "running", timeout=10)
        quiet.close()
        assert wait_until(lambda: job.state == "cancelled", timeout=10), job.state
        # While its audio streams: Starlette cancels the waiting body, which stops the job.
        loud = raw_post(address, body(2, 60000))
        assert loud.recv(4096).startswith(b"HTTP/1.1 200")
        job = worker.get("request-2")
        loud.close()
        assert wait_until(lambda: job.state == "cancelled", timeout=10), job.state
        assert job.patches < 60000
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        worker.close()


class EarlyTimerLoop(asyncio.SelectorEventLoop):
    """A loop whose timers fire up to 2 ms before loop.time() reaches them, as uvloop's do (libuv
    keeps timers on a millisecond clock; the float deadline can lie a hair past the tick)."""

    def call_at(self, when, callback, *args, context=None):
        return super().call_at(when - 0.002, callback, *args, context=context)


class GoneClient:
    """Starlette's Request, as far as the wait uses it: a client that has already gone."""

    async def is_disconnected(self) -> bool:
        return True


def test_a_wait_for_first_audio_notices_a_gone_client_when_its_timer_fires_early():
    engine = StandInEngine(rows=1)
    engine.gate.clear()  # the job runs and makes nothing: only the look for a closed connection ends the wait
    worker = EngineWorker(engine)
    try:
        job = worker.submit(SynthesisRequest("Hello there.", seed=1, max_len=5))
        wait_until(lambda: job.state == "running", timeout=10)
        with asyncio.Runner(loop_factory=EarlyTimerLoop) as runner:
            event = runner.run(asyncio.wait_for(next_event(job, GoneClient()), timeout=5))
        assert event is None
        assert job.cancelled  # the engine, held at its gate, stops it at its next patch
    finally:
        engine.gate.set()
        worker.close()
