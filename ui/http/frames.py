"""The framed stream body: audio, per-chunk metadata and a final status in one byte stream.

Bare PCM tells a client nothing but samples: not where each 160 ms patch begins, nor how the
request ended (a failure after the first patch ends the body exactly as success does). A framed
body carries both, so the page marks chunk boundaries where they really fell and shows the outcome
without polling. Every frame is an 8-byte header and a payload:

    byte 0     type: b"A" audio (int16 little-endian mono PCM), b"M" chunk metadata (UTF-8 JSON
               object), b"S" final status (UTF-8 JSON object, the last frame of a body)
    bytes 1-3  zero (reserved: a reader refuses anything else, so a misaligned read is caught)
    bytes 4-7  payload length in bytes, uint32 little-endian, at most MAX_PAYLOAD

Each patch is an "M" frame followed by its "A" frame. Readers skip frames of types they do not
know (future additions), and refuse a bad header, an oversized or odd-length audio payload, or
metadata that is not a JSON object. static/frames.js is the page's reader of the same format.
"""
from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np

MEDIA_TYPE = "application/vnd.voxcpm.frames"
AUDIO, META, STATUS = b"A", b"M", b"S"
HEADER = struct.Struct("<c3sI")
MAX_PAYLOAD = 1 << 20  # 1 MiB: a patch's audio is 15 KiB; anything near this is a broken stream


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
    return value if isinstance(value, (bool, int, float, str)) or value is None else dataclasses.MISSING


def chunk_meta(delivery, job) -> dict:
    """The metadata frame of one delivered chunk: every plain field of the engine's chunk (index,
    and whatever scalar fields it gains), where it starts, its length and the server's clock."""
    chunk = delivery.chunk
    fields = dataclasses.fields(chunk) if dataclasses.is_dataclass(chunk) else ()
    meta = {f.name: v for f in fields if (v := _scalar(getattr(chunk, f.name))) is not dataclasses.MISSING}
    meta.update(job=job.id, offset=int(delivery.offset), samples=int(len(chunk.audio)),
                server_ms=round(delivery.server_s * 1000.0, 3))
    return meta


def final_status(job, **extra) -> dict:
    """The last frame: the job's outcome and the server's figures (as /voxcpm/jobs/ID gives them)."""
    return {**job.status(), **extra}


class FrameReader:
    """Incremental reader: feed() any split of the bytes, get whole frames as (kind, payload)
    with metadata decoded and audio as int16; close() refuses a body that stopped mid-frame."""

    def __init__(self):
        self._buffer = bytearray()
        self._consumed = 0  # bytes of the body before the buffer, for error positions

    def feed(self, data: bytes) -> list[tuple[bytes, object]]:
        self._buffer += data
        out = []
        while len(self._buffer) >= HEADER.size:
            kind, reserved, length = HEADER.unpack_from(self._buffer)
            if reserved != b"\0\0\0" or length > MAX_PAYLOAD:
                raise FrameError(f"bad frame header at byte {self._consumed}: "
                                 f"{bytes(self._buffer[:HEADER.size]).hex()}")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            payload = bytes(self._buffer[HEADER.size:end])
            decoded = self._decode(kind, payload)
            if decoded is not None:
                out.append((kind, decoded))
            del self._buffer[:end]
            self._consumed += end
        return out

    def close(self):
        if self._buffer:
            raise FrameError(f"the stream ended inside a frame: {len(self._buffer)} bytes after byte {self._consumed}")

    def _decode(self, kind: bytes, payload: bytes):
        if kind == AUDIO:
            if len(payload) % 2:
                raise FrameError(f"an audio frame at byte {self._consumed} holds half a sample")
            return np.frombuffer(payload, dtype="<i2").astype(np.int16)
        if kind in (META, STATUS):
            try:
                obj = json.loads(payload.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                obj = None
            if not isinstance(obj, dict):
                raise FrameError(f"a {kind.decode()} frame at byte {self._consumed} is not a JSON object")
            return obj
        return None  # a type from a later version: skipped


def read_frames(body: bytes) -> list[tuple[bytes, object]]:
    """A whole framed body at once."""
    reader = FrameReader()
    frames = reader.feed(body)
    reader.close()
    return frames
