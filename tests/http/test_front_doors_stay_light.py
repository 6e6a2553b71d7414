"""The front doors stay as light as issue 56 made them, counted as a request runs through the app
served over HTTP on the tiny model (tests/support/request_path.py says how each is counted): a
test fails when one grows back.

Before the redesign (47a1c5e, counted the same way): 13 hops from route to engine on 3 threads
(16 from /v1/audio/speech);
checks in 2 places (the door's schema, the engine's preparer: 4 functions), as now; one stream's
state in 7 objects (Job, JobMetrics, Running, Listener, Output, Stream, Continuation); three loops
that read a job's audio (ui/http/stream.sent_audio, openai.encoded, utterance.send_audio).
"""
from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest

from ..support.app_helpers import serve
from ..support.request_path import Holders, Tracer

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Counting the hops of one request."


@pytest.fixture(scope="module")
def traced():
    tracer = Tracer()
    tracer.install()  # before the app's threads start, so each has the hook
    try:
        running = serve()
        try:
            yield running, tracer
        finally:
            running.stop()
    finally:
        tracer.uninstall()


# The OpenAI door's body has fields of its own to check before a request is built (model, format,
# rate, max_len's alias max_new_tokens): its schema checks them as it reads the body, as the page's
# does its own, so both doors are held to the same bound (11 hops when they were checked apart).
@pytest.mark.parametrize("route, body", [
    ("/voxcpm/stream", {"text": TEXT, "seed": 1, "max_len": 4}),
    ("/v1/audio/speech", {"model": "tts-1", "input": TEXT, "voice": "design", "instructions": "A calm voice.",
                          "response_format": "wav", "sample_rate": 24000, "seed": 1, "max_len": 4}),
], ids=["page", "openai"])
def test_a_request_reaches_the_engine_in_at_most_8_hops_checked_in_at_most_3(traced, route, body):
    running, tracer = traced
    tracer.follow(TEXT)
    with httpx.Client(base_url=running.url, timeout=120) as client:
        answer = client.post(route, json=body)
    assert answer.status_code == 200 and tracer.reached.is_set()
    path = tracer.path
    print("hops:", *path.hops, "checks:", *path.checks, f"threads: {len(path.threads)}", sep="\n  ")
    assert len(path.hops) <= 8, path.hops
    assert len(path.checks) <= 3, path.checks
    assert len(path.threads) <= 3


def test_one_stream_is_held_by_at_most_4_objects(traced):
    running, tracer = traced
    tracer.follow(None)  # not following hops: the hook stays cheap
    holders = Holders()
    holders.before()
    body = {"text": "A stream long enough to look at twice while it plays.", "seed": 2, "max_len": 300,
            "min_len": 300}
    with httpx.Client(base_url=running.url, timeout=120) as client:
        with client.stream("POST", "/voxcpm/stream?format=frames", json=body) as answer:
            assert answer.status_code == 200
            parts = answer.iter_raw(4096)
            next(parts)
            holders.first()
            for _ in range(8):
                next(parts)
            changed, owners = holders.second()
    print("objects changing:", *changed, "holders (owners):", *owners, sep="\n  ")
    assert 0 < len(changed) <= 4, changed


def test_one_function_reads_a_jobs_audio_for_every_door():
    """Only ui/http/listen.py takes events from a job's channel (and the intake its first one)."""
    readers = set()
    for path in (ROOT / "ui").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for call in ast.walk(node):
                    name = getattr(getattr(call, "func", None), "attr", None) or getattr(getattr(call, "func", None), "id", None)
                    if isinstance(call, ast.Call) and name in ("next_event", "poll"):
                        readers.add(f"{path.relative_to(ROOT)}:{node.name}")
    # Waiting.next polls the job for heard() and next_event(); the intake waits for its first event
    assert readers == {"ui/http/listen.py:next", "ui/http/common.py:first_audio"}, readers
    stretched = {str(p.relative_to(ROOT)) for p in (ROOT / "ui").rglob("*.py") if "job.listener.output(" in p.read_text()}
    assert stretched == {"ui/http/listen.py"}, "a job's audio is made heard in one place"


def test_the_streaming_doors_skip_fastapis_router(traced, monkeypatch):
    """ui/server.DoorLane: POST /voxcpm/stream and POST /v1/audio/speech reach their handlers from
    the guards without passing a Starlette/FastAPI router (the per-request cost it removes), their
    errors still answered by the doors themselves; every other route, and the doors' paths under
    another method, still go through FastAPI. The guards outside the lane are held to refusing the
    doors' requests by test_access_token.py and test_foreign_hosts_and_origins_are_refused.py."""
    from starlette.routing import Router

    running, _ = traced
    routed = []
    through = Router.__call__

    async def recording(self, scope, receive, send):
        routed.append((scope.get("method"), scope["path"]))
        await through(self, scope, receive, send)
    monkeypatch.setattr(Router, "__call__", recording)
    with httpx.Client(base_url=running.url, timeout=120) as client:
        for route, body in (("/voxcpm/stream", {"text": TEXT, "seed": 1, "max_len": 4}),
                            ("/v1/audio/speech", {"model": "tts-1", "input": TEXT, "voice": "design",
                                                  "response_format": "pcm", "seed": 1, "max_len": 4})):
            answer = client.post(route, json=body)
            assert answer.status_code == 200 and len(answer.content) > 0, answer.text
            assert client.post(route, content=b"{not json", headers={"content-type": "application/json"}).status_code == 400
        assert routed == [], routed
        assert client.get("/voxcpm/health").status_code == 200
        # another method goes on to FastAPI, whose router hands it to the page mounted at / (its 404)
        assert client.get("/voxcpm/stream").status_code == 404
        assert ("GET", "/voxcpm/health") in routed and ("GET", "/voxcpm/stream") in routed
