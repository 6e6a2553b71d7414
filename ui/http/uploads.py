"""POST /voxcpm/upload: a reference clip, decoded and checked once, kept by id for later requests
(ui/library/uploads.py)."""
from __future__ import annotations

import anyio
from fastapi import APIRouter, Request

from .common import HTTPError, guarded, read_limited
from ..library.uploads import StoreFull, client_key
from ..context import app_context

upload_router = APIRouter()


@upload_router.post("/upload")
@guarded
async def upload(request: Request):
    clips = app_context(request).clips
    data = await read_limited(request, clips.max_bytes, "upload")
    client = client_key(request.client.host if request.client else None)
    try:
        clip_id, clip = await anyio.to_thread.run_sync(clips.add_bytes, data, client)
    except StoreFull as exc:
        raise HTTPError(exc.status, str(exc), {"Retry-After": "60"}) from None
    return {"id": clip_id, "seconds": round(clip.seconds, 3), "sample_rate": clip.source_rate,
            "channels": clip.source_channels, "expires_in_s": clips.ttl_s}
