"""The listening-QA workbench in headless Chromium with the tiny random model: takes that survive a
reload, boundary marks at the offsets the server's frames gave, A/B that keeps the play position,
the offline render's difference shown and within its bound, ABX answers recorded, a boundary
discontinuity (injected here, in the test) flagged, an underrun (a slowed engine, also the test's
doing) reported in amber, and exports (JSON + curl, WAV with its settings, zip) that reproduce the
take. Screenshots at desktop and phone size go to tests/artifacts."""
from __future__ import annotations

import io
import json
import re
import subprocess
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ui.http.frames import AUDIO, frame, json_frame

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, load_engine, set_max_len
from ..fixtures.frames import read_frames
from ..support.page_handles import click_generate, take_handles

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PATCH = 7680
# test_page_plays_every_mode skips (outside CI) without Playwright or Chromium, as this module must.
from .test_page_plays_every_mode import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(prebuffer_ms=80, engine=load_engine(max_streams=2))


@pytest.fixture(scope="module")
def page(app, tmp_path_factory):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1100}, accept_downloads=True)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.goto(app.url + "/")
        _ready(page)
        set_max_len(page, 6)
        page.downloads = tmp_path_factory.mktemp("downloads")
        yield page
        browser.close()


def _ready(page):
    take_handles(page)
    page.wait_for_function("window.workbench.view", timeout=30_000)


def _take(page, text: str | None = "Hello world, this is a test.") -> dict:
    if text is not None:  # None: the text already in the form
        page.fill("#vox-text textarea", text)
    click_generate(page)
    page.wait_for_function("window.player.run && ['finished', 'failed', 'stopped'].includes(window.player.run.state)"
                           " && window.workbench.selected && window.workbench.selected.id === window.player.run.id",
                           timeout=60_000)
    return page.evaluate("""() => { const t = window.workbench.selected;
        return { ...t, pcm: Array.from(new Int16Array(t.pcm)), marks: window.workbench.view.marks('b-'),
                 gaps: window.workbench.view.marks('u-'), run: window.player.snapshot() }; }""")


def test_takes_survive_a_reload_with_marks_at_the_frame_offsets(page):
    first, second = _take(page), _take(page, "A second take, to compare.")
    for take in (first, second):
        offsets = [b["offset"] for b in take["boundaries"]]
        assert offsets == [PATCH * i for i in range(len(offsets))] and len(offsets) == take["figures"]["patches"]
        assert take["marks"] == offsets[1:]  # a mark at every boundary the server's frames gave
        assert take["settings"]["model"] == "tiny random model" and take["settings"]["app_version"]
        assert take["settings"]["seed"] == take["run"]["seed"] and len(take["pcm"]) == take["run"]["samples"]
    page.reload()
    _ready(page)
    page.wait_for_function("window.workbench.takes.length >= 2")
    ids = page.evaluate("window.workbench.takes.map((t) => t.id)")
    assert ids[-2:] == [first["id"], second["id"]]
    rows = page.locator("#vox-workbench [data-take]")
    assert rows.count() == len(ids) and rows.first.get_attribute("data-take") == second["id"]  # newest first
    set_max_len(page, 6)


def test_offline_render_difference_is_shown_and_ab_keeps_the_position(page):
    page.select_option("#vox-workbench [data-wb=b-source]", "offline")
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    d = page.evaluate("window.workbench.lastDifference")
    assert d["lengthA"] == d["lengthB"] and d["maxAbs"] <= 1 and d["snrDb"] > 60
    shown = page.locator("#vox-workbench [data-wb=diff]").inner_text()
    assert "offline render" in shown and "within the bound" in shown and re.search(r"SNR \d+\.\d dB", shown)
    position = page.evaluate("""async () => { const v = window.workbench.view;
        v.switchTo('A', false); v.a.setTime(0.35); await v.a.play();
        await new Promise((r) => setTimeout(r, 150));
        const before = v.a.getCurrentTime(); v.switchTo('B'); const after = v.b.getCurrentTime();
        const playing = v.b.isPlaying() && !v.a.isPlaying(); v.stop();
        return { before, after, playing, readout: document.querySelector('[data-wb=readout]').textContent }; }""")
    assert position["before"] > 0.35 and abs(position["after"] - position["before"]) < 0.03 and position["playing"]
    assert re.search(r"^[AB] at \d+\.\d ms \(sample \d+\)", position["readout"])


