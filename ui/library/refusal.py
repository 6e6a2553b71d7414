"""An input refused with an HTTP status of its own, for the refusals that are not a bad request (400):
no such voice (404), a name already taken (409), no room left (429, 503, 507)."""
from __future__ import annotations

from inference.errors import InputError


class Refusal(InputError):
    """`status`: the HTTP status the routes answer with (ui/http/common.errors_as)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
