"""Uploaded reference clips, kept in memory under random ids that expire.

The page never sends a server path and never re-sends the audio: a clip is uploaded once (through
Gradio's audio component or the HTTP upload route), checked and converted here, and referred to by
its id. Conversion is the engine's own (inference.request.audio_input), done at upload so that a clip the
engine would refuse is refused at once, and so that the store holds 16 kHz mono rather than, say,
eight channels at 192 kHz.
"""
from __future__ import annotations

import io
import ipaddress
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from inference.errors import InputError
from inference.request.audio_input import MAX_CHANNELS, MAX_RATE, MIN_RATE, decode_mono, resample
from inference.request.reference import ReferenceClip

from ..settings import ClipSettings, Settings
from ..guard.limits import too_large
from ..guard.answers import Refusal
from .transcripts import content_hash

log = logging.getLogger("voxcpm.uploads")
FORMATS = "WAV, FLAC, OGG or MP3"
LABEL = "the uploaded audio"


@dataclass
class Clip:
    sample_rate: int  # of `audio`: the engine's input rate
    audio: np.ndarray  # float32 mono, exactly what the engine's own conversion gives
    expires_at: float
    source_rate: int = 0
    source_channels: int = 1
    client: str | None = None  # whose share it counts against (client_key)
    reference: ReferenceClip | None = None  # the audio with its encoded patches (inference/request/reference.py)
    digest: str = ""  # its content hash (ui/library/transcripts.py)
    transcripts: dict[str, str] = field(default_factory=dict)  # ASR model -> automatic transcript (UploadStore)

    @property
    def seconds(self) -> float:
        return self.audio.shape[0] / self.sample_rate

    def __post_init__(self):
        # One ReferenceClip for the clip's lifetime: it is encoded once, however often it is used.
        self.reference = ReferenceClip(self.sample_rate, self.audio)
        self.digest = content_hash(self.audio)

    def as_engine_input(self) -> ReferenceClip:
        return self.reference


def read_mono(data: bytes, max_seconds: float, max_decoded_bytes: float, min_seconds: float) -> tuple[int, int, np.ndarray]:
    """Bytes of an audio file -> (rate, channels, float32 mono), decoded and checked as the engine
    does it. The header is checked before decoding, so a file that claims hours of audio, an absurd
    rate or more channels than the budget allows costs nothing. max_decoded_bytes: what one decode
    may cost, counted as if every channel were held as float32 (frames x channels x 4, from the
    header); decoding goes block by block and mixes down as it goes, so it really holds only the
    mono float32 and one block. min_seconds: a product rule for uploads (the engine itself takes any
    length), as a shorter clip holds no voice."""
    if not data:
        raise InputError("the uploaded file is empty (0 bytes)")
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            rate, channels = int(f.samplerate), f.channels
            _check_header(rate, channels, f.frames, max_seconds, max_decoded_bytes, min_seconds)
            mono = decode_mono(f, LABEL)
    except InputError:
        raise
    except Exception:  # libsndfile's reasons are terse; the user needs to know what to send instead
        raise InputError(f"the uploaded file could not be read as audio: use {FORMATS}") from None
    return rate, channels, mono


def _check_header(rate: int, channels: int, frames: int, max_seconds: float, max_decoded_bytes: float,
                  min_seconds: float):
    if not MIN_RATE <= rate <= MAX_RATE:
        raise InputError(f"{LABEL} has a sample rate of {rate} Hz; the supported range is "
                         f"{MIN_RATE} Hz to {MAX_RATE} Hz")
    if not 1 <= channels <= MAX_CHANNELS:
        raise InputError(f"{LABEL} has {channels} channels; at most {MAX_CHANNELS} are supported")
    if frames <= 0:
        raise InputError(f"{LABEL} has no samples")
    if frames / rate < min_seconds:
        raise InputError(f"{LABEL} lasts only {frames / rate * 1000:.0f} ms: give a few seconds of clear speech")
    if frames / rate > max_seconds:
        raise InputError(f"{LABEL} lasts {frames / rate:.1f} s; the limit is {max_seconds:g} s: trim it "
                         "(5 to 20 s of speech is plenty)")
    if frames * channels * 4 > max_decoded_bytes:
        raise InputError(f"{LABEL} decodes to {frames * channels * 4 / 2**20:.0f} MiB; the limit is "
                         f"{max_decoded_bytes / 2**20:.0f} MiB: send fewer channels or a lower sample rate")


