"""What a QA engineer asked of the compare view (issue 36), done as they do it, on one page and one
take: a recording chosen from a file as B (decoded in the browser at the take's rate; a file that is no
audio gets a message naming it), the per-boundary list (sorted by a click on its header, a threshold
typed in marking the bad ones here and on the waveform, a row's time to jump to, its loop of ±50 ms),
and ABX that plays only the selected region of A and B, equally long and at one loudness."""
from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ..support.workbench_page import app, page, settled, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
RATE = 48000


@pytest.fixture(scope="module")
def shown(page):
    return take(page, "One take to compare.")


def choose_file(page, name: str, data: bytes, mime: str = "audio/wav"):
    """As a user does: a click on "Load a recording as B…", then the file in the chooser."""
    with page.expect_file_chooser() as chooser:
        page.click(f"{WB} label:has([data-wb=b-file])")
    chooser.value.set_files({"name": name, "mimeType": mime, "buffer": data})


def wav(seconds: float, rate: int, channels: list[float], hz: float = 997.0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    out = io.BytesIO()
    sf.write(out, np.stack([a * np.sin(2 * np.pi * hz * t) for a in channels], axis=1), rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


# In the page: an Int16Array as base64 (a list of numbers crosses to Python a thousand times slower),
# and the LUFS of samples as the page's own module measures a region (static/workbench/matched.js; its
# arithmetic is pinned to BS.1770 in test_abx_plays_one_region_at_one_loudness.py).
HELPERS = """window.qaBytes = (pcm) => { const u8 = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength); let s = '';
    for (let i = 0; i < u8.length; i += 8192) s += String.fromCharCode(...u8.subarray(i, i + 8192)); return btoa(s); };
  window.qaLoudness = async (pcm) => (await import('/voxcpm/static/workbench/matched.js')).regionLoudness(pcm, 48000);
  true;"""  # (not the function: evaluate() would call it)


def int16(page, expression: str) -> np.ndarray:
    """The Int16Array an expression gives in the page (it may await)."""
    page.evaluate(HELPERS)
    return np.frombuffer(base64.b64decode(page.evaluate(f"async () => window.qaBytes(await ({expression}))")), np.int16)


PLAYING = "(async () => new Int16Array(await (await fetch(window.workbench.abx.audio.src)).arrayBuffer(), 44))()"


def test_a_recording_from_a_file_is_b_at_the_takes_rate(page, shown):
    # 1.5 s at 16 kHz in stereo (0.24 and 0.16 of full scale): B is its average at 48 kHz, about
    # -17 LUFS (the tiny model's noise is near -10).
    choose_file(page, "reference-16k.wav", wav(1.5, 16000, [0.24, 0.16]))
    page.wait_for_function("window.workbench.lastDifference && document.querySelector("
                           "'#vox-workbench [data-wb=b-source]').value === 'file'", timeout=20_000)
    diff = page.locator(f"{WB} [data-wb=diff]").inner_text()
    assert "reference-16k.wav, 1.50 s, resampled from 16 kHz to 48 kHz, 2 channels averaged" in diff, diff
    assert re.search(r"SNR -?\d+\.\d dB", diff) and "bound" not in diff  # the stream == offline verdict is not for it
    b = int16(page, "window.workbench.compare.recording.pcm").astype(np.float64)
    assert len(b) == 72000
    spectrum = np.abs(np.fft.rfft(b[2400:-2400] * np.hanning(len(b) - 4800)))
    assert abs(np.argmax(spectrum) * RATE / (len(b) - 4800) - 997) < 2  # the same tone, not a third of it
    assert abs(np.abs(b[2400:-2400]).max() / 32767 - 0.2) < 0.005
    assert page.locator(f"{WB} [data-wb=wave-b]").is_visible()
    # No selection yet: A, B and X play all that both hold, B's longer tail cut.
    page.click(f"{WB} [data-wb=abx-play-a]")
    whole_a = int16(page, PLAYING)
    page.click(f"{WB} [data-wb=abx-play-b]")
    assert len(whole_a) == len(int16(page, PLAYING)) == shown["figures"]["samples"] < len(b)

    # Files that are no recording: a message naming the file and what is accepted; B stays as it was.
    for name, data, why in [("notes.wav", b"these are notes, not audio", "could not be decoded as audio"),
                            ("empty.wav", b"", "is empty")]:
        choose_file(page, name, data)
        message = page.locator(f"{WB} [data-wb=message]")
        message.filter(has_text=why).wait_for(timeout=10_000)
        assert f"“{name}”" in message.inner_text() and "WAV, FLAC, OGG or MP3" in message.inner_text()
        beside = page.locator(f"{WB} [data-wb=diff]").inner_text()
        assert beside.startswith(f"“{name}”") and beside.count("B is unchanged: A (take") == 1, beside
    assert page.locator(f"{WB} [data-wb=b-source] option:checked").inner_text() == "loaded: reference-16k.wav"


def test_the_boundary_list_sorts_jumps_loops_and_marks_by_threshold(page, shown):
    scores = shown["scores"]
    rows = page.locator(f"{WB} [data-wb=blist-rows] tr")
    assert rows.count() == len(scores) >= 2
    page.click(f"{WB} [data-wb=blist] button[data-sort=score]")  # worst first
    shown_scores = [float(s) for s in re.findall(r"([\d.]+)×", page.locator(f"{WB} [data-wb=blist-rows]").inner_text())]
    assert shown_scores == sorted((s["score"] for s in scores), reverse=True)
    assert page.get_attribute(f"{WB} th[data-sort-key=score]", "aria-sort") == "descending"
    page.click(f"{WB} [data-wb=blist] button[data-sort=score]")
    assert page.get_attribute(f"{WB} th[data-sort-key=score]", "aria-sort") == "ascending"

    threshold = sorted(s["score"] for s in scores)[len(scores) // 2]  # about half above it
    bad = sum(s["score"] > threshold for s in scores)
    page.fill(f"{WB} [data-wb=blist-threshold]", str(threshold))
    page.press(f"{WB} [data-wb=blist-threshold]", "Tab")
    assert page.locator(f"{WB} [data-wb=blist-count]").inner_text() == f"{bad} of {len(scores)} above {threshold:g}×"
    assert page.locator(f"{WB} [data-wb=blist-rows] tr.vox-wb-bad").count() == bad
    red = page.evaluate("window.workbench.view.regions.getRegions().filter((r) => r.id.startsWith('b-')"
                        " && r.color === '#c62828').length")
    assert red == bad  # the waveform marks the same ones
    page.fill(f"{WB} [data-wb=blist-threshold]", "-1")
    page.press(f"{WB} [data-wb=blist-threshold]", "Tab")
    assert "from 0 to 1000" in page.locator(f"{WB} [data-wb=message]").inner_text()
    assert "It stays at" in page.locator(f"{WB} [data-wb=blist-count]").inner_text()
    assert page.input_value(f"{WB} [data-wb=blist-threshold]") == f"{threshold:g}"

    # Sorted by time again; the second boundary's time jumps there, its loop plays 50 ms either side.
    page.click(f"{WB} [data-wb=blist] button[data-sort=ms]")
    at = scores[1]["offset"] / RATE
    page.click(f"{WB} [data-wb=blist-rows] tr:nth-child(2) button[data-act=jump]")
    assert abs(page.evaluate("window.workbench.view.a.getCurrentTime()") - at) < 1e-3
    page.click(f"{WB} [data-wb=blist-rows] tr:nth-child(2) button[data-act=loop]")
    page.wait_for_function("document.querySelector('#vox-workbench [data-wb=play]').textContent === 'Pause'")
    sel = page.evaluate("[window.workbench.view.selection.start, window.workbench.view.selection.end]")
    assert abs(sel[0] - (at - 0.05)) < 1e-6 and abs(sel[1] - (at + 0.05)) < 1e-6 and page.is_checked(f"{WB} [data-wb=loop]")
    assert page.input_value(f"{WB} [data-wb=region-from]") == f"{(at - 0.05) * 1000:.1f}"
    page.wait_for_timeout(350)  # past the 100 ms loop's end three times
    where = page.evaluate("[window.workbench.view.a.getCurrentTime(), window.workbench.view.a.isPlaying()]")
    page.click(f"{WB} [data-wb=play]")
    assert where[1] and sel[0] - 0.02 <= where[0] <= sel[1] + 0.05, (where, sel)
    page.uncheck(f"{WB} [data-wb=loop]")


def test_abx_plays_the_selected_region_of_both_at_one_loudness(page, shown):
    assert page.input_value(f"{WB} [data-wb=b-source]") == "file"  # B: the 1.5 s recording
    page.fill(f"{WB} [data-wb=region-from]", "100")
    page.fill(f"{WB} [data-wb=region-to]", "600")
    page.click(f"{WB} [data-wb=region-set]")
    page.fill(f"{WB} [data-wb=abx-trials]", "2")
    page.click(f"{WB} [data-wb=abx-start]")
    clip = page.locator(f"{WB} [data-wb=abx-clip]").inner_text()
    assert clip.startswith("A, B and X play 100.0–600.0 ms of both") and "turned down" in clip, clip
    page.click(f"{WB} [data-wb=abx-play-x]")
    x = int16(page, PLAYING)
    page.click(f"{WB} [data-wb=abx-play-a]")
    clip_a = int16(page, PLAYING)
    matched = [page.evaluate(f"async () => window.qaLoudness(await {PLAYING})")]
    page.click(f"{WB} [data-wb=abx-play-b]")
    clip_b = int16(page, PLAYING)
    matched.append(page.evaluate(f"async () => window.qaLoudness(await {PLAYING})"))
    assert len(x) == len(clip_a) == len(clip_b) == 24000
    assert np.array_equal(x, clip_a) or np.array_equal(x, clip_b)
    raw = [page.evaluate(f"() => window.qaLoudness({side}.slice(4800, 28800))") for side in
           ("new Int16Array(window.workbench.selected.pcm)", "window.workbench.compare.recording.pcm")]
    assert abs(raw[0] - raw[1]) > 1 and abs(matched[0] - matched[1]) < 0.1, (raw, matched)

    page.click(f"{WB} [data-wb=abx-answer-a]")
    page.click(f"{WB} [data-wb=abx-answer-b]")
    page.wait_for_function("window.workbench.selected.abx.length === 2")
    trials = page.evaluate("window.workbench.selected.abx")
    assert all(t["from_ms"] == 100 and t["to_ms"] == 600 and t["b"] == "file" for t in trials), trials
    assert min(trials[0]["gain_a_db"], trials[0]["gain_b_db"]) == pytest.approx(-abs(raw[0] - raw[1]), abs=0.05)


def test_screenshots_of_the_compare_tools(page, shown):
    """For a person to look at, desktop and phone: B loaded from a file, the boundary list, the ABX line.
    On the phone the list and the file button stay inside the screen's width."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(f"{WB} [data-wb=blist]").scroll_into_view_if_needed()
    page.locator(f"{WB} [data-wb=view]").screenshot(path=str(ARTIFACTS / "compare-tools-desktop.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        settled(page, f"{WB} [data-wb=blist]")
        page.locator(f"{WB} [data-wb=blist]").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "compare-tools-phone.png"))
        for part in ("blist", "abx-clip"):
            box = page.locator(f"{WB} [data-wb={part}]").bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (part, box)
        assert page.evaluate("(el => el.scrollWidth <= el.clientWidth)(document.querySelector("
                             "'#vox-workbench .vox-wb-blist-box'))")  # every column in sight, no sideways scroll
        button = page.locator(f"{WB} label:has([data-wb=b-file])").bounding_box()
        assert button["x"] + button["width"] <= 390, button
        page.locator(f"{WB} [data-wb=b-file]").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "compare-tools-phone-b.png"))
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})
    assert page.errors == []