def test_abx_records_answers(page):
    page.fill("#vox-workbench [data-wb=abx-trials]", "1")  # sessions of one trial: each scored as answered
    page.click("#vox-workbench [data-wb=abx-start]")
    page.click("#vox-workbench [data-wb=abx-play-x]")
    page.click("#vox-workbench [data-wb=abx-answer-a]")
    page.click("#vox-workbench [data-wb=abx-start]")
    page.click("#vox-workbench [data-wb=abx-answer-b]")
    page.wait_for_function("window.workbench.selected.abx.length === 2")
    trials = page.evaluate("window.workbench.selected.abx")
    assert [t["answer"] for t in trials] == ["A", "B"] and all(t["correct"] == (t["x"] == t["answer"]) for t in trials)
    right = sum(t["correct"] for t in trials)
    # The score line is redrawn after the answer is stored: wait for it rather than read it at once.
    page.wait_for_function("t => document.querySelector('#vox-workbench [data-wb=abx-score]').innerText.includes(t)",
                           arg=f"All sessions of this take: {right} of 2 correct", timeout=10_000)
    stored = page.evaluate("""async () => (await window.workbench.store.list())
        .find((t) => t.id === window.workbench.selected.id).abx.length""")
    assert stored == 2


def test_exports_reproduce_the_take(app, page):
    take = page.evaluate("({ ...window.workbench.selected, pcm: null })")
    pcm = np.asarray(page.evaluate("Array.from(new Int16Array(window.workbench.selected.pcm))"), np.int16)
    page.fill("#vox-workbench [data-wb=notes] ", "a click near 0.5 s?")
    page.locator("#vox-workbench [data-wb=notes]").dispatch_event("change")
    page.click("#vox-workbench [data-wb=copy]")
    copied = page.evaluate("window.workbench.copied")
    report = json.loads(copied[:copied.index("\n\ncurl ")])
    assert report["settings"] == take["settings"] and report["figures"]["samples"] == pcm.size
    curl = copied[copied.index("\n\ncurl ") + 2:].split("\n")[0]
    assert report["reproduce"]["curl"].startswith(curl)
    out = page.downloads / "repro.s16le"
    subprocess.run(curl.replace(curl.split(" -o ")[1], str(out)), shell=True, check=True, timeout=120)
    assert np.array_equal(np.fromfile(out, dtype="<i2"), pcm)  # the curl command gives the same samples
    wav = _download(page, "wav")
    assert re.fullmatch(rf"voxcpm2-design-seed{take['settings']['seed']}-cfg2-steps10-take\d+\.wav", wav.name)
    with sf.SoundFile(wav) as f:
        assert np.array_equal(f.read(dtype="int16"), pcm) and f.title.startswith("VoxCPM2 take")
        meta = json.loads(f.comment)
    assert meta["settings"] == take["settings"] and meta["reproduce"]["seed"] == int(take["settings"]["seed"])
    with zipfile.ZipFile(_download(page, "bundle")) as z:
        names = z.namelist()
        assert any(n.endswith("-offline.wav") for n in names) and any(n.endswith("-stream.wav") for n in names)
        assert z.read(next(n for n in names if n.endswith("-notes.txt"))) == b"a click near 0.5 s?"
        offline = sf.read(io.BytesIO(z.read(next(n for n in names if n.endswith("-offline.wav")))), dtype="int16")[0]
    assert offline.shape == pcm.shape and np.max(np.abs(offline.astype(int) - pcm)) <= 1


def test_reuse_settings_puts_a_take_back_in_the_form_and_gives_it_again(page):
    first = page.evaluate("window.workbench.takes[0].id")  # not the newest: its row is not the selected one
    take = page.evaluate("id => window.workbench.takes.find((t) => t.id === id).settings", first)
    # Move the form away from the take: another length, another tab and text, and the advanced
    # settings closed (Gradio then need not have their sliders drawn).
    set_max_len(page, 5)
    page.get_by_text("Advanced settings").click()
    page.get_by_role("tab", name="Controllable cloning").click()
    page.fill("#vox-text textarea", "Something else entirely.")
    page.click(f"#vox-workbench [data-take='{first}'] button[data-act=reuse]")
    page.wait_for_function("t => document.querySelector('#vox-text textarea').value === t", arg=take["text"])
    assert page.get_by_role("tab", name="Voice design").get_attribute("aria-selected") == "true"
    again = _take(page, text=None)
    body = again["run"]["body"]
    assert body["mode"] == "design" and body["text"] == take["text"] and body["seed"] == int(take["seed"])
    for name in ("cfg_value", "inference_timesteps", "max_len"):
        assert body[name] == take[name], name
    pcm = page.evaluate("id => Array.from(new Int16Array(window.workbench.takes.find((t) => t.id === id).pcm))", first)
    assert again["pcm"] == pcm  # the same settings and seed: the same samples
    page.get_by_text("Advanced settings").click()  # open again: the values Gradio was handed are drawn
    max_len, random_seed = page.locator("#vox-max-len input[type=number]"), page.locator("#vox-random-seed input")
    max_len.wait_for()
    # Random seed was on before the re-use: back on once the take with the fixed seed has arrived.
    assert max_len.input_value() == str(take["max_len"])
    page.wait_for_function("document.querySelector('#vox-random-seed input').checked")