def read_uploaded_file(path: str, root: str, max_bytes: int) -> bytes:
    """The bytes of a file the client says it uploaded, if it lies inside `root` (Gradio's upload
    folder): a client must never get the server to read any other file."""
    resolved, folder = Path(path).resolve(), Path(root).resolve()
    if not resolved.is_relative_to(folder) or not resolved.is_file():
        raise InputError("only clips uploaded or recorded through this page can be used: upload it again")
    if resolved.stat().st_size > max_bytes:
        raise InputError(f"the upload is larger than the limit of {max_bytes // 2**20} MiB")
    return resolved.read_bytes()


def decode_audio(data: bytes, max_seconds: float, target_rate: int = 16000) -> tuple[int, np.ndarray]:
    """Bytes of a file the caller holds itself (a fixture, a file on disk) -> (target_rate, float32
    mono) as the engine converts it, or an InputError that says what is wrong (silent, NaN,
    out-of-range rate, too long...). Only max_seconds bounds it: what a client sends goes through
    an UploadStore, which holds the settings' budget for a decode."""
    rate, _, mono = read_mono(data, max_seconds, math.inf, 0.0)
    return target_rate, resample(mono, rate, target_rate)


class StoreFull(Refusal):
    """An upload refused for want of room: its client's share is used up (429) or the server's (503)."""


