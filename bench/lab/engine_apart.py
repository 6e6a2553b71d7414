"""The engine in a process of its own, behind a bare front: what a served burst's first audio is
when the engine's thread shares no interpreter with the event loop.

A question for the redesign docs/benchmarks.md names ("A served burst step by step"): the app's
event loop, its intake threads and the GPU's thread share one GIL, and a burst's first audio waits on
it. Before the serving layer is cut in two, this measures what the cut can give at best: a child
process runs the engine alone (start, step, nothing else), and the parent is the stream route and
nothing else, an ASGI app under uvicorn like the app's (the design body of bench.http_load; the
framed stream's metadata, audio and status frames), the two joined by pipes, one message per step
with every stream's new samples. No checks, no limits, no page, no live text: the floor of a split,
as bench/floor.py is the floor of HTTP. `--thread` runs the same engine loop on a thread of the
front's process instead, over the same pipes: the same bare front sharing one interpreter, so that
the split's own share is told apart from the app's front-door work. `bench.serve --apart` runs its
loads against the app, the engine apart and the engine on a thread, in turns.

    python -m bench.lab.engine_apart --checkpoint DIR --port 7870      # then bench.serve --url
    python -m bench.serve --apart --checkpoint DIR --clients 4         # all three at once
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import multiprocessing
import threading
import time

import numpy as np

from bench.http_load import frame


def engine_process(checkpoint: str, device: str | None, rows: int, requests, results):
    """The child: the engine alone. Takes each (id, body, arrival) and each (id,) to cancel from
    `requests` between steps (waiting only while nothing runs), starts the waiting ones, oldest
    first, as rows free up (as the app's line does), and sends one list a step on `results`: (id,
    samples as int16 bytes or None at its end, what it is told: {"error"} or the server's timings)."""
    import torch

    from inference import Engine, SynthesisRequest
    from inference.serving import gc_pauses

    engine = Engine.from_pretrained(checkpoint, device=device, max_streams=rows)
    gc_pauses.settle()  # as app.py does once its engine is warm: no full collection mid-stream
    results.send("ready")
    line: collections.OrderedDict = collections.OrderedDict()  # id -> (body, arrival): waiting for a row
    live: dict = {}  # stream -> [id, arrived, started, first chunk's time]
    by_id: dict = {}  # id -> stream, for a cancel
    with torch.inference_mode():
        while True:
            while requests.poll(0 if live or line else None):
                message = requests.recv()
                if message is None:
                    return
                if len(message) == 3:
                    line[message[0]] = message[1:]
                elif line.pop(message[0], None) is None and message[0] in by_id:  # its client has gone
                    by_id[message[0]].cancel()  # retired at the next step, which reports its end
            while line and engine.free_rows:
                rid, (body, arrived) = line.popitem(last=False)
                fields = {k: body[k] for k in ("text", "control", "seed", "min_len", "max_len",
                                               "inference_timesteps", "cfg_value") if k in body}
                try:
                    stream = engine.start(SynthesisRequest(**fields))
                    live[stream], by_id[rid] = [rid, arrived, time.perf_counter(), None], stream
                except Exception as exc:  # noqa: BLE001 (a refused request: told, the rest go on)
                    results.send([(rid, None, {"error": str(exc)})])
            if live:
                sent = step(engine, live, by_id)
                if sent:
                    results.send(sent)


def step(engine, live: dict, by_id: dict) -> list:
    """One engine step's message: each stream's new samples, and the end of those that ended."""
    out = []
    for stream, chunks in engine.step():
        mine = live[stream]
        for chunk in chunks:
            mine[3] = mine[3] or time.perf_counter()
            # The wire's int16, rounded as the app's ui/services/audio.to_pcm rounds it (bench/ does
            # not import the app; tests/http/test_engine_apart.py holds the two to the same samples).
            pcm = np.clip(np.rint(chunk.audio * 32767.0), -32768, 32767).astype("<i2").tobytes()
            out.append((mine[0], pcm, None))
        if stream.done:
            rid, arrived, started, first = live.pop(stream)
            by_id.pop(rid, None)
            out.append((rid, None, {"queue_s": started - arrived,
                                    "ttfp_s": None if first is None else first - started}))
    return out


class Front:
    """The parent's ASGI app: POST (any path) streams a design request's audio as frames; GET answers
    200 once the engine is ready (bench.serve.wait_ready's /voxcpm/health)."""

    def __init__(self, checkpoint: str, device: str | None, rows: int, thread: bool = False):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: CUDA is not forked
        self.requests, child_requests = context.Pipe(duplex=False)[::-1]
        child_results, self.results = context.Pipe(duplex=False)[::-1]
        args = (checkpoint, device, rows, child_requests, child_results)
        if thread:  # the same loop, sharing this process's interpreter with the event loop
            self.child = threading.Thread(target=engine_process, args=args, daemon=True)
        else:
            self.child = context.Process(target=engine_process, args=args, daemon=True)
        self.child.start()
        self.ready, self.ids, self.waiting = False, itertools.count(), {}
        self.loop: asyncio.AbstractEventLoop | None = None

    def _read(self):
        """On a thread of its own: each step's message, handed to the loop in one call."""
        assert self.results.recv() == "ready"
        self.ready = True
        while True:
            try:
                message = self.results.recv()
            except EOFError:
                return
            self.loop.call_soon_threadsafe(self._dispatch, message)

    def _dispatch(self, message):
        for rid, pcm, told in message:
            queue = self.waiting.get(rid)
            if queue is not None:
                queue.put_nowait((pcm, told))

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                self.loop = asyncio.get_running_loop()
                threading.Thread(target=self._read, daemon=True).start()
                await send({"type": "lifespan.startup.complete"})
            self.requests.send(None)
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] != "POST":
            status = 200 if self.ready else 503
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b'{"ok":true}' if self.ready else b""})
            return
        await self._stream(json.loads(body), receive, send)

    async def _stream(self, body: dict, receive, send):
        rid, queue, entered = next(self.ids), asyncio.Queue(), time.perf_counter()
        self.waiting[rid] = queue
        self.requests.send((rid, body, entered))
        # Once the body is in, the next receive says the client has gone: its stream is cancelled,
        # as the app cancels a job whose client leaves (a share of bench.serve's Poisson clients do).
        gone = asyncio.ensure_future(receive())
        gone.add_done_callback(lambda _: queue.put_nowait((None, {"gone": True})))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/vnd.voxcpm.frames")]})
        offset = 0
        try:
            while True:
                pcm, told = await queue.get()
                if pcm is None and told.get("gone"):
                    self.requests.send((rid,))
                    return
                if pcm is None:
                    status = {"state": "failed" if "error" in told else "done", **told}
                    await send({"type": "http.response.body", "body": frame("S", status)})
                    return
                samples = len(pcm) // 2
                meta = {"offset": offset, "samples": samples, "server_ms": 0.0, "sent_ms": 0.0}
                offset += samples
                await send({"type": "http.response.body", "body": frame("M", meta) + frame("A", pcm),
                            "more_body": True})
        finally:
            gone.cancel()
            self.waiting.pop(rid, None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--port", type=int, default=7870)
    ap.add_argument("--device", default=None, help="default: CUDA when present")
    ap.add_argument("--max-streams", type=int, default=128)
    ap.add_argument("--thread", action="store_true", help="the engine on a thread of this process, not apart")
    args = ap.parse_args(argv)
    import uvicorn

    uvicorn.run(Front(args.checkpoint, args.device, args.max_streams, args.thread), host="127.0.0.1",
                port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
