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
import pytest
import uvicorn
from fastapi import FastAPI

from inference import SynthesisRequest
from inference.config import LIMITS
from inference.serving.worker import EngineWorker
from ui import AppContext, Settings
from ui.services.metrics import Metrics
from ui.http.listen import ClientWatch, next_event
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
    # When each waiting route held a thread for 50 ms at a time, the running streams' every
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


def serve_app(app: FastAPI, http: str = "auto") -> tuple[str, uvicorn.Server, threading.Thread]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http=http))
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


@pytest.mark.parametrize("http", ["httptools", "h11"])  # each parser's receive() says the client went
def test_a_client_that_goes_cancels_its_job_before_and_after_its_first_audio(http):
    engine = QuietEngine(rows=4)
    app = stream_app(engine, max_queue=4)
    address, server, thread = serve_app(app, http)
    worker = app.state.ctx.worker
    try:
        # Before any audio: the route's watch on the connection ends its wait.
        quiet = raw_post(address, body(1, 50, text="Quiet"))
        job = wait_until(lambda: worker.get("request-1"), timeout=10)
        wait_until(lambda: job.state == "running", timeout=10)
        quiet.close()
        assert wait_until(lambda: job.state == "cancelled", timeout=10), job.state
        # While its audio streams: the watch ends the body, which stops the job.
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


class Connection:
    """An ASGI receive() past the body, as uvicorn's: it waits until the client goes, then says so."""

    def __init__(self):
        self.closed = asyncio.Event()
        self.received = 0

    async def receive(self) -> dict:
        self.received += 1
        await self.closed.wait()
        return {"type": "http.disconnect"}


def test_a_wait_for_first_audio_ends_when_its_client_goes_with_one_wait_on_the_connection():
    engine = StandInEngine(rows=1)
    engine.gate.clear()  # the job runs and makes nothing: only the client's going ends the wait
    worker = EngineWorker(engine)
    try:
        job = worker.submit(SynthesisRequest("Hello there.", seed=1, max_len=5))
        wait_until(lambda: job.state == "running", timeout=10)

        async def wait_then_go():
            connection = Connection()
            watch = ClientWatch(connection.receive)
            watch.start()
            waiting = asyncio.ensure_future(next_event(job, watch))
            await asyncio.sleep(0.3)
            assert not waiting.done()  # nothing made, client still there: it waits
            connection.closed.set()
            event = await asyncio.wait_for(waiting, timeout=5)
            watch.close()
            return event, connection.received
        event, received = asyncio.run(wait_then_go())
        assert event is None
        assert received == 1  # one wait on the connection, not a look every few milliseconds
        assert job.cancelled  # the engine, held at its gate, stops it at its next patch
    finally:
        engine.gate.set()
        worker.close()
