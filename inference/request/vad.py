"""Trimming the silence at both ends of a clip with Silero VAD, a small voice-activity model that
ships inside its wheel (no download, CPU only, torch only).

Why: a reference or prompt clip often ends in a breath, room tone or a pause. In ultimate cloning
the model continues from the clip's last patch, so that tail is heard at the start of the speech;
as a reference prefix it colours the voice. Cutting to the first and last detected speech (plus
Silero's own small padding) removes it. Off by default: a clean clip needs nothing, and an edit to
the user's audio should be asked for.
"""
from __future__ import annotations

import logging
import threading

import numpy as np
import torch

from .audio_input import resample

log = logging.getLogger("voxcpm.vad")
VAD_RATE = 16000  # Silero runs at 8 or 16 kHz
_lock = threading.Lock()  # the model keeps recurrent state between windows: one caller at a time
_model = None


def _vad_model():
    global _model
    if _model is None:
        _model = _import_silero().load_silero_vad()
    return _model


def _import_silero():
    """The package, imported on first use (the option is off by default). Its import calls
    torch.set_num_threads(1) for the whole process, which would leave every later CPU inference on
    one thread: the process's thread count is put back."""
    threads = torch.get_num_threads()
    try:
        import silero_vad
    finally:
        torch.set_num_threads(threads)
    return silero_vad


def speech_bounds(audio: np.ndarray, rate: int) -> tuple[int, int] | None:
    """(first sample, one past the last sample) of detected speech at `rate`, or None when the
    detector hears none."""
    get_speech_timestamps = _import_silero().get_speech_timestamps
    probe = audio if rate == VAD_RATE else resample(audio, rate, VAD_RATE)
    with _lock, torch.inference_mode():
        spans = get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(probe, np.float32)),
                                      _vad_model(), sampling_rate=VAD_RATE)
    if not spans:
        return None
    scale = rate / VAD_RATE
    return int(spans[0]["start"] * scale), min(len(audio), int(round(spans[-1]["end"] * scale)))


def trim_silence(audio: np.ndarray, rate: int, label: str = "audio") -> np.ndarray:
    """The clip from its first to its last speech; unchanged when no speech is detected (a clip
    that is all music or noise is the user's choice, and cutting it to nothing would help no one)."""
    bounds = speech_bounds(audio, rate)
    if bounds is None:
        log.info("%s: no speech detected, kept whole (%.2f s)", label, len(audio) / rate)
        return audio
    start, end = bounds
    log.info("%s: trimmed %.2f s before and %.2f s after the speech", label, start / rate, (len(audio) - end) / rate)
    return audio[start:end]