def _download(page, button: str) -> Path:
    with page.expect_download() as info:
        page.click(f"#vox-workbench [data-wb={button}]")
    path = page.downloads / info.value.suggested_filename
    info.value.save_as(path)
    return path


def test_an_injected_discontinuity_is_flagged(page):
    def inject(route):
        body = route.fetch().body()
        frames, out, index = read_frames(body), b"", 0
        for kind, value in frames:  # quieter audio, and patch 3 shifted up: a step at its start
            if kind == AUDIO:
                value = (value // 20 + (8000 if index == 3 else 0)).astype("<i2")
                out += frame(AUDIO, value.tobytes())
                index += 1
            else:
                out += json_frame(kind, value)
        route.fulfill(status=200, headers={"content-type": "application/vnd.voxcpm.frames",
                                           "x-sample-rate": "48000", "x-seed": "1"}, body=out)
    page.route("**/voxcpm/stream", inject)
    try:
        take = _take(page)
    finally:
        page.unroute("**/voxcpm/stream")
    flagged = [s["offset"] for s in take["scores"] if s["flagged"]]
    # The shifted patch's start, and its end unless it was the last patch.
    assert flagged == [3 * PATCH, 4 * PATCH][: 1 + (take["figures"]["patches"] > 4)]
    assert take["figures"]["flagged_boundaries"] == len(flagged) and take["marks"] == [b["offset"] for b in take["boundaries"]][1:]
    red = page.evaluate("window.workbench.view.regions.getRegions().filter((r) => r.color === '#c62828').length")
    assert red == len(flagged)  # drawn in red on the waveform
    text = page.locator("#vox-workbench [data-wb=boundaries]").inner_text()
    assert f"{len(flagged)} flagged" in text and f"{3 * PATCH / 48:.0f} ms" in text
    assert f"{len(flagged)} flagged" in page.locator("#vox-workbench [data-take]").first.inner_text()


def test_underruns_end_amber_with_their_gaps(app, page):
    engine = app.worker.engine
    step = engine.step

    def slow_step():  # slower than real time: the player runs dry between patches
        time.sleep(0.3)
        return step()
    engine.step = slow_step
    try:
        take = _take(page)
    finally:
        del engine.step
    status = page.locator("#vox-panel [data-field=status]")
    gaps = take["figures"]["underruns"]
    assert gaps > 0 and status.get_attribute("data-kind") == "warn"
    assert re.fullmatch(rf"Finished with {gaps} gaps? \(\d+ ms\)", status.inner_text())
    assert len(take["gaps"]) == gaps and take["figures"]["gap_ms"] > 0
    _screens(page)
    assert page.errors == []


def _screens(page):
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#vox-workbench").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "workbench-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / "workbench-phone-top.png"))
    page.screenshot(path=str(ARTIFACTS / "workbench-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1100})


# WCAG 2.1 contrast (relative luminance of sRGB colours), computed from the styles Chromium applies.
CONTRAST_JS = """sel => {
    const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const lum = c => { const [r, g, b] = c.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                       return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
    const background = el => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
                                 if (!/rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') return c; } return 'rgb(255, 255, 255)'; };
    const el = document.querySelector(sel);
    const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(rgb(background(el)))];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


@pytest.mark.parametrize("selector", ["#vox-generate", "#vox-panel .vox-note", "#vox-panel .vox-footnote"])
def test_text_meets_wcag_aa_contrast(page, selector):
    if not page.locator(selector).count():
        pytest.fail(f"{selector} is not on the page")
    assert page.evaluate(CONTRAST_JS, selector) >= 4.5, selector


def test_focus_is_visible_and_controls_are_named(page):
    page.keyboard.press("Shift")  # a keyboard user: :focus-visible applies to what gets focus next
    page.focus("#vox-generate")
    ring = page.evaluate("() => { const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth, s.boxShadow]; }")
    assert (ring[0] != "none" and ring[1] != "0px") or ring[2] != "none", ring
    for selector in ["#vox-panel audio", "#vox-panel [role=meter]"]:
        for el in page.locator(selector).all():
            assert (el.get_attribute("aria-label") or el.get_attribute("aria-labelledby")), selector
