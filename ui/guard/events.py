"""Gradio event requests for handlers this page does not have are refused as bad input.

Gradio's event routes look the request's fn_index up without a check: an unknown one (-1, 99)
raises a KeyError, which comes back as a 500, a traceback in the log and a dropped connection.
This middleware reads the (size-limited, see ui/guard/limits.py) JSON body of those routes, refuses an
fn_index the page does not have with a 400 that says which exist, and hands the body on unchanged.
"""
from __future__ import annotations

import json

from .answers import send_refusal

EVENT_ROUTES = ("/gradio_api/queue/join", "/gradio_api/run/predict")


class KnownEvents:
    def __init__(self, app, demo):
        self.app = app
        self.known = sorted(demo.fns)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope["path"].endswith(EVENT_ROUTES):
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its request
            body += message.get("body", b"")
            more = message.get("more_body", False)
        problem = self._problem(body)
        if problem is not None:
            return await send_refusal(send, scope, 400, problem)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, replay, send)

    def _problem(self, body: bytes) -> str | None:
        try:
            fn_index = json.loads(body).get("fn_index")
        except (ValueError, AttributeError, RecursionError):
            return None  # not a JSON object: Gradio's own validation answers it (422)
        if fn_index is None or (type(fn_index) is int and fn_index in self.known):
            return None
        return (f"unknown fn_index {str(fn_index)[:40]}: this page's events are numbered "
                f"{self.known[0]} to {self.known[-1]}")
