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
"reason": ...} within LOAD_WAIT_S, never as a wait: a model still loading (a download on first
use) says so, and a later call finds it loaded. 400: no audio, no text, a malformed field; 503: the
server's evaluations or its queue are full (Retry-After).

The models run on an engine's worker thread between two steps (inference/serving/services.py), one
window of at most WINDOW_S per call, each queued after the last has come back: a live stream waits
for at most one call per patch, however long the take.
"""
from __future__ import annotations

import asyncio
import json
import time

import anyio
import numpy as np
from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference.errors import InputError, QueueFullError
from inference.serving import scores
from inference.serving.asr import MAX_SECONDS as ASR_SECONDS
from inference.serving.on_demand import ModelUnavailable, NotLoaded, OnDemand
from inference.serving.services import embed_speaker, hear
from inference.serving.speaker import MAX_SECONDS as SPEAKER_SECONDS

from .common import HTTPError, guarded
from ..context import app_context
from ..library.uploads import decode_audio

evaluate_router = APIRouter()
RATE = 16000  # both models take 16 kHz: the take is decoded to it once
MAX_SECONDS = 600.0  # a take's length (the body limit bounds it first at 48 kHz)
# The recognizer's window per call, under its own 30 s: every live stream on the GPU waits for one
# call, about 0.35 s for 5 s of audio and 1.4 s for 25 s with the published Whisper on an H100
# (docs/listening-qa.md), so 10 s windows keep that wait near half a second.
WINDOW_S = min(10.0, ASR_SECONDS)
MAX_SEGMENTS = 200
MAX_TEXT_CHARS = 20000
MAX_EVALUATIONS = 2  # at once in the server, so that a batch script cannot fill the worker's call queue
LOAD_WAIT_S = 10.0  # how long a request waits for a model being loaded before it answers "not available"
LOAD_ATTEMPTS = 3  # a pool may send each call to another GPU, which loads its own copy
LANGUAGES = ("auto", "en", "zh")
FIELDS = ("file", "text", "segments", "language", "reference_id", "voice", "reference")


@evaluate_router.post("/evaluate")
@guarded
async def evaluate(request: Request):
    state = app_context(request)
    if state.evaluating >= MAX_EVALUATIONS:
        raise HTTPError(503, f"{MAX_EVALUATIONS} evaluations are running on this server: try again shortly",
                        {"Retry-After": "5"})
    state.evaluating += 1  # the event loop's thread alone changes it
    try:
        began = time.monotonic()
        form = await read_form(request)
        take = await anyio.to_thread.run_sync(decode_audio, form["file"], MAX_SECONDS, RATE)
        audio = take[1]
        parts = split_segments(form, len(audio) / RATE)
        language = form.get("language", "auto")
        if language not in LANGUAGES:
            raise InputError(f"language must be one of {', '.join(LANGUAGES)}, not {language[:20]!r}")
        chinese = scores.is_chinese(" ".join(text for text, _, _ in parts), language)
        reference = await read_reference(state, form)
        result = await Evaluation(state, chinese).run(audio, parts, reference)
        result["seconds"] = round(len(audio) / RATE, 3)
        result["elapsed_s"] = round(time.monotonic() - began, 3)
        return result
    except QueueFullError as exc:
        raise HTTPError(503, f"the take was not evaluated: {exc}", {"Retry-After": "5"}) from None
    finally:
        state.evaluating -= 1


async def read_form(request: Request) -> dict:
    """The form's fields: bytes for files, str for the rest; unknown fields refused."""
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise InputError("send a multipart form: file (the take's audio), text, and optionally segments, "
                         "language and reference_id, voice or reference")
    fields: dict = {}
    try:
        async with request.form(max_files=2, max_fields=len(FIELDS)) as form:
            for name, value in form.multi_items():
                if name not in FIELDS:
                    raise InputError(f"unknown field {name[:40]!r}; the fields are {', '.join(FIELDS)}")
                fields[name] = value if isinstance(value, str) else await value.read()
    except StarletteHTTPException as exc:
        raise InputError(f"the multipart body could not be read ({exc.detail})") from None
    if not isinstance(fields.get("file"), bytes):
        raise InputError("no take to evaluate: send its audio (WAV, FLAC, OGG or MP3) as the file field")
    return fields


def split_segments(form: dict, seconds: float) -> list[tuple[str, float, float]]:
    """(text as spoken, start s, end s) of each part scored on its own: the segments given, or the take."""
    raw = form.get("segments")
    if raw is None:
        text = form.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError("no text to score against: give the text as spoken (text), or segments")
        check_text(text)
        return [(text, 0.0, seconds)]
    try:
        items = json.loads(raw)
    except (ValueError, TypeError):
        raise InputError('segments must be JSON: [{"text": ..., "end_s": ...}, ...]') from None
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_SEGMENTS:
        raise InputError(f"segments must be a list of 1 to {MAX_SEGMENTS} objects {{text, end_s}}")
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
        check_text(text)
        parts.append((text, start, min(float(end), seconds)))
        start = float(end)
    return parts


def check_text(text: str):
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"the text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")


