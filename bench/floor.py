"""The load generator's floor: a server that answers the stream route at once, under the same uvicorn.

A served burst's time to first audio is the client's own sending and reading, HTTP, and the app.
This ASGI app has no app in it: each POST is answered with the framed shape of one patch (a
metadata frame, 160 ms of silent audio, the final status) the moment its body is in, and GET
/voxcpm/health with 200. `python -m bench.serve --floor` runs the same loads against it, from the
same client processes, so the first audio it reports is what the load generator and HTTP take
before any server work: the part of the served figures that no change to the app can remove.
"""
from __future__ import annotations

from bench.http_load import frame  # the benchmark's one writing of the format (bench/ imports no app code)

SAMPLES = 7680  # one patch at 48 kHz


BODY = (frame("M", {"index": 0, "offset": 0, "samples": SAMPLES, "server_ms": 0.0, "sent_ms": 0.0})
        + frame("A", bytes(2 * SAMPLES)) + frame("S", {"state": "done", "outcome": "ok"}))


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):  # the whole body, as the app reads it
        pass
    body = BODY if scope["method"] == "POST" else b'{"ok":true}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/vnd.voxcpm.frames"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})
