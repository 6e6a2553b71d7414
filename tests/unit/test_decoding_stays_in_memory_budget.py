"""Issue 9, item 4: decoding stays within its memory budget. A small FLAC of 20 s at 192 kHz in 8
channels (123 MB as float32) raised the server's memory by 348 MB per decode; now it is decoded block
by block and mixed down as it goes. Measured with tracemalloc, which sees numpy's allocations."""
from __future__ import annotations

import io
import threading
import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from inference.request.audio_input import load_audio
from ui.library.uploads import UploadStore
from ui.settings import DEFAULTS

from ..support.app_helpers import record_figure

RATE, CHANNELS, SECONDS = 192_000, 8, 20


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """A square wave FLAC compresses to almost nothing and decodes to frames x channels floats."""
    t = np.arange(RATE * SECONDS) / RATE
    wave = np.where(np.sin(2 * np.pi * t) >= 0, 0.5, -0.5).astype(np.float32)
    out = io.BytesIO()
    sf.write(out, np.repeat(wave[:, None], CHANNELS, axis=1), RATE, format="FLAC", subtype="PCM_16")
    return out.getvalue()


def traced_peak(work) -> float:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_one_decode_stays_well_inside_its_budget(bomb):
    store = UploadStore.of(DEFAULTS, 16000)
    assert RATE * SECONDS * CHANNELS * 4 <= store.max_decoded_bytes  # accepted by the header check, so decoded
    results = []
    peak = traced_peak(lambda: results.append(store.add_bytes(bomb)))
    clip = results[0][1]
    assert clip.seconds == pytest.approx(SECONDS) and clip.source_channels == CHANNELS
    assert np.array_equal(clip.audio, load_audio(bomb, target_rate=16000, label="x"))  # the engine's result
    record_figure(f"decode, {len(bomb) // 1024} KB FLAC of {SECONDS} s, {RATE} Hz, {CHANNELS} channels: "
                  f"traced peak {peak:.1f} MiB (budget {store.max_decoded_bytes / 2**20:.0f} MiB)")
    assert peak < 32, f"one decode peaked at {peak:.0f} MiB"


def test_three_parallel_decodes_stay_inside_one_budget(bomb):
    store = UploadStore.of(DEFAULTS, 16000)
    threads = [threading.Thread(target=store.add_bytes, args=(bomb,)) for _ in range(3)]

    def run():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    peak = traced_peak(run)
    assert len(store) == 3
    record_figure(f"decode, three of the same in parallel: traced peak {peak:.1f} MiB")
    assert peak < store.max_decoded_bytes / 2**20 / 2, f"three decodes peaked at {peak:.0f} MiB"
