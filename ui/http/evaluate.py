"""POST /voxcpm/evaluate: the measures TTS papers report, for one take (inference/serving/scores.py).

A multipart form (what `curl -F` and `requests.post(files=...)` send), so a script can score a batch:

    file           the take's audio (WAV, FLAC, OGG or MP3), required
    text           the text as spoken, required unless segments are given
    segments       JSON [{"text": ..., "end_s": ...}, ...]: a long text's segments as the take's status
                   gives them (each segment's text as spoken and where its audio ends, seconds; the last
                   may leave end_s out); each is scored on its own, and the take over all of them
    language       auto (default: Chinese when most letters are), en (WER) or zh (CER)
    reference_id | voice | reference
                   the clip a cloning take copies (an upload's id, a saved voice's name, or a file):
                   speaker similarity is scored only with one

-> 200 {"intelligibility": {...}, "similarity": {...} or null, "segments": [...], "seconds", "elapsed_s"}.
A measure whose model is switched off or cannot be loaded comes back as {"available": false,
"reason": ...}, never as a wait: a model being loaded (from a folder, or downloaded) says so within
the analysis settings' load_wait_s, and a later call finds it loaded. 400: no audio, no text, a
malformed field; 503: the analysis queue is full, or its process stopped (Retry-After).

The scores are made in the analysis process (inference/analysis/), never on an engine's thread:
a live stream does not wait for any of it.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import anyio
import numpy as np
from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference.analysis import scores
from inference.analysis.evaluation import RATE, Take
from inference.analysis.process import AnalysisStopped
from inference.errors import InputError, QueueFullError
from inference.request.audio_input import resample

from .common import Refusal, busy, guarded
from ..context import app_context

evaluate_router = APIRouter()
LANGUAGES = ("auto", "en", "zh")
FIELDS = ("file", "text", "segments", "language", "reference_id", "voice", "reference")


@evaluate_router.post("/evaluate")
@guarded
async def evaluate(request: Request):
    state = app_context(request)
    began = time.monotonic()
    form, take = await read_take(request, state)
    audio = take.audio
    reference = await read_reference(state, form)
    try:
        submitted = await anyio.to_thread.run_sync(state.analysis.evaluate, dataclasses.replace(take, reference=reference))
        result = await asyncio.wrap_future(submitted)
    except (QueueFullError, AnalysisStopped) as exc:
        raise busy(request, f"the take was not evaluated: {exc}") from None
    result["seconds"] = round(len(audio) / RATE, 3)
    result["elapsed_s"] = round(time.monotonic() - began, 3)
    return result


async def read_take(request: Request, state, accepted: tuple[str, ...] = FIELDS) -> tuple[dict, Take]:
    """The form (read_form) and the take it sends: its audio at RATE, its parts, its language;
    no reference clip yet (only an evaluation reads one)."""
    form = await read_form(request, accepted)
    limits = state.settings.evaluation
    # Decoded as a clip is, within the store's budget for one decode and its limit on decodes at once.
    audio = (await anyio.to_thread.run_sync(state.clips.decode, form["file"], limits.max_take_seconds, RATE))[1]
    parts = split_segments(form, len(audio) / RATE, limits.max_segments, state.limits.max_text_chars)
    language = form.get("language", "auto")
    if language not in LANGUAGES:
        raise InputError(f"language must be one of {', '.join(LANGUAGES)}, not {language[:20]!r}")
    return form, Take(audio, parts, None, scores.is_chinese(" ".join(text for text, _, _ in parts), language))


async def read_form(request: Request, accepted: tuple[str, ...] = FIELDS) -> dict:
    """The form's fields: bytes for files, str for the rest; fields not `accepted` refused."""
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise InputError(f"send a multipart form: file (the take's audio), text, and optionally "
                         f"{', '.join(f for f in accepted if f not in ('file', 'text'))}")
    fields: dict = {}
    try:
        async with request.form(max_files=2, max_fields=len(accepted)) as form:
            for name, value in form.multi_items():
                if name not in accepted:
                    raise InputError(f"unknown field {name[:40]!r}; the fields are {', '.join(accepted)}")
                fields[name] = value if isinstance(value, str) else await value.read()
    except StarletteHTTPException as exc:
        raise InputError(f"the multipart body could not be read ({exc.detail})") from None
    if not isinstance(fields.get("file"), bytes):
        raise InputError("no take to evaluate: send its audio (WAV, FLAC, OGG or MP3) as the file field")
    return fields


def split_segments(form: dict, seconds: float, max_segments: int, max_chars: int) -> list[tuple[str, float, float]]:
    """(text as spoken, start s, end s) of each part scored on its own: the segments given, or the take."""
    raw = form.get("segments")
    if raw is None:
        text = form.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError("no text to score against: give the text as spoken (text), or segments")
        check_text(text, max_chars)
        return [(text, 0.0, seconds)]
    try:
        items = json.loads(raw)
    except (ValueError, TypeError):
        raise InputError('segments must be JSON: [{"text": ..., "end_s": ...}, ...]') from None
    if not isinstance(items, list) or not 1 <= len(items) <= max_segments:
        raise InputError(f"segments must be a list of 1 to {max_segments} objects {{text, end_s}}")
    parts, start = [], 0.0
    for i, item in enumerate(items):
        last = i == len(items) - 1
        text = item.get("text") if isinstance(item, dict) else None
        end = item.get("end_s", None if last else "") if isinstance(item, dict) else ""
        end = seconds if end is None else end
        if not isinstance(text, str) or isinstance(end, bool) or not isinstance(end, (int, float)):
            raise InputError(f"segment {i + 1} needs text (a string) and end_s (seconds; the last may leave it out)")
        if not start < end <= seconds + 0.05:
            raise InputError(f"segment {i + 1} ends at {end} s: each segment must end after the one before it, "
                             f"within the take's {seconds:.2f} s")
        check_text(text, max_chars)
        parts.append((text, start, min(float(end), seconds)))
        start = float(end)
    return parts


def check_text(text: str, max_chars: int):
    if len(text) > max_chars:
        raise InputError(f"the text has {len(text)} characters; the limit is {max_chars}")


async def read_reference(state, form: dict) -> tuple[int, np.ndarray] | None:
    """The clip a cloning take copies, float32 mono at RATE, or None."""
    given = [name for name in ("reference_id", "voice", "reference") if form.get(name) not in (None, "", b"")]
    if len(given) > 1:
        raise InputError(f"give one reference clip, not {' and '.join(given)}")
    if not given:
        return None
    value = form[given[0]]
    if given[0] == "reference":
        if not isinstance(value, bytes):
            raise InputError("reference must be a file (WAV, FLAC, OGG or MP3)")
        return (await anyio.to_thread.run_sync(state.clips.decode, value, state.clips.max_seconds, RATE))[1]
    if not isinstance(value, str):
        raise InputError(f"{given[0]} must be text, not a file")
    if given[0] == "reference_id":
        clip = state.clips.get(value)
        return await anyio.to_thread.run_sync(resample, clip.audio, clip.sample_rate, RATE)
    if state.voice_lookup is None:
        raise Refusal(404, "this server keeps no voice library (start it with --data-dir)")
    _, clip = await anyio.to_thread.run_sync(state.voice_lookup, value[:state.settings.http.max_voice_chars])
    rate, audio = await anyio.to_thread.run_sync(clip.samples)
    return await anyio.to_thread.run_sync(resample, audio, rate, RATE)
