"""Issue 9, items 6 and 2 (request bodies): every request is bounded in bytes, Gradio's upload route
in files too, and a body that never finishes is answered 408 and cut; each refusal is logged and
nothing it carried is stored. Real HTTP on 127.0.0.1, bounded in time."""
from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest
from gradio.utils import get_upload_folder

LIMIT_MB = 4


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(max_upload_mb=LIMIT_MB, body_timeout_s=1.5)



def stored(name: str) -> list[Path]:
    return list(Path(get_upload_folder()).glob(f"*/{name}"))


def files(prefix: str, count: int, size: int) -> tuple[list, list[str]]:
    names = [f"{prefix}-{uuid.uuid4().hex}-{i}.wav" for i in range(count)]
    return [("files", (name, b"\0" * size, "audio/wav")) for name in names], names


def test_six_files_under_the_file_limit_are_refused_together(client, caplog):
    caplog.set_level("WARNING", logger="voxcpm")
    parts, names = files("six", 6, int(3.8 * 2**20))  # each under the 4 MiB limit, 23 MB together
    response = client.post("/gradio_api/upload", files=parts)
    assert response.status_code == 413 and "upload is larger than the limit of 4 MiB" in response.json()["error"]
    assert not any(stored(name) for name in names)
    assert "refused POST /gradio_api/upload" in caplog.text


def test_more_files_than_allowed_are_refused_even_when_small(client):
    parts, names = files("many", 3, 1000)
    response = client.post("/gradio_api/upload", files=parts)
    assert response.status_code == 413 and "at most 1 file(s)" in response.json()["error"]
    assert not any(stored(name) for name in names)


def test_one_clip_under_the_limit_is_still_stored(client):
    parts, names = files("one", 1, int(3.8 * 2**20))
    response = client.post("/gradio_api/upload", files=parts)
    assert response.status_code == 200, response.text
    assert len(stored(names[0])) == 1


def test_a_body_without_a_declared_length_is_counted(client):
    def chunks():  # chunked transfer: no Content-Length to refuse up front
        for _ in range(6):
            yield b"x" * 2**20
    response = client.post("/gradio_api/queue/join", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and "limit of 4 MiB" in response.json()["error"]


def test_gradio_json_routes_are_bounded_too(client):
    response = client.post("/gradio_api/queue/join", content=b"[" + b"0," * 3 * 2**20 + b"0]",
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 413


def test_a_refused_body_under_v1_is_openai_shaped(client):
    """Refused by this middleware (a declared length over the limit), or by the route's own limit on
    its body (counted as it comes; an upload's size, since a clip may come in it): OpenAI's shape
    either way."""
    def chunks():
        for _ in range(6):
            yield b"x" * 2**20
    for body, limit in ((b"x" * 5 * 2**20, "4 MiB"), (chunks(), "4 MiB")):
        response = client.post("/v1/audio/speech", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error", error
        assert error["message"] == f"the request body is larger than the limit of {limit}"


@pytest.mark.parametrize("path, kind", [("/voxcpm/stream", "application/json"),
                                        ("/gradio_api/upload", "multipart/form-data; boundary=b0undary"),
                                        ("/gradio_api/queue/join", "application/json"),
                                        ("/v1/audio/speech", "application/json")])
def test_a_body_that_never_finishes_is_cut(app, caplog, path, kind):
    caplog.set_level("WARNING", logger="voxcpm")
    host, port = app.url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=8) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\n"
                     "Content-Length: 1000\r\n\r\n--b0undary\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):  # the server closes the connection after answering
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1.5 s" in answer
    if path.startswith("/v1/"):  # OpenAI's clients read the error's type
        assert b'"type": "invalid_request_error"' in answer
    assert time.monotonic() - started < 6
    assert "did not arrive within" in caplog.text
