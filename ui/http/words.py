"""Word timestamps and subtitles, by URL:

    GET  /voxcpm/jobs/{id}/words            {"words": [...]}: a request's words timed on its audio
    GET  /voxcpm/jobs/{id}/subtitles.srt    the same as SubRip; .vtt as WebVTT
    POST /voxcpm/align                      any take's words: a multipart form as /voxcpm/evaluate
                                            takes it (file, text or segments, language);
                                            ?format=srt or vtt gives the subtitle file instead

A request's words are those it asked for (`timestamps: "word"`), made as it streamed; its offline
render (/voxcpm/jobs/{id}/offline.wav) has the same timeline, so they time it too. A take from
anywhere else (a recording, a take the workbench kept) is aligned here, in the analysis process
(inference/analysis/words.py); the text is the one that was asked for, never a transcript.
"""
from __future__ import annotations

import asyncio
import time

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import Response

from inference.analysis.evaluation import RATE
from inference.analysis.loading import ModelUnavailable
from inference.analysis.process import AnalysisStopped
from inference.errors import InputError, QueueFullError

from .common import Refusal, aligner_ready, busy, guarded, unavailable
from .evaluate import read_take
from .stream import find_job
from ..context import app_context
from ..services import subtitles

words_router = APIRouter()
FIELDS = ("file", "text", "segments", "language")


@words_router.get("/jobs/{job_id}/words")
@guarded
async def job_words(request: Request, job_id: str):
    words = asked_words(request, job_id)
    errors = find_job(request, job_id).word_errors
    return {"id": job_id, "words": words, **({"errors": errors} if errors else {})}


@words_router.get("/jobs/{job_id}/subtitles.{fmt}")
@guarded
async def job_subtitles(request: Request, job_id: str, fmt: str):
    fmt = subtitle_format(fmt)
    return subtitle_file(asked_words(request, job_id), fmt, job_id)


@words_router.post("/align")
@guarded
async def align(request: Request):
    state = app_context(request)
    fmt = request.query_params.get("format", "json")
    if fmt != "json":
        fmt = subtitle_format(fmt)
    aligner_ready(state)  # before the upload is read: off, or its model failed a moment ago
    began = time.monotonic()
    _, take = await read_take(request, state, FIELDS)
    try:
        submitted = await anyio.to_thread.run_sync(state.analysis.align, take)
        words = await asyncio.wrap_future(submitted)
    except (QueueFullError, AnalysisStopped) as exc:
        raise busy(request, f"the take was not aligned: {exc}") from None
    except ModelUnavailable as exc:  # the process's own answer, once the app no longer remembers it
        raise unavailable(exc, "the take was not aligned: ") from None
    if fmt != "json":
        return subtitle_file(words, fmt, "take")
    return {"words": words, "seconds": round(len(take.audio) / RATE, 3), "elapsed_s": round(time.monotonic() - began, 3)}


def asked_words(request: Request, job_id: str) -> list[dict]:
    job = find_job(request, job_id)
    words = job.words
    if words is None:
        raise Refusal(404, "this request did not ask for word timestamps: send timestamps \"word\" with it, or "
                           "post its audio and text to POST /voxcpm/align")
    errors = job.word_errors
    if errors and not words:  # none made: say why, not an empty list that reads as silence
        raise Refusal(503, f"this request's words were not made ({errors[0]['error']}); post its audio "
                           f"(/voxcpm/jobs/{job_id}/offline.wav) and text to POST /voxcpm/align once the aligner "
                           "is available")
    return words


def subtitle_format(fmt: str) -> str:
    if fmt not in subtitles.FORMATS:
        raise InputError(f"subtitles come as {' or '.join(subtitles.FORMATS)}, not {fmt[:20]!r}")
    return fmt


def subtitle_file(words: list[dict], fmt: str, name: str) -> Response:
    """The words as a subtitle file a browser saves (UTF-8, named after the request)."""
    return Response(subtitles.write(words, fmt), media_type=f"{subtitles.FORMATS[fmt]}; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}.{fmt}"',
                             "Cache-Control": "no-store"})
