"""Gradio's queue API spoken by hand, as an outside client would: join an event by fn_index with any
payload, then read the session's server-sent events until that event completes."""
from __future__ import annotations

import json
import secrets

import httpx

FILE_META = {"_type": "gradio.FileData"}


def file_data(path: str, name: str = "clip.wav") -> dict:
    """What a client puts in an input to name a file: any path it likes."""
    return {"path": str(path), "orig_name": name, "meta": FILE_META}


def dependencies(client: httpx.Client) -> list[dict]:
    return client.get("/config").json()["dependencies"]


def call(client: httpx.Client, fn_index: int, data: list, timeout: float = 20.0) -> dict:
    """Join the queue and wait for the event's outcome: {'joined': status, 'completed': message or
    None, 'error': text}. Bounded by `timeout` however the server behaves."""
    session = secrets.token_hex(8)
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "trigger_id": None, "event_data": None}
    joined = client.post("/gradio_api/queue/join", json=body, timeout=timeout)
    if joined.status_code != 200:
        return {"joined": joined.status_code, "completed": None, "error": joined.text}
    with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session},
                       timeout=timeout) as events:
        for line in events.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") in ("process_completed", "unexpected_error"):
                return {"joined": 200, "completed": message, "error": ""}
    return {"joined": 200, "completed": None, "error": "the event stream ended without an outcome"}


def outputs(result: dict) -> list:
    """The handler's return values, or [] when the event failed."""
    message = result["completed"] or {}
    return (message.get("output") or {}).get("data") or [] if message.get("success") else []
