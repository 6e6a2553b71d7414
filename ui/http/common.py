"""What every route shares: the error answers, reading a body, queueing a request, and waiting for
a job's events without blocking the event loop.

Errors come back as 4xx JSON `{"error": ...}` before any audio is sent: a streaming route waits for
the job's first patch (or its failure) before it sends the status line (`first_audio`). `admit` is
the one intake of every interface that makes speech: these routes, and Gradio's API
(ui/page/api.py), which raises the same refusals as gr.Error.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
from dataclasses import dataclass

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from inference.analysis.loading import ModelUnavailable
from inference.errors import InputError
from inference.request import modes
from inference.serving.job import Job
from inference.serving.worker import QueueFullError

from .listen import ClientWatch, next_event
from .schema import StreamBody, parse_body, to_request
from ..guard.limits import too_large
from ..guard.answers import MODEL_STATE, WORDS_UNAVAILABLE, Refusal
from ..services.metrics import observe_refusal

log = logging.getLogger("voxcpm.http")


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def errors_as(respond):
    """A route decorator: input errors become 4xx answers made by `respond(status, message,
    headers)` (400, or a Refusal's own status); anything else a generic 500 (the traceback stays
    in the log)."""
    def decorate(handler):
        @functools.wraps(handler)
        async def wrapper(*args, **kwargs):
            try:
                return await handler(*args, **kwargs)
            except Refusal as exc:
                return respond(exc.status, str(exc), exc.headers)
            except InputError as exc:
                return respond(400, str(exc), None)
            except ClientDisconnect:  # the client left mid-request: nothing failed here, and nobody reads this
                log.info("client left during %s before its request was complete", handler.__name__)
                return respond(499, "the client closed the connection", None)
            except Exception:
                log.exception("route %s failed", handler.__name__)
                return respond(500, "internal error on the server; it has been logged", None)
        return wrapper
    return decorate


guarded = errors_as(error_response)


async def read_limited(request: Request, limit: int, what: str) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refusal(413, too_large(what, limit))
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            raise Refusal(413, too_large(what, limit))
    return bytes(data)


def parse_json(raw: bytes):
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise Refusal(400, "the request body is not valid JSON") from None
    except ValueError:  # e.g. an integer of more digits than Python will convert
        raise Refusal(400, "the request body holds a number too long to read") from None


LARGE_JSON = 256 * 1024  # bytes of a body parsed on the event loop; a larger one (a clip in it) off it


async def read_json(request: Request, limit: int | None = None):
    """The request's JSON body, at most `limit` bytes (default the settings' max_json_kb)."""
    limit = limit or request.app.state.ctx.settings.http.max_json_kb * 1024
    raw = await read_limited(request, limit, "request body")
    return parse_json(raw) if len(raw) <= LARGE_JSON else await anyio.to_thread.run_sync(parse_json, raw)


def busy(request: Request, message: str) -> Refusal:
    """A 503 for a server (its engine, its analysis, its database) too busy now: try again shortly."""
    return retry_later(request.app.state.ctx, message)


def retry_later(state, message: str) -> Refusal:
    """busy() for a caller that holds the app's context rather than an HTTP request (Gradio's API)."""
    return Refusal(503, message, {"Retry-After": str(state.settings.http.busy_retry_s)})


def aligner_ready(state):
    """Word timestamps can be made: refused at once (503, with why and, where one can be told,
    when to try again) when the aligner is switched off or failed to load a moment ago, before
    any audio is made for a request that asked for them."""
    try:
        state.analysis.check_recognizer()
    except ModelUnavailable as exc:
        raise unavailable(exc, WORDS_UNAVAILABLE) from None


def unavailable(exc: ModelUnavailable, lead: str = "") -> Refusal:
    """A model that is off, cannot be loaded or is being loaded, as a 503 that says which (its
    message), with a Retry-After where asking again may help (never when it is switched off)."""
    headers = {MODEL_STATE: exc.state}  # the page asks again by itself while it is "loading"
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return Refusal(503, f"{lead}{exc}", headers)


async def first_audio(job: Job, state, watch: ClientWatch | None):
    """The job's first Delivery (inference/serving/job.py), or the Refusal that says why there is
    none (sent before any audio): a request that serving's checks refused answers with their error
    (an InputError, or a Refusal with its own status). `watch`: the HTTP client's, whose going
    cancels the job (None: the caller's task is cancelled instead, as Gradio's are)."""
    event = await next_event(job, watch)
    if event is None:
        raise Refusal(499, "the client closed the connection")
    kind, value = event
    if job.refusal is not None:
        raise job.refusal
    if kind == "error":
        status = {"input_error": 400, "out_of_memory": 503}.get(job.outcome, 500)
        raise retry_later(state, value) if status == 503 else Refusal(status, value)
    if kind == "end":
        raise Refusal(409 if job.cancelled else 500, "the request ended before any audio")
    return value


@dataclass(frozen=True)
class Asked:
    """What a request asked for, as far as its body could be read: its refusal's log line says it."""
    mode: str = "?"
    text_chars: int = -1
    voice: str | None = None
    format: str | None = None


