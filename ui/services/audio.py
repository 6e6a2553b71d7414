"""The audio the routes send, as files and streams: written as PCM, WAV, FLAC, MP3 or Opus. The
audio comes as its listener hears it (ui/http/listen.heard: stretched to the listener's pace,
resampled to the rate sent); this module only encodes it.

The file formats of the OpenAI-style route (`Encoder`), encoded as the chunks arrive, at the rate
the request asked for (`sample_rate`), else at the format's default (`sent_rate`):

    pcm   int16 little-endian, no header, at 24 kHz unless asked: OpenAI's `pcm`, which clients play
          at 24 kHz, having no header to read another rate from
    wav   a 16-bit WAV header whose sizes say "unknown" (0xFFFFFFFF, as streaming servers write
          it), then the same PCM: readers take the data to the end of the stream
    mp3   LAME through libsndfile, 320 kbit/s constant rate, frames sent as they are made
    opus  Ogg Opus through libsndfile, sent page by page (a page holds about a second)
    flac  through libsndfile, sent whole at the end: a FLAC stream may leave its length unknown,
          but libsndfile (so soundfile, the usual Python reader) cannot read such a file

The rates (`SAMPLE_RATES`, each format's in `rates_for`) are the one list the route checks and its
docs name.

libsndfile writes MP3 and Opus front to back; at the end it goes back once to fill in a header
(MP3's Xing/LAME tag). Bytes already sent cannot change, so those rewrites are dropped: the
stream stays a valid file, and decoders take the tag as absent.
"""
from __future__ import annotations

import functools
import io
import struct

import numpy as np
import soundfile as sf



def to_pcm(audio: np.ndarray) -> bytes:
    """float32 [-1, 1] -> int16 little-endian, rounded to nearest (clipping only what overflows)."""
    return np.clip(np.rint(audio * 32767.0), -32768, 32767).astype("<i2").tobytes()


def pcm16(audio: np.ndarray) -> bytes:
    """float audio in [-1, 1] -> int16 little-endian, rounded as the stream rounds it (to_pcm)."""
    return np.clip(np.rint(np.asarray(audio, np.float64) * 32767.0), -32768, 32767).astype("<i2").tobytes()


def wav_header(rate: int, samples: int, info: dict[bytes, str] | None = None) -> bytes:
    """A 16-bit mono PCM WAV header for `samples` samples, with a LIST INFO chunk when `info` has
    tags (INAM title, ISFT software, ICMT comment: what soundfile reads as .title, .software,
    .comment; an offline render's, renders.py)."""
    data = 2 * samples
    chunks = _chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, rate, 2 * rate, 2, 16))
    if info:
        chunks += _chunk(b"LIST", b"INFO" + b"".join(_chunk(tag, text.encode("utf-8") + b"\0")
                                                      for tag, text in info.items()))
    size = 4 + len(chunks) + 8 + data
    if size > 0xFFFFFFFF:
        raise ValueError(f"{samples} samples do not fit a WAV file")
    return b"RIFF" + struct.pack("<I", size) + b"WAVE" + chunks + b"data" + struct.pack("<I", data)


def encode_whole(fmt: str, audio: np.ndarray, rate: int) -> bytes:
    """Audio whose end is known (a live sentence sent whole) as one complete file of `fmt`, its
    header's sizes exact; lossy formats take a while: call it off the event loop."""
    if fmt == "pcm":
        return to_pcm(audio)
    if fmt == "wav":
        return wav_header(rate, len(audio)) + to_pcm(audio)
    container, codec, options = _LIBSNDFILE[fmt]
    out = io.BytesIO()
    with sf.SoundFile(out, "w", rate, 1, format=container, subtype=codec, **options) as f:
        f.write(audio)
    return out.getvalue()


def _chunk(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
# The rates a request may ask for (`sample_rate`), in every format that can carry them.
SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
# OpenAI's pcm is 24 kHz: its clients play it so, with no header to say otherwise. The other
# formats carry their rate, and keep the model's unless asked.
PCM_RATE = 24000
# Ogg Opus runs at 8, 12, 16, 24 or 48 kHz only (libsndfile refuses the others); MP3 (MPEG-1 and 2)
# and the rest take all six.
_FORMAT_RATES = {"opus": (8000, 16000, 24000, 48000)}
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


def rates_for(fmt: str) -> tuple[int, ...]:
    """The rates a format can be sent at."""
    return _FORMAT_RATES.get(fmt, SAMPLE_RATES)


def sent_rate(fmt: str, asked: int | None, model_rate: int) -> int:
    """The rate a response is sent at: the one asked for, else OpenAI's for pcm, else the model's."""
    return asked if asked is not None else PCM_RATE if fmt == "pcm" else model_rate


@functools.cache
def missing_formats() -> tuple[str, ...]:
    """Formats this machine's libsndfile cannot write (it gained MP3 in 1.1.0, Opus in 1.0.29).
    Read once: every OpenAI request and live session checks its format against it, and asking
    libsndfile takes 0.4 ms."""
    have = sf.available_formats()
    return tuple(name for name, (container, codec, _) in _LIBSNDFILE.items()
                 if container not in have or codec not in sf.available_subtypes(container))


class Encoder:
    """encode(float32 audio as its listener hears it, at `rate`) -> bytes ready to send; finish() ->
    the last bytes."""

    def __init__(self, fmt: str, rate: int):
        if rate not in rates_for(fmt):
            raise ValueError(f"{fmt} cannot be sent at {rate} Hz: use one of {rates_for(fmt)}")
        self.fmt, self.rate = fmt, rate
        self._head = open_wav_header(rate) if fmt == "wav" else b""
        self._sink = _Sink() if fmt in _LIBSNDFILE else None
        if self._sink is not None:
            container, codec, options = _LIBSNDFILE[fmt]
            self._file = sf.SoundFile(self._sink, "w", rate, 1, format=container, subtype=codec, **options)

    @property
    def inline(self) -> bool:
        """Cheap enough to run on the event loop: plain PCM."""
        return self.fmt in ("pcm", "wav")

    def encode(self, audio: np.ndarray, pcm: bytes | None = None) -> bytes:
        """The next bytes for `audio`; `pcm`: the same audio as int16 bytes, when already made."""
        head, self._head = self._head, b""
        if self._sink is None:
            return head + (pcm if pcm is not None else to_pcm(audio))
        self._file.write(audio)
        return b"" if self.fmt == "flac" else self._sink.take()

    def finish(self) -> bytes:
        """The last bytes: a header not yet sent (no audio at all), what the codec still holds."""
        if self._sink is None:
            head, self._head = self._head, b""
            return head
        self._file.close()
        return self._sink.take()

    def close(self):
        """Frees the encoder when a stream ends early (its client left)."""
        if self._sink is not None and not self._file.closed:
            self._file.close()


def open_wav_header(rate: int) -> bytes:
    """A WAV header for a stream of unknown length, as streaming servers write it."""
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
