"""Uploaded reference clips, kept in memory under random ids that expire.

The page never sends a server path and never re-sends the audio: a clip is uploaded once (through
Gradio's audio component or the HTTP upload route), decoded here, and referred to by its id.
"""
from __future__ import annotations

import io
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from inference.errors import InputError

FORMATS = "WAV, FLAC, OGG or MP3"


@dataclass
class Clip:
    sample_rate: int
    audio: np.ndarray  # float32, [samples] or [samples, channels]: the engine mixes down and resamples
    expires_at: float

    @property
    def seconds(self) -> float:
        return self.audio.shape[0] / self.sample_rate

    def as_engine_input(self) -> tuple[int, np.ndarray]:
        return self.sample_rate, self.audio


def decode_audio(data: bytes, max_seconds: float) -> tuple[int, np.ndarray]:
    """Bytes of an audio file to (rate, float32 samples), or an InputError that says what is wrong."""
    if not data:
        raise InputError("the uploaded file is empty")
    try:
        audio, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=False)
    except Exception:  # libsndfile's reasons are terse; the user needs to know what to send instead
        raise InputError(f"the uploaded file could not be read as audio: use {FORMATS}") from None
    if audio.shape[0] == 0:
        raise InputError("the uploaded audio has no samples")
    if not np.all(np.isfinite(audio)):
        raise InputError("the uploaded audio holds invalid (NaN or infinite) samples")
    if audio.shape[0] / rate > max_seconds:
        raise InputError(f"the uploaded audio lasts {audio.shape[0] / rate:.1f} s; the limit is {max_seconds:g} s")
    return int(rate), audio


class UploadStore:
    """Thread-safe id -> Clip map with expiry and a cap on how many clips are held."""

    def __init__(self, ttl_s: float = 1800.0, max_clips: int = 256, max_seconds: float = 60.0,
                 max_bytes: int = 25 * 2**20, max_total_bytes: int = 512 * 2**20):
        self.ttl_s = ttl_s
        self.max_clips = max_clips
        self.max_total_bytes = max_total_bytes  # decoded float32 held at once; the oldest go first
        self.max_seconds = max_seconds
        self.max_bytes = max_bytes
        self._clips: OrderedDict[str, Clip] = OrderedDict()
        self._lock = threading.Lock()

    def add_bytes(self, data: bytes) -> tuple[str, Clip]:
        if len(data) > self.max_bytes:
            raise InputError(f"the upload is larger than the limit of {self.max_bytes // 2**20} MiB")
        rate, audio = decode_audio(data, self.max_seconds)
        return self.add(rate, audio)

    def add(self, rate: int, audio: np.ndarray) -> tuple[str, Clip]:
        clip = Clip(rate, audio, time.monotonic() + self.ttl_s)
        clip_id = secrets.token_urlsafe(16)
        with self._lock:
            self._purge()
            self._clips[clip_id] = clip
            while len(self._clips) > self.max_clips or (
                    len(self._clips) > 1 and self._held_bytes() > self.max_total_bytes):
                self._clips.popitem(last=False)
        return clip_id, clip

    def get(self, clip_id: str) -> Clip:
        with self._lock:
            self._purge()
            clip = self._clips.get(clip_id)
        if clip is None:
            raise InputError("the reference clip has expired or was never uploaded: upload it again")
        return clip

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
