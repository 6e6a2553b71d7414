"""The audio the routes send, after the model made it: time-stretched for `speed`, and written
as PCM, WAV, FLAC, MP3 or Opus. Here rather than in the serving layer: these are the HTTP API's
output formats and its `speed` parameter, applied to finished audio on the event loop's side; the
engine and the worker never see them.

`speed` (`Stretcher`): the stream time-stretched without changing its pitch, chunk by chunk as it is made.

audiotsm's WSOLA (waveform-similarity overlap-add) keeps its state between calls (read_from /
write_to / flush_to), so each patch is stretched as it arrives and the output does not depend on
where the patches were cut: the joins are those of one continuous stretch, with no gap or click.
Its latency is about one analysis frame; the last frame is pushed through with silence at the end
and the whole output cut to the input's length over the speed, so a 2 s take at speed 0.5 lasts
exactly 4 s. Speed 1.0 is the untouched audio (no stretcher runs).

Frames of 1024 samples (21 ms, two periods of a low voice) advance by 256 in the output, so that
even at speed 4 the frames read from the input still touch (audiotsm leaves gaps, heard as clicks,
once its input hop passes the frame); the alignment search spans +-256 samples, a whole period
down to 94 Hz. audiotsm rounds the input hop to whole samples: the two hops are picked so that
their ratio is the speed within about 1e-4, or a minute would drift by many milliseconds.

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
docs name. Another rate than the model's is made by soxr's streaming resampler (`Resampler`), patch
by patch after the time-stretch, so a patch is sent as soon as it is made; soxr holds back part of
it (its filter and its processing blocks: up to 36 ms at 16 and 24 kHz, 150 ms at 8 kHz) until the
next patch or the end.

libsndfile writes MP3 and Opus front to back; at the end it goes back once to fill in a header
(MP3's Xing/LAME tag). Bytes already sent cannot change, so those rewrites are dropped: the
stream stays a valid file, and decoders take the tag as absent.
"""
from __future__ import annotations

import struct

import anyio
import numpy as np
import soundfile as sf
import soxr
from audiotsm import wsola
from audiotsm.io.array import ArrayReader, ArrayWriter

FRAME, HOP, TOLERANCE = 1024, 256, 256  # samples at 48 kHz; HOP is the largest output hop tried


def hops(speed: float) -> tuple[int, int]:
    """(output hop, input hop): whole samples whose ratio is nearest the speed, input hop <= FRAME."""
    pairs = ((out, round(out * speed)) for out in range(HOP * 3 // 4, HOP + 1) if round(out * speed) <= FRAME)
    return min(pairs, key=lambda pair: (abs(pair[1] / pair[0] - speed), -pair[0]))


class Stretcher:
    """feed(float32 mono chunk) -> the stretched audio ready so far; finish() -> the rest."""

    def __init__(self, speed: float = 1.0):
        self.speed = float(speed)
        self._tsm = None
        if self.speed != 1.0:
            synthesis, analysis = hops(self.speed)
            self._tsm = wsola(1, frame_length=FRAME, synthesis_hop=synthesis, analysis_hop=analysis,
                              tolerance=TOLERANCE)
        self._in = self._out = 0

    @property
    def active(self) -> bool:
        return self._tsm is not None

    def feed(self, audio: np.ndarray) -> np.ndarray:
        if self._tsm is None:
            return audio
        self._in += len(audio)
        return self._counted(self._run(audio))

    async def feed_async(self, audio: np.ndarray) -> np.ndarray:
        """feed, off the event loop when there is work to do (a few ms per patch at low speeds)."""
        return await anyio.to_thread.run_sync(self.feed, audio) if self.active else audio

    def finish(self) -> np.ndarray:
        if self._tsm is None:
            return np.zeros(0, np.float32)
        tail = [self._run(np.zeros(4 * FRAME, np.float32))]  # past the frame and its search window
        writer, done = ArrayWriter(1), False
        while not done:
            done = self._tsm.flush_to(writer)[1]
        tail.append(writer.data[0])
        want = max(round(self._in / self.speed) - self._out, 0)
        out = np.concatenate(tail)[:want]
        return self._counted(np.pad(out, (0, want - len(out))))

    def placed(self, samples: int) -> dict:
        """Where the audio just fed lies in the stretched stream, for its metadata frame: the
        frames' offsets and lengths are those of the audio sent (none to change at speed 1)."""
        return {} if self._tsm is None else {"offset": self._out - samples, "samples": samples, "speed": self.speed}

    def status(self, final: dict) -> dict:
        """The status frame of a stretched stream: the job's figures (the model's samples and RTF,
        its segment ends already in the audio sent), with the samples this stretch really sent."""
        return final if self._tsm is None else {**final, "output_samples": self._out}

    def _run(self, audio: np.ndarray) -> np.ndarray:
        reader, writer, finished = ArrayReader(audio[None, :].astype(np.float32)), ArrayWriter(1), False
        while not (finished and reader.empty):
            self._tsm.read_from(reader)
            finished = self._tsm.write_to(writer)[1]
        return writer.data[0]

    def _counted(self, out: np.ndarray) -> np.ndarray:
        self._out += len(out)
        return out.astype(np.float32, copy=False)


def to_pcm(audio: np.ndarray) -> bytes:
    """float32 [-1, 1] -> int16 little-endian, rounded to nearest (clipping only what overflows)."""
    return np.clip(np.rint(audio * 32767.0), -32768, 32767).astype("<i2").tobytes()


def pcm16(audio: np.ndarray) -> bytes:
    """float audio in [-1, 1] -> int16 little-endian, rounded as the stream rounds it (to_pcm)."""
    return np.clip(np.rint(np.asarray(audio, np.float64) * 32767.0), -32768, 32767).astype("<i2").tobytes()


def wav_header(rate: int, samples: int, info: dict[bytes, str]) -> bytes:  # an offline render's (renders.py)
    """A 16-bit mono PCM WAV header for `samples` samples, with a LIST INFO chunk (tags such as
    INAM title, ISFT software, ICMT comment: what soundfile reads as .title, .software, .comment)."""
    data = 2 * samples
    listing = b"INFO" + b"".join(_chunk(tag, text.encode("utf-8") + b"\0") for tag, text in info.items())
    chunks = _chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, rate, 2 * rate, 2, 16)) + _chunk(b"LIST", listing)
    size = 4 + len(chunks) + 8 + data
    if size > 0xFFFFFFFF:
        raise ValueError(f"{samples} samples do not fit a WAV file")
    return b"RIFF" + struct.pack("<I", size) + b"WAVE" + chunks + b"data" + struct.pack("<I", data)


