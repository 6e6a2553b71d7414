"""The app's refusals, each answered with an HTTP status by the routes (ui/http/common.errors_as):
`Refusal`, an input refused with a status of its own for the refusals that are not a bad request
(400): no such voice (404), a name already taken (409), no room left (429, 503, 507), the voice library's database unreachable (503); `HTTPError`,
any answer with a status and headers (e.g. Retry-After), raised by the routes and the services."""
from __future__ import annotations

from inference.errors import InputError


class Refusal(InputError):
    """`status`: the HTTP status the routes answer with (ui/http/common.errors_as); `headers`: any
    it needs (a 503's Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
