"""What one request may send, on every route: bytes, files and time.

Gradio's own routes set no total (its upload route takes up to 1000 files of max_file_size each,
its JSON routes any size), and no route limits how long a body may take to arrive. So every body
is capped in bytes (the largest legitimate one is one clip's upload), Gradio's upload route in
files too (the page sends one clip per request), and every body must arrive within a time limit,
or the request is answered 413 or 408 (in OpenAI's shape under /v1: ui/guard/answers.py) and
the connection closed. Each refusal is logged.

A plain ASGI middleware: it only counts what passes through receive(), so nothing is buffered.
"""
from __future__ import annotations

import logging

import anyio
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

from .answers import is_openai_path, send_refusal

log = logging.getLogger("voxcpm.http")
UPLOAD_SUFFIX = "/gradio_api/upload"
MULTIPART_SLACK = 64 * 1024  # part headers and boundaries around a file of the largest allowed size


def too_large(what: str, limit: int) -> str:
    """One wording for a size refusal, whichever door the bytes came through."""
    return f"the {what} is larger than the limit of " + (f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit} bytes")


class Cut(Exception):
    """Why a request was stopped: the status and the message its client gets."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class RequestLimits:
    def __init__(self, app, max_body_bytes: int, max_files: int, body_timeout_s: float):
        self.app = app
        self.max_body_bytes = max_body_bytes + MULTIPART_SLACK
        self.max_files = max_files
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return await self._refuse(scope, send, self.too_large_cut(scope["path"]))
        body = _Body(self, scope, headers, receive)

        async def guarded_send(message):
            if body.cut is None:  # once cut, the app's own answer (to a "disconnect") goes nowhere
                body.started = body.started or message["type"] == "http.response.start"
                await send(message)

        try:
            await self.app(scope, body.receive, guarded_send)
        except Exception:
            if body.cut is None:
                raise
        if body.cut is not None and not body.started:
            await self._refuse(scope, send, body.cut)

    def too_large_cut(self, path: str) -> Cut:
        # The limit is the upload limit (no other body comes near it), so it is worded as the
        # clip store words it: a file refused at either door reads the same. OpenAI's routes take no
        # file, so there it is the request body.
        what = "request body" if is_openai_path(path) else "upload"
        return Cut(413, too_large(what, self.max_body_bytes - MULTIPART_SLACK))

    async def _refuse(self, scope, send, cut: Cut):
        log.warning("refused %s %s: %s (status=%d)", scope.get("method"), scope["path"][:100], cut.message, cut.status)
        await send_refusal(send, scope, cut.status, cut.message)


class _Body:
    """The request's receive(), counting bytes and files and keeping the time limit. Past a limit
    it tells the app that the client left, which every route already handles by stopping."""

    def __init__(self, limits: RequestLimits, scope, headers: dict, receive):
        self.limits, self._receive, self.path = limits, receive, scope["path"]
        self.deadline = anyio.current_time() + limits.body_timeout_s
        self.bytes = self.files = 0
        self.complete, self.started, self.cut = False, False, None
        self.parts = _part_counter(self, scope, headers)

    async def receive(self):
        if self.cut is not None:
            return {"type": "http.disconnect"}
        if self.complete:  # the body is in: what remains is waiting for a disconnect, unbounded
            return await self._receive()
        try:
            with anyio.fail_after(max(0.0, self.deadline - anyio.current_time())):
                message = await self._receive()
        except TimeoutError:
            return self._stop(Cut(408, f"the request body did not arrive within {self.limits.body_timeout_s:g} s"))
        if message["type"] != "http.request":
            return message
        self.complete = not message.get("more_body", False)
        self.bytes += len(message.get("body", b""))
        if self.bytes > self.limits.max_body_bytes:
            return self._stop(self.limits.too_large_cut(self.path))
        if self.parts is not None:
            try:
                self.parts.write(message.get("body", b""))
            except Exception:  # malformed multipart: Gradio's own parser refuses it; stop counting
                self.parts = None
            if self.files > self.limits.max_files:
                return self._stop(Cut(413, f"a request may carry at most {self.limits.max_files} file(s); "
                                           "upload one clip at a time"))
        return message

    def _stop(self, cut: Cut) -> dict:
        self.cut = cut
        return {"type": "http.disconnect"}


def _part_counter(body: _Body, scope, headers: dict) -> MultipartParser | None:
    """A streaming multipart parser that only counts parts, for Gradio's upload route."""
    if scope.get("method") != "POST" or not scope["path"].endswith(UPLOAD_SUFFIX):
        return None
    kind, options = parse_options_header(headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        return None  # Gradio refuses it itself

    def counted():
        body.files += 1
    return MultipartParser(boundary, callbacks={"on_part_begin": counted})