def _chunk(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


class Resampler:
    """feed(float32 mono chunk at `source` Hz) -> the audio at `rate` Hz that soxr has ready;
    finish() -> the rest. soxr's stream keeps its filter's state between calls, so the output is
    that of one continuous resampling wherever the patches were cut, and its total length is the
    input's at the new rate. At the same rate nothing runs."""

    def __init__(self, source: int, rate: int):
        self._soxr = None if source == rate else soxr.ResampleStream(source, rate, 1, dtype="float32", quality="HQ")

    def feed(self, audio: np.ndarray) -> np.ndarray:
        if self._soxr is None:
            return audio
        return self._soxr.resample_chunk(np.ascontiguousarray(audio, np.float32))

    def finish(self) -> np.ndarray:
        if self._soxr is None:
            return np.zeros(0, np.float32)
        return self._soxr.resample_chunk(np.zeros(0, np.float32), last=True)


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


def missing_formats() -> list[str]:
    """Formats this machine's libsndfile cannot write (it gained MP3 in 1.1.0, Opus in 1.0.29)."""
    have = sf.available_formats()
    return [name for name, (container, codec, _) in _LIBSNDFILE.items()
            if container not in have or codec not in sf.available_subtypes(container)]


class Encoder:
    """feed(float32 chunk at the model's rate, `source`) -> bytes ready to send; finish() -> the
    last bytes. At a speed other than 1 the audio is time-stretched first (`Stretcher`, above), then
    resampled to `rate` where that is not the model's (`Resampler`)."""

    def __init__(self, fmt: str, source: int, speed: float = 1.0, rate: int | None = None):
        rate = source if rate is None else rate
        if rate != source and rate not in rates_for(fmt):
            raise ValueError(f"{fmt} cannot be sent at {rate} Hz: use one of {rates_for(fmt)}")
        self.fmt, self.rate = fmt, rate
        self._stretch = Stretcher(speed)
        self._resample = Resampler(source, rate)
        self._head = open_wav_header(rate) if fmt == "wav" else b""
        self._sink = _Sink() if fmt in _LIBSNDFILE else None
        if self._sink is not None:
            container, codec, options = _LIBSNDFILE[fmt]
            self._file = sf.SoundFile(self._sink, "w", rate, 1, format=container, subtype=codec, **options)

    @property
    def inline(self) -> bool:
        """Cheap enough to run on the event loop: plain PCM, not stretched (resampling a patch
        takes soxr 0.05 to 0.15 ms)."""
        return self.fmt in ("pcm", "wav") and not self._stretch.active

    def feed(self, audio: np.ndarray) -> bytes:
        return self._encode(self._resample.feed(self._stretch.feed(audio)))

    def _encode(self, audio: np.ndarray) -> bytes:
        head, self._head = self._head, b""
        if self._sink is None:
            return head + to_pcm(audio)
        self._file.write(audio)
        return b"" if self.fmt == "flac" else self._sink.take()

    def finish(self) -> bytes:
        rest = self._stretch.finish()
        rest = np.concatenate([self._resample.feed(rest), self._resample.finish()])  # the filter's tail
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
