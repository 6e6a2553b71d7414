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


def test_a_region_typed_in_ms_downloads_as_those_samples(page):
    take(page)
    pcm = _pcm(page)
    page.fill(f"{WB} [data-wb=region-from]", "100")
    page.fill(f"{WB} [data-wb=region-to]", "350.5")
    page.press(f"{WB} [data-wb=region-to]", "Enter")
    sel = page.evaluate("[window.workbench.view.selection.start, window.workbench.view.selection.end]")
    assert abs(sel[0] - 0.1) < 1e-6 and abs(sel[1] - 0.3505) < 1e-6
    assert "selection 100.0–350.5 ms" in page.locator(f"{WB} [data-wb=readout]").inner_text()
    with page.expect_download() as info:
        page.click(f"{WB} [data-wb=region-wav]")
    path = page.downloads / info.value.suggested_filename
    info.value.save_as(path)
    import soundfile as sf
    got, rate = sf.read(path, dtype="int16")
    assert rate == 48000 and path.name.endswith("-100-351ms.wav") and np.array_equal(got, pcm[4800:16824])


def test_markers_with_notes_are_kept_with_the_take(page):
    take(page)
    page.locator(f"{WB} [data-wb=wave-a]").focus()
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("m")  # a marker at 200 ms; its note field takes the focus
    page.keyboard.type("breath too loud")
    page.keyboard.press("Tab")  # the note is kept on change
    page.wait_for_function("window.workbench.selected.markers?.[0]?.note === 'breath too loud'")
    shown = page.evaluate("window.workbench.selected.id")
    page.reload()
    page.wait_for_selector("#vox-generate")
    from .workbench_page import ready
    ready(page)
    page.wait_for_function("id => window.workbench.selected?.id === id", arg=shown)
    assert page.evaluate("window.workbench.selected.markers") == [{"ms": 200, "note": "breath too loud"}]
    assert page.evaluate("window.workbench.view.marks('m-')") == [9600]
    assert page.locator(f"{WB} [data-wb=markers] input").input_value() == "breath too loud"