async def read_reference(state, form: dict) -> tuple[int, np.ndarray] | None:
    """The clip a cloning take copies, (rate, float32 mono), or None."""
    given = [name for name in ("reference_id", "voice", "reference") if form.get(name) not in (None, "", b"")]
    if len(given) > 1:
        raise InputError(f"give one reference clip, not {' and '.join(given)}")
    if not given:
        return None
    value = form[given[0]]
    if given[0] == "reference":
        if not isinstance(value, bytes):
            raise InputError("reference must be a file (WAV, FLAC, OGG or MP3)")
        return await anyio.to_thread.run_sync(decode_audio, value, state.clips.max_seconds, RATE)
    if not isinstance(value, str):
        raise InputError(f"{given[0]} must be text, not a file")
    if given[0] == "reference_id":
        clip = state.clips.get(value)
        return clip.sample_rate, clip.audio
    if state.voice_lookup is None:
        raise HTTPError(404, "this server keeps no voice library (start it with --data-dir)")
    _, clip = await anyio.to_thread.run_sync(state.voice_lookup, value[:200])
    return await anyio.to_thread.run_sync(clip.samples)


class Evaluation:
    """One take's scores. A model that turns out to be unavailable is asked no more in this request:
    its measure says why."""

    def __init__(self, state, chinese: bool):
        self.worker, self.asr, self.speaker = state.worker, state.asr, state.speaker
        self.chinese = chinese
        self.down: dict[str, str] = {}  # model's option -> why it is not available

    async def run(self, audio: np.ndarray, parts, reference) -> dict:
        voice = await self.embed(*reference) if reference is not None else None
        segments, heard, embeddings, weights = [], [], [], []
        for i, (text, start, end) in enumerate(parts):
            piece = audio[int(start * RATE):int(end * RATE)]
            segment = {"index": i, "text": text, "start_s": round(start, 3), "end_s": round(end, 3)}
            words = await self.words(piece, start)
            if words is not None:
                transcript, units = words
                score = await anyio.to_thread.run_sync(score_words, text, units, self.chinese)
                segment["intelligibility"] = {"transcript": transcript, **score}
                heard.append(transcript)
            if voice is not None and not isinstance(voice, str) and len(piece):
                mine = await self.embed(RATE, piece)
                if not isinstance(mine, str):
                    segment["similarity"] = round(scores.cosine(mine, voice), 4)
                    embeddings.append(mine)
                    weights.append(len(piece))
            segments.append(segment)
        return {"intelligibility": self.intelligibility(segments, heard), "segments": segments,
                "similarity": None if reference is None else self.similarity(voice, embeddings, weights)}

    def intelligibility(self, segments: list[dict], heard: list[str]) -> dict:
        if self.asr.model is None or self.asr.option in self.down:
            return {"available": False, "reason": self.down.get(self.asr.option) or self.asr.switched_off()}
        parts = [s["intelligibility"] for s in segments]
        return {"available": True, "model": self.asr.model, "language": "zh" if self.chinese else "en",
                "transcript": " ".join(heard), **scores.totals(parts)}

    def similarity(self, voice, embeddings: list, weights: list) -> dict:
        if isinstance(voice, str) or not embeddings:
            return {"available": False, "reason": voice if isinstance(voice, str) else self.down.get(self.speaker.option,
                    "the take has no audio")}
        take = scores.mean_embedding(embeddings, weights)
        return {"available": True, "model": self.speaker.model, "score": round(scores.cosine(take, voice), 4)}

    async def words(self, piece: np.ndarray, start: float):
        """(transcript, units with times in the take) of one part, window by window; None when the
        recognizer is not available."""
        texts, units = [], []
        for lo, hi in scores.windows(piece, RATE, WINDOW_S):
            heard = await self.call(self.asr, lambda: hear(self.worker, self.asr, RATE, piece[lo:hi]))
            if heard is None:
                return None
            texts.append(heard.text)
            units += await anyio.to_thread.run_sync(scores.heard_units, heard.words, self.chinese, start + lo / RATE)
        return " ".join(t for t in texts if t), units

    async def embed(self, rate: int, clip: np.ndarray):
        """The clip's speaker embedding (windows of at most SPEAKER_SECONDS, weighted by length), or
        why there is none (a string)."""
        spans = scores.windows(clip, rate, SPEAKER_SECONDS)
        embeddings = []
        for lo, hi in spans:
            got = await self.call(self.speaker, lambda: embed_speaker(self.worker, self.speaker, rate, clip[lo:hi]))
            if got is None:
                return self.down[self.speaker.option]
            embeddings.append(got)
        return scores.mean_embedding(embeddings, [hi - lo for lo, hi in spans])

    async def call(self, model: OnDemand, submit):
        """submit()'s result, the model loaded first where it is not; None (and the reason kept) when
        it is not available."""
        if model.option in self.down:
            return None
        try:
            model.check_available()
            for _ in range(LOAD_ATTEMPTS):
                result = await asyncio.wrap_future(submit())
                if not isinstance(result, NotLoaded):
                    return result
                await self.wait_for_load(model, result.device)
            raise model.error(still_loading(model))
        except ModelUnavailable as exc:
            self.down[model.option] = str(exc)
            return None

    @staticmethod
    async def wait_for_load(model: OnDemand, device: str):
        loading = asyncio.wrap_future(model.loading(device))
        try:
            await asyncio.wait_for(asyncio.shield(loading), LOAD_WAIT_S)
        except (asyncio.TimeoutError, TimeoutError):
            raise model.error(still_loading(model)) from None


def score_words(text: str, units: list, chinese: bool) -> dict:
    """Off the event loop: a long text's alignment (and Chinese conversion) takes milliseconds to spare."""
    return scores.error_rate(scores.reference_units(text, chinese), units, chinese)


def still_loading(model: OnDemand) -> str:
    return (f"the {model.what} {model.model!r} is still being loaded (a download on first use): "
            "evaluate again in a minute")
