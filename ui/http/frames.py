"""The framed stream body: audio, per-chunk metadata and a final status in one byte stream.

Bare PCM tells a client nothing but samples: not where each 160 ms patch begins, nor how the
request ended (a failure after the first patch ends the body exactly as success does). A framed
body carries both, so the page marks chunk boundaries where they really fell and shows the outcome
without polling. Every frame is an 8-byte header and a payload:

    byte 0     type: b"A" audio (int16 little-endian mono PCM), b"M" chunk metadata (UTF-8 JSON
               object), b"S" final status (UTF-8 JSON object, the last frame of a body), b"W" a
               segment's words timed (UTF-8 JSON object, ui/services/words.py; only when asked for)
    bytes 1-3  zero (reserved: a reader refuses anything else, so a misaligned read is caught)
    bytes 4-7  payload length in bytes, uint32 little-endian, at most MAX_PAYLOAD

Each patch is an "M" frame followed by its "A" frame. Readers skip frames of types they do not
know (future additions), and refuse a bad header, an oversized or odd-length audio payload, or
metadata that is not a JSON object. static/player/frames.js is the page's reader of the same format
(it reads the format's constants from GET /voxcpm/spec: `spec()` below), and tests/fixtures/frames.py
the tests' one.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import struct

import numpy as np

MEDIA_TYPE = "application/vnd.voxcpm.frames"
AUDIO, META, STATUS, WORDS = b"A", b"M", b"S", b"W"
HEADER = struct.Struct("<c3sI")
MAX_PAYLOAD = 1 << 20  # 1 MiB: a patch's audio is 15 KiB; anything near this is a broken stream


def spec() -> dict:
    """The format as the page's reader takes it: the media type, the header's size, the largest
    payload, and the kind of each type byte."""
    kinds = {AUDIO: "audio", META: "meta", STATUS: "status", WORDS: "words"}
    return {"media_type": MEDIA_TYPE, "header_bytes": HEADER.size, "max_payload": MAX_PAYLOAD,
            "kinds": {kind.decode(): name for kind, name in kinds.items()}}


class FrameError(ValueError):
    """The bytes are not a valid framed stream; the message says what was wrong and where."""


def frame(kind: bytes, payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise FrameError(f"a {kind!r} payload of {len(payload)} bytes is over the {MAX_PAYLOAD}-byte limit")
    return HEADER.pack(kind, b"\0\0\0", len(payload)) + payload


def json_frame(kind: bytes, obj: dict) -> bytes:
    return frame(kind, json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8"))


def _scalar(value):
    if isinstance(value, np.generic):
        value = value.item()
    # None too is left out: a pause's chunk has no latents, which is no news to a reader.
    return value if isinstance(value, (bool, int, float, str)) else dataclasses.MISSING


@functools.cache
def _field_names(cls) -> tuple[str, ...]:
    """A chunk class's fields, looked up once per class instead of once per chunk sent."""
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()


def chunk_meta(delivery, job) -> dict:
    """The metadata frame of one delivered chunk: every plain field of the engine's chunk (index,
    and whatever scalar fields it gains), where it starts, its length and the server's clock."""
    chunk = delivery.chunk
    meta = {name: v for name in _field_names(type(chunk))
            if (v := _scalar(getattr(chunk, name))) is not dataclasses.MISSING}
    meta.update(job=job.id, offset=int(delivery.offset), samples=int(len(chunk.audio)),
                server_ms=round(delivery.server_s * 1000.0, 3))
    return meta


def final_status(job, **extra) -> dict:
    """The last frame: the job's outcome and the server's figures (as /voxcpm/jobs/ID gives them)."""
    return {**job.status(), **extra}