def page_asked(data, body: StreamBody | None = None, fmt: str | None = None) -> Asked:
    """The page's body as sent, read without trusting any of it; once parsed (`body`), its mode
    and text stand."""
    if body is not None:
        return Asked(mode=body.mode, text_chars=len(body.text), voice=body.voice or page_asked(data).voice, format=fmt)
    if not isinstance(data, dict):
        return Asked(format=fmt)
    mode = data.get("mode", modes.DEFAULT_MODE)
    return Asked(mode=mode if mode in modes.MODES else "?", text_chars=text_length(data.get("text")),
                 voice=data.get("voice") if isinstance(data.get("voice"), str) else None, format=fmt)


def text_length(value) -> int:
    return len(value) if isinstance(value, str) else -1


async def submit(request: Request, state, parse=None, build=None, describe=page_asked, limit: int | None = None):
    """A streaming request in, up to its first audio: its JSON body read (at most `limit` bytes,
    default max_json_kb), then admitted as admit() says, its client watched from then on. Returns
    (job, the route's body, its first Delivery, the ClientWatch its response is sent with:
    WatchedResponse)."""
    watch = ClientWatch(request.receive)
    try:
        return (*await admit(state, lambda: read_json(request, limit), parse, build, describe, watch), watch)
    except BaseException:
        watch.close()
        raise


async def admit(state, read, parse=None, build=None, describe=page_asked, watch: ClientWatch | None = None,
                submitted=None):
    """The one intake of every streaming interface (the HTTP routes, Gradio's API): the body read
    (`await read()` -> JSON) and parsed (JSON types and shape: parse(json) -> the route's body,
    default the page's StreamBody), handed to serving's intake (EngineWorker.submit: admitted at
    once or refused with a 503 here; then built with build(body) -> SynthesisRequest, default the
    page's to_request, checked and prepared on its own threads), and its first Delivery awaited.
    Returns (job, the route's body, its first Delivery). A refusal, here or by serving's checks,
    is raised before any audio, logged and counted: describe(json, body or None) -> Asked, what the
    body asked for. `watch`: the HTTP client's, started once the body is read; its going cancels the job.
    `submitted(job)`: told the job as soon as serving has it (a live session feeds it more text)."""
    data = body = job = None
    parse = parse or functools.partial(parse_body, max_voice_chars=state.settings.http.max_voice_chars)
    build = build or functools.partial(to_request, clips=state.clips, voices=state.voice_lookup)

    def refused(status: int, outcome: str):
        _log_refusal(describe(data, body), status, outcome, job)
        observe_refusal(state, status, outcome)
    try:
        data = await read()
        if watch is not None:
            watch.start()
        body = parse(data)
        if getattr(body, "timestamps", None) == "word":  # refused before any audio is made for it
            aligner_ready(state)
        job = state.worker.submit(functools.partial(build, body), job_id=body.request_id)
        if submitted is not None:
            submitted(job)
        try:
            return job, body, await first_audio(job, state, watch)
        except asyncio.CancelledError:  # the caller's task was cancelled (a Gradio client left): nobody reads it
            job.cancel()
            raise
    except QueueFullError as exc:
        refused(503, "busy")
        raise retry_later(state, str(exc)) from None
    except Refusal as exc:
        if exc.status != 499:  # a client that left mid-wait is no refusal
            refused(exc.status, "too_large" if exc.status == 413 else "input_error")
        raise
    except InputError:
        refused(400, "input_error")
        raise
    except ClientDisconnect:
        refused(499, "client_left")
        raise
    except Exception:  # the caller answers 500 and logs the traceback; the outcome line still goes out
        refused(500, "error")
        raise


def _log_refusal(asked: Asked, status: int, outcome: str, job: Job | None = None):
    log.info("request refused mode=%s text_chars=%d voice=%s format=%s ttfp=- rtf=- patches=0 outcome=%s "
             "status=%d%s", asked.mode, asked.text_chars, _shown(asked.voice), _shown(asked.format), outcome, status,
             "" if job is None else f" id={job.id}")


def _shown(value: str | None) -> str:
    """A client's string in the log: quoted and escaped (no forged lines), and short."""
    return "-" if value is None else repr(value[:64] + ("…" if len(value) > 64 else ""))
