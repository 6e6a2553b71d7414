"""Issue 9, item 5: DNS rebinding and cross-origin writes, over real HTTP on 127.0.0.1. Bound to
loopback, the app answers only loopback host names and --allowed-hosts; a write whose Origin is
another site is refused whatever the Host; the page's own requests still work."""
from __future__ import annotations

import json

import pytest

from app import parse_args
from ui.guard.hosts import allowed_hosts_for

TEXT = "Hello world, this is a test."
BODY = json.dumps({"text": TEXT, "seed": 1, "max_len": 2})


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(allowed_hosts=allowed_hosts_for("127.0.0.1", ["demo.test"]))



def port(app) -> int:
    return int(app.url.rsplit(":", 1)[1])


def test_a_rebinding_page_cannot_stream(app, client):
    jobs = len(app.worker._jobs)
    # What a page on attacker.example sends once its name resolves to 127.0.0.1: no preflight needed.
    response = client.post("/voxcpm/stream", content=BODY, headers={
        "Host": f"attacker.example:{port(app)}", "Origin": f"http://attacker.example:{port(app)}",
        "Content-Type": "text/plain"})
    assert response.status_code == 403 and "host names" in response.json()["error"]
    assert "--allowed-hosts" in response.json()["error"]
    assert len(app.worker._jobs) == jobs  # nothing was queued
    for path in ("/", "/config", "/voxcpm/health"):  # nor can it read the page or the API
        assert client.get(path, headers={"Host": "attacker.example"}).status_code == 403


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]", "demo.test"])
def test_loopback_names_and_allowed_hosts_are_answered(app, client, host):
    response = client.post("/voxcpm/stream", content=BODY, headers={"Host": f"{host}:{port(app)}"})
    assert response.status_code == 200 and len(response.content) > 0


@pytest.mark.parametrize("origin", ["http://attacker.example", "null", "http://127.0.0.1:1", "https://localhost"])
def test_cross_origin_writes_are_refused(app, client, origin):
    headers = {"Origin": origin, "Content-Type": "text/plain"}
    for path, content in (("/voxcpm/stream", BODY), ("/voxcpm/upload", b"RIFF"), ("/voxcpm/jobs/x/cancel", b""),
                          ("/gradio_api/queue/join", b"{}")):
        response = client.post(path, content=content, headers=headers)
        assert response.status_code == 403, (path, response.status_code)
        assert "another site" in response.json()["error"]


def test_same_origin_writes_and_foreign_reads_are_served(app, client):
    own = client.post("/voxcpm/stream", content=BODY, headers={"Origin": app.url, "Content-Type": "text/plain"})
    assert own.status_code == 200
    # A cross-origin GET cannot be read by the other page (no CORS headers) and changes nothing.
    assert client.get("/voxcpm/health", headers={"Origin": "http://attacker.example"}).status_code == 200


def test_the_command_line_decides_the_host_names():
    assert allowed_hosts_for("127.0.0.1") == ["localhost", "127.0.0.1", "::1"]
    assert allowed_hosts_for("127.0.0.1", ["Demo.Example.", " "]) == ["localhost", "127.0.0.1", "::1", "demo.example"]
    assert allowed_hosts_for("0.0.0.0") is None  # a Space's proxy: any name
    assert allowed_hosts_for("0.0.0.0", ["space.example"]) == ["space.example"]
    assert parse_args(["--allowed-hosts", "a.example,b.example"]).allowed_hosts == "a.example,b.example"
