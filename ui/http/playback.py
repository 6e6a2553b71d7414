"""POST /voxcpm/playback: a page's report of how a take played, for GET /metrics (metrics.py).

The player (static/player/player.js) sends `{"job", "underruns", "gap_ms"}` when it keeps a take,
finished or stopped: underruns are heard in the browser only, so this is how the server learns
of them. Like every route it needs the token when one is set.
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference.errors import InputError

from .common import guarded, read_json
from ..context import app_context

playback_router = APIRouter()


class PlaybackReport(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    job: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$")
    underruns: int = Field(ge=0, le=100_000)
    gap_ms: float = Field(ge=0, le=86_400_000, allow_inf_nan=False)


@playback_router.post("/playback")
@guarded
async def playback(request: Request):
    """{"counted": true} the first time a request the worker lists is reported, else false."""
    try:
        report = PlaybackReport.model_validate(await read_json(request))
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        raise InputError(f"a playback report is {{job, underruns, gap_ms}}: {where[:40]}: {err['msg']}") from None
    return JSONResponse({"counted": app_context(request).metrics.played(report)})
