"""Host-side timing of streamed requests, and a synthetic reference voice."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import soundfile as sf


def stream_timings(make_stream) -> dict:
    """Times one streamed request from the call that starts it to each chunk's arrival on the host."""
    start = time.perf_counter()
    arrivals = []
    stream = make_stream()
    for _ in stream:
        arrivals.append(time.perf_counter())
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return {"ttfp": arrivals[0] - start, "gaps": gaps, "total": arrivals[-1] - start, "chunks": len(arrivals)}


def first_chunk_seconds(make_stream) -> float:
    start = time.perf_counter()
    stream = make_stream()
    next(iter(stream))
    elapsed = time.perf_counter() - start
    close = getattr(stream, "close", None)
    if close:
        close()
    return elapsed


def median(values) -> float:
    return float(np.median(values))


def p90(values) -> float:
    return float(np.percentile(values, 90))


def synthetic_voice(path: Path, seconds: float, rate: int = 16000) -> str:
    """A voiced-like test signal: harmonics of a gliding pitch with vibrato, syllable envelope, noise."""
    t = np.arange(int(seconds * rate)) / rate
    pitch = 140 + 30 * np.sin(2 * math.pi * 0.3 * t) + 4 * np.sin(2 * math.pi * 5.5 * t)
    phase = 2 * math.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.55 + 0.45 * np.sin(2 * math.pi * 3.1 * t) ** 2
    rng = np.random.default_rng(0)
    audio = 0.2 * voice * envelope + 0.005 * rng.standard_normal(t.shape)
    sf.write(str(path), audio.astype(np.float32), rate, subtype="PCM_16")
    return str(path)