def client_key(address: str | None) -> str | None:
    """Whose share a clip counts against: the client's address (the real one behind a trusted proxy,
    as uvicorn's proxy headers give it). An IPv6 client usually holds a whole /64, so that is one key."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)


class UploadStore:
    """Thread-safe id -> Clip map with expiry and caps on how many clips and bytes are held, in all
    and per client. A full store refuses new clips rather than evicting anyone's: one client
    uploading in a loop used to push every other user's clip out."""

    def __init__(self, clips: ClipSettings, *, max_seconds: float, max_bytes: int, target_rate: int):
        """clips: the settings' section; max_seconds: the longest clip the engine takes; max_bytes:
        the largest file; target_rate: the engine's input rate, which clips are converted to."""
        self.ttl_s = clips.upload_ttl_s
        self.max_clips = clips.max_clips
        self.max_per_client = clips.clips_per_client
        self.max_total_bytes = clips.max_total_mb * 2**20  # converted float32 held at once
        self.min_seconds = clips.min_seconds
        self.max_decoded_bytes = clips.max_decoded_mb * 2**20
        self.decodes = clips.decodes
        self.max_seconds = max_seconds
        self.max_bytes = max_bytes
        self.target_rate = target_rate
        self._clips: OrderedDict[str, Clip] = OrderedDict()
        self._lock = threading.Lock()
        # Decoding a long 192 kHz file briefly needs ~100 MiB: a few at a time, however many arrive.
        self._decoding = threading.BoundedSemaphore(clips.decodes)

    @classmethod
    def of(cls, settings: Settings, target_rate: int) -> UploadStore:
        """The store a settings tree asks for: its clips' section, its longest clip (the served
        limits) and its largest upload."""
        return cls(settings.clips, max_seconds=settings.limits.max_audio_seconds,
                   max_bytes=settings.http.max_upload_mb * 2**20, target_rate=target_rate)

    def add_bytes(self, data: bytes, client: str | None = None) -> tuple[str, Clip]:
        if len(data) > self.max_bytes:
            raise InputError(too_large("upload", self.max_bytes))
        with self._lock:  # refused before decoding, so a refusal costs nothing
            self._purge()
            self._check_room(client, 0)
        rate, channels, audio = self._converted(data)
        clip_id, clip = self.add(self.target_rate, audio, client)
        clip.source_rate, clip.source_channels = rate, channels
        return clip_id, clip

    def unkept(self, data: bytes) -> Clip:
        """A clip decoded and checked as add_bytes does it, but not stored: one request's own (the
        file a Gradio API call sends with it), held by that request alone, so it takes no room
        from anyone's share of the store."""
        if len(data) > self.max_bytes:
            raise InputError(too_large("upload", self.max_bytes))
        rate, channels, audio = self._converted(data)
        return Clip(self.target_rate, audio, math.inf, source_rate=rate, source_channels=channels)

    def _converted(self, data: bytes) -> tuple[int, int, np.ndarray]:
        """(source rate, source channels, float32 mono at the engine's rate), within the limit on decodes at once."""
        with self._decoding:  # the engine's own decoding and refusals, once, at upload
            rate, channels, mono = self._read(data, self.max_seconds)
            # The source's mono (up to 46 MB at 192 kHz) goes with this frame: only the converted clip is held.
            return rate, channels, resample(mono, rate, self.target_rate)

    def decode(self, data: bytes, max_seconds: float, rate: int | None = None) -> tuple[int, np.ndarray]:
        """A clip decoded as add_bytes decodes one, within the same limit on decodes at once, and not
        kept (what POST /voxcpm/transcribe sends, or a take to score): (rate, float32 mono), at
        `rate` or else the engine's."""
        if len(data) > self.max_bytes:
            raise InputError(too_large("upload", self.max_bytes))
        rate = rate or self.target_rate
        with self._decoding:
            source_rate, _, mono = self._read(data, max_seconds)
            return rate, resample(mono, source_rate, rate)

    def _read(self, data: bytes, max_seconds: float) -> tuple[int, int, np.ndarray]:
        return read_mono(data, max_seconds, self.max_decoded_bytes, self.min_seconds)

    def add(self, rate: int, audio: np.ndarray, client: str | None = None) -> tuple[str, Clip]:
        clip = Clip(rate, audio, time.monotonic() + self.ttl_s, source_rate=rate, client=client)
        clip_id = secrets.token_urlsafe(16)
        with self._lock:
            self._purge()
            self._check_room(client, audio.nbytes)
            self._clips[clip_id] = clip
        return clip_id, clip

    def _check_room(self, client: str | None, nbytes: int):
        mine = sum(1 for c in self._clips.values() if c.client == client)
        if mine >= self.max_per_client:
            refusal = StoreFull(429, f"you already have {mine} clips stored, the most one client may keep; each "
                                     f"expires {self.ttl_s / 60:g} min after its upload: reuse one, or try again later")
        elif len(self._clips) >= self.max_clips or self._held_bytes() + nbytes > self.max_total_bytes:
            refusal = StoreFull(503, "the server holds as many clips as it can right now; try again in a few minutes")
        else:
            return
        log.warning("refused a clip from %s: %s", client, refusal)
        raise refusal

    def get(self, clip_id: str) -> Clip:
        with self._lock:
            self._purge()
            clip = self._clips.get(clip_id)
        if clip is None:
            raise InputError("the reference clip has expired or was never uploaded: upload it again")
        return clip

    def transcript(self, digest: str, model: str) -> str | None:
        """The automatic transcript by `model` kept with a stored clip of this content (the same
        audio uploaded again finds it too), or None."""
        with self._lock:
            return next((c.transcripts[model] for c in self._clips.values()
                         if c.digest == digest and model in c.transcripts), None)

    def keep_transcript(self, clip: Clip, model: str, text: str):
        with self._lock:
            clip.transcripts[model] = text

    def __len__(self) -> int:
        with self._lock:
            self._purge()
            return len(self._clips)

    def _held_bytes(self) -> int:
        return sum(c.audio.nbytes for c in self._clips.values())

    def _purge(self):
        now = time.monotonic()
        for clip_id in [k for k, c in self._clips.items() if c.expires_at <= now]:
            del self._clips[clip_id]
