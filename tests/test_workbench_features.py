"""What a QA engineer expects of the listening-QA workbench beyond issue 22's fixes, in the browser:
level figures per take, a region typed in ms exported as WAV, markers with notes kept with the
take, a take list with rating, tags, rename, filter, CSV of every take's figures and bundle import,
the A−B difference waveform; and screenshots at desktop and phone size (tests/artifacts)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .workbench_page import app, page, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def _pcm(page) -> np.ndarray:
    return np.asarray(page.evaluate("Array.from(new Int16Array(window.workbench.selected.pcm))"), np.int16)


def test_levels_of_a_take(page):
    take(page)
    pcm = _pcm(page)
    m = page.evaluate("window.workbench.selected.measures")
    head = page.locator(f"{WB} [data-wb=head]").inner_text()
    assert re.search(r"Levels: -?\d+\.\d LUFS integrated, true peak -?\d+\.\d dBTP, \d+ clipped samples", head), head
    assert m["clipped_samples"] == int(np.sum((pcm >= 32767) | (pcm <= -32768)))
    assert abs(m["dc_offset"] - pcm.mean() / 32768) < 1e-9
    assert m["true_peak_dbtp"] >= 20 * np.log10(np.abs(pcm.astype(int)).max() / 32768) - 1e-9
    try:
        import pyloudnorm
    except ImportError:
        return
    assert abs(m["lufs"] - pyloudnorm.Meter(48000).integrated_loudness(pcm / 32768.0)) < 0.05
