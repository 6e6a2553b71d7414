"""The app's refusals, and how one reads, whoever sends it: a middleware here, or a route
(ui/http/common.py).

`Refusal`: a request refused with an HTTP status of its own and any headers it needs (a 503's
Retry-After, a 405's Allow), raised by the routes, the services and the library alike (no such voice
404, a name already taken 409, no room left 429/503/507, a database unreachable 503, a server busy
503); the routes answer it (ui/http/common.errors_as). An InputError without a status is a 400.

The app's own routes answer `{"error": "message"}`. Under /v1 the clients are OpenAI's SDKs and the
tools built on them, which read `{"error": {"message", "type", "param", "code"}}` and raise their
own error classes from it, so every refusal of a /v1 path, wherever it is made, has that shape.
"""
from __future__ import annotations

import json

from inference.errors import InputError

OPENAI_PREFIX = "/v1"
OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "invalid_request_error", 408: "invalid_request_error",
                409: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
                499: "client_closed", 503: "server_overloaded"}
# A 503 for a model that is switched off, cannot be loaded or is being loaded is no overload: it
# carries this header (off, failed or loading: ui/http/common.unavailable), and /v1 types it so.
MODEL_STATE = "X-VoxCPM-Model-State"
WORDS_UNAVAILABLE = "word timestamps are not available: "
UNAVAILABLE_TYPE = "service_unavailable"


class Refusal(InputError):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers


def is_openai_path(path: str) -> bool:
    return path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/")


def openai_error_body(status: int, message: str, param: str | None = None, code: str | None = None,
                      headers: dict | None = None) -> dict:
    """OpenAI's error shape; `headers`: the refusal's, which say a model's state (MODEL_STATE)."""
    kind = UNAVAILABLE_TYPE if status == 503 and MODEL_STATE in (headers or {}) else OPENAI_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_body(path: str, status: int, message: str, code: str | None = None) -> dict:
    """The refusal's JSON body in the shape the clients of `path` read."""
    return openai_error_body(status, message, code=code) if is_openai_path(path) else {"error": message}


async def send_refusal(send, scope, status: int, message: str, headers: list | None = None):
    """Answers an HTTP request from a middleware, in the shape its path's clients read, and closes the
    connection (what the client sent may not have been read to its end)."""
    body = json.dumps(error_body(scope["path"], status, message)).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), (b"connection", b"close")] + (headers or [])
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
