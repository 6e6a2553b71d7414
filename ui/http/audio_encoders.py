"""Audio file formats for the OpenAI-style route, encoded as the chunks arrive.

    pcm   int16 little-endian, no header (what OpenAI's `pcm` is, at our rate)
    wav   a 16-bit WAV header whose sizes say "unknown" (0xFFFFFFFF, as streaming servers write
          it), then the same PCM: readers take the data to the end of the stream
    mp3   LAME through libsndfile, 320 kbit/s constant rate, frames sent as they are made
    opus  Ogg Opus through libsndfile, sent page by page (a page holds about a second)
    flac  through libsndfile, sent whole at the end: a FLAC stream may leave its length unknown,
          but libsndfile (so soundfile, the usual Python reader) cannot read such a file

libsndfile writes MP3 and Opus front to back; at the end it goes back once to fill in a header
(MP3's Xing/LAME tag). Bytes already sent cannot change, so those rewrites are dropped: the
stream stays a valid file, and decoders take the tag as absent.
"""
from __future__ import annotations

import struct

import numpy as np
import soundfile as sf

from .common import to_pcm
from .speed import Stretcher

FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
# OpenAI's formats not offered here, with the reason the refusal gives (docs/api.md, "The OpenAI-compatible
# API"). No library here encodes AAC; the one wheel that would (PyAV, FFmpeg inside) is 36 MB,
# 106 MB installed, mostly video codecs: too much for a format that any of the five replaces.
NOT_OFFERED = {"aac": "aac would need an FFmpeg encoder, which this server does not ship"}
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg", "opus": "audio/ogg"}
_LIBSNDFILE = {  # format: (container, codec, options)
    "flac": ("FLAC", "PCM_16", {}),
    "mp3": ("MP3", "MPEG_LAYER_III", {"compression_level": 0.0, "bitrate_mode": "CONSTANT"}),
    "opus": ("OGG", "OPUS", {"compression_level": 0.0}),
}


def missing_formats() -> list[str]:
    """Formats this machine's libsndfile cannot write (it gained MP3 in 1.1.0, Opus in 1.0.29)."""
    have = sf.available_formats()
    return [name for name, (container, codec, _) in _LIBSNDFILE.items()
            if container not in have or codec not in sf.available_subtypes(container)]


class Encoder:
    """feed(float32 chunk) -> bytes ready to send; finish() -> the last bytes. At a speed other
    than 1 the audio is time-stretched first (ui/http/speed.py)."""

    def __init__(self, fmt: str, rate: int, speed: float = 1.0):
        self.fmt, self.rate = fmt, rate
        self._stretch = Stretcher(speed)
        self._head = wav_header(rate) if fmt == "wav" else b""
        self._sink = _Sink() if fmt in _LIBSNDFILE else None
        if self._sink is not None:
            container, codec, options = _LIBSNDFILE[fmt]
            self._file = sf.SoundFile(self._sink, "w", rate, 1, format=container, subtype=codec, **options)

    @property
    def inline(self) -> bool:
        """Cheap enough to run on the event loop: plain PCM, not stretched."""
        return self.fmt in ("pcm", "wav") and not self._stretch.active

    def feed(self, audio: np.ndarray) -> bytes:
        return self._encode(self._stretch.feed(audio))

    def _encode(self, audio: np.ndarray) -> bytes:
        head, self._head = self._head, b""
        if self._sink is None:
            return head + to_pcm(audio)
        self._file.write(audio)
        return b"" if self.fmt == "flac" else self._sink.take()

    def finish(self) -> bytes:
        rest = self._stretch.finish()
        out = self._encode(rest) if rest.size else b""
        if self._sink is None:
            head, self._head = self._head, b""
            return out + head
        self._file.close()
        return out + self._sink.take()

    def close(self):
        """Frees the encoder when a stream ends early (its client left)."""
        if self._sink is not None and not self._file.closed:
            self._file.close()


def wav_header(rate: int) -> bytes:
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)  # PCM, mono, bytes/s, block align, bits
    return b"RIFF" + struct.pack("<I", unknown) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + \
        b"data" + struct.pack("<I", unknown)


class _Sink:
    """A write-only file for libsndfile: keeps what was written in order until taken; a write over
    bytes already there (a header filled in at the end) changes them only if not yet taken."""

    def __init__(self):
        self._data = bytearray()
        self._taken = 0  # bytes handed out, counted from the start of the file
        self._pos = 0

    def write(self, data) -> int:
        data = bytes(data)
        end = self._pos + len(data)
        start = max(self._pos, self._taken)
        if end > start:
            size = self._taken + len(self._data)
            if end > size:
                self._data.extend(b"\0" * (end - size))
            offset = start - self._taken
            self._data[offset:offset + end - start] = data[start - self._pos:]
        self._pos = end
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._taken + len(self._data)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:  # libsndfile only writes here
        return b""

    def take(self) -> bytes:
        out = bytes(self._data)
        self._taken += len(out)
        self._data.clear()
        return out
