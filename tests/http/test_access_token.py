"""The access token (ui/guard/auth.py) over real HTTP: without it nothing but the health probe answers;
the header, a bearer token or the cookie set by /?token= let a client in; streaming and cancel on
disconnect still work behind it."""
from __future__ import annotations

import httpx
import pytest

from ui.guard.auth import COOKIE, TokenGate

from ..support.app_helpers import pcm_of, wait_until

TOKEN = "test-token-0123456789"
TEXT = "Hello world, this is a test."
GUARDED = [("GET", "/"), ("GET", "/config"), ("GET", "/gradio_api/info"), ("GET", "/voxcpm/static/app.js"),
           ("GET", "/voxcpm/jobs/some-job-id"), ("POST", "/voxcpm/stream"), ("POST", "/voxcpm/upload"),
           ("POST", "/voxcpm/transcribe"),
           ("POST", "/gradio_api/upload"), ("POST", "/gradio_api/queue/join")]


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(token=TOKEN)


def client(app, **kwargs) -> httpx.Client:
    return httpx.Client(base_url=app.url, timeout=60, follow_redirects=False, **kwargs)


@pytest.mark.parametrize("method, path", GUARDED)
def test_nothing_answers_without_the_token(app, method, path):
    wrong = [{}, {"headers": {"X-VoxCPM-Token": "wrong-token-0000"}},
             {"headers": {"Authorization": f"Bearer {TOKEN}x"}}, {"cookies": {COOKIE: TOKEN[:-1]}}]
    for kwargs in wrong:
        with client(app, **kwargs) as c:
            response = c.request(method, path, json={"text": TEXT} if method == "POST" else None)
        assert response.status_code == 401, (kwargs, response.status_code)
        assert TOKEN not in response.text


def test_refusals_say_what_to_do(app):
    with client(app) as c:
        page = c.get("/", headers={"Accept": "text/html"})
        api = c.post("/voxcpm/stream", json={"text": TEXT})
        assert c.get("/voxcpm/health").json()["ok"] is True  # probes need no token
    assert page.headers["content-type"].startswith("text/html") and "?token=" in page.text
    assert api.headers["content-type"] == "application/json" and "X-VoxCPM-Token" in api.json()["error"]


@pytest.mark.parametrize("auth", [{"X-VoxCPM-Token": TOKEN}, {"Authorization": f"Bearer {TOKEN}"}])
def test_a_header_lets_a_client_stream(app, auth):
    with client(app, headers=auth) as c:
        response = c.post("/voxcpm/stream", json={"text": TEXT, "seed": 1, "max_len": 2})
        assert response.status_code == 200 and pcm_of(response.content).size > 0
        assert c.get("/config").status_code == 200


def test_the_token_link_sets_a_cookie_and_drops_the_token_from_the_url(app):
    with client(app) as c:
        assert c.get("/?token=wrong-token-0000").status_code == 401
        login = c.get(f"/?token={TOKEN}&__theme=dark")
        assert login.status_code == 303 and login.headers["location"] == "/?__theme=dark"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        page = c.get("/")  # the client now holds the cookie
        assert page.status_code == 200 and "voxcpm/static/app.js" in page.text
        assert c.post("/voxcpm/stream", json={"text": TEXT, "seed": 2, "max_len": 2}).status_code == 200


def test_disconnect_still_cancels_behind_the_gate(app):
    body = {"text": TEXT, "seed": 3, "min_len": 300, "max_len": 300, "request_id": "token-disconnect"}
    with client(app, headers={"X-VoxCPM-Token": TOKEN}) as c:
        with c.stream("POST", "/voxcpm/stream", json=body) as response:
            assert response.status_code == 200
            next(response.iter_bytes())  # the first patch arrives as it is made, not buffered
    job = app.worker.get("token-disconnect")
    wait_until(lambda: job.state == "cancelled" and not app.worker.busy, timeout=30)
    assert job.patches < 300


@pytest.mark.parametrize("token", ["", "short", "has spaces in it", "semi;colon;token", "x" * 300])
def test_weak_or_unsafe_tokens_are_refused(token):
    with pytest.raises(ValueError):
        TokenGate(None, token)


@pytest.mark.parametrize("path, location", [
    ("//evil.example/", "/evil.example/"),
    ("/%2F%2Fevil.example/", "/evil.example/"),
    ("/%5Cevil.example/", "/evil.example/"),
    ("/%0D%0ASet-Cookie:%20x=1", "/%0D%0ASet-Cookie:%20x=1"),
])
def test_the_token_link_redirects_only_to_this_site(app, path, location):
    """Issue 9, item 8: a protocol-relative path (//host) in the token link was an open redirect."""
    with client(app) as c:
        login = c.get(f"{app.url}{path}?token={TOKEN}")  # the full URL: httpx would read //host as a host
    assert login.status_code == 303
    assert login.headers["location"] == location
    assert "set-cookie" in login.headers and "x=1" not in login.headers["set-cookie"]


@pytest.mark.parametrize("path, body", [("/voxcpm/stream", {"text": TEXT}),
                                        ("/v1/audio/speech", {"model": "voxcpm2", "input": TEXT, "voice": "alloy"})])
def test_a_wrong_token_and_a_missing_one_get_different_answers_in_each_doors_shape(app, path, body):
    """Issue 60: a wrong token heard that a token is needed, and /v1's OpenAI clients were told to send
    X-VoxCPM-Token rather than the key they send as Authorization: Bearer."""
    openai = path.startswith("/v1")
    sent = {"Authorization": "Bearer wrong-token-0000"} if openai else {"X-VoxCPM-Token": "wrong-token-0000"}
    with client(app) as c:
        missing, wrong = c.post(path, json=body), c.post(path, json=body, headers=sent)
    assert missing.status_code == wrong.status_code == 401
    said = [r.json()["error"]["message"] if openai else r.json()["error"] for r in (missing, wrong)]
    assert "needs an access token" in said[0] and "not this server's" in said[1]
    if openai:
        assert "Authorization: Bearer" in said[0] and "X-VoxCPM-Token" not in said[0]
        assert missing.json()["error"]["type"] == wrong.json()["error"]["type"] == "authentication_error"
    else:
        assert "X-VoxCPM-Token" in said[0]
