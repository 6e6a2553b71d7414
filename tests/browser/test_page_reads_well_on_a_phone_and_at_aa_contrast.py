"""The page's findings of issue 45 (item 3) that concern reading it, on a phone and at AA contrast,
each done as the QA engineer did it in Chromium: the pause hint's contrast (and issue 58's Stop and
selected tab), "Use via HTTP" under the
phone's fixed bar, scored words piled on the waveform (and a Tab stop each), and a vertical swipe on
the waveform that logged touchmove errors instead of scrolling."""
from __future__ import annotations

import re
import time
from pathlib import Path

from ..support.workbench_page import app, download, import_edited, page, phone, settled, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"


DRAWN_CONTRAST = """el => {
    const rgba = (s) => { const v = s.match(/[\\d.]+/g).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
    const up = (e) => e.parentElement || (e.getRootNode() instanceof ShadowRoot ? e.getRootNode().host : null);
    let bg = [255, 255, 255];
    for (let e = el; e; e = up(e)) { const c = rgba(getComputedStyle(e).backgroundColor); if (c[3] === 1) { bg = c; break; } }
    let [r, g, b, a] = rgba(getComputedStyle(el).color);
    for (let e = el; e; e = up(e)) a *= Number(getComputedStyle(e).opacity);
    const fg = [r, g, b].map((v, i) => a * v + (1 - a) * bg[i]);
    const lum = (c) => { const [x, y, z] = c.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                         return 0.2126 * x + 0.7152 * y + 0.0722 * z; };
    const [p, q] = [lum(fg), lum(bg)];
    return (Math.max(p, q) + 0.05) / (Math.min(p, q) + 0.05);
}"""


def test_the_pause_hint_the_settings_help_and_the_timeline_read_at_aa_contrast(page):
    take(page, "A take, for its timeline.")
    hint = page.locator("#vox-text").get_by_text("A pause:")
    assert hint.evaluate(DRAWN_CONTRAST) >= 4.5
    page.get_by_text("Advanced settings").scroll_into_view_if_needed()
    helps = page.locator(".gradio-container .info-text").all()
    assert helps and min(h.evaluate(DRAWN_CONTRAST) for h in helps) >= 4.5
    labels = page.locator(f"{WB} [data-wb=timeline] [part~=timeline-notch-secondary]").all()
    assert labels and min(x.evaluate(DRAWN_CONTRAST) for x in labels) >= 4.5


def test_stop_and_the_selected_mode_tab_read_at_aa_contrast(page):
    """Issue 58: Stop's white on the theme's red was 3.76:1 and the selected tab's orange 2.80:1."""
    assert page.locator("#vox-stop").evaluate(DRAWN_CONTRAST) >= 4.5
    for mode in ("cloning", "design"):  # whichever tab is selected
        page.click(f"#vox-tab-{mode}-button")
        selected = page.locator("#vox-modes button[role=tab][aria-selected=true]")
        assert selected.get_attribute("id") == f"vox-tab-{mode}-button"
        assert selected.evaluate(DRAWN_CONTRAST) >= 4.5


def test_on_a_phone_use_via_http_opens_at_the_end_of_the_page(page):
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.wait_for_timeout(300)
        page.evaluate("window.scrollTo(0, document.scrollingElement.scrollHeight)")
        page.wait_for_timeout(300)
        box = page.locator("#vox-http-api summary").bounding_box()
        page.mouse.click(box["x"] + 20, box["y"] + box["height"] / 2)  # as a thumb taps it
        assert page.locator("#vox-http-api").evaluate("d => d.open")
        page.locator("#vox-http-api summary").click()
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})


def _scored_words(page, t: dict, bundle: Path, tmp: Path) -> str:
    """The take's bundle, scored with six misread words close together (as a session that scored it
    saved it), imported as a user does; returns the imported take's id."""
    def scored(report):
        text = report["settings"]["text_as_spoken"]
        spans = [(m.start(), m.end()) for m in re.finditer(r"\w+", text)][:6]
        words = [{"type": "misread", "ref": text[a:b], "heard": f"heard{i}", "span": [a, b], "start": 0.1 + 0.012 * i, "end": 0.11 + 0.012 * i}
                 for i, (a, b) in enumerate(spans)]
        intelligibility = {"available": True, "metric": "wer", "rate": 0.75, "substitutions": 6, "deletions": 0, "insertions": 0,
                           "reference_units": 8, "model": "whisper", "language": "en", "transcript": "…", "words": words}
        report["evaluation"] = {"intelligibility": intelligibility, "similarity": None, "elapsed_s": 0.5,
                                "segments": [{"index": 0, "text": text, "start_s": 0, "intelligibility": intelligibility, "similarity": None}]}
    return import_edited(page, bundle, tmp / "scored-words.zip", scored)


LABEL_BOXES = """prefix => window.workbench.view.regions.getRegions().filter((r) => r.id.startsWith(prefix) && r.content)
    .map((r) => { const b = r.content.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; })"""


def _overlapping(boxes: list) -> list:
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]


def _labels_in_one_row(page, wait_s: float = 5.0) -> tuple[list, dict]:
    """The marks' label boxes and the waveform's, once the labels stand in one row (or wait_s has
    passed: the caller's assertion says how they stand). The plugin places them a task after each
    drawing, so a first look can see the last scale's."""
    deadline = time.monotonic() + wait_s
    while True:
        page.wait_for_timeout(100)
        boxes = page.evaluate(LABEL_BOXES, "e-")
        wave = page.locator(f"{WB} [data-wb=wave-a]").bounding_box()
        if time.monotonic() > deadline or (boxes and len({round(b[1]) for b in boxes}) == 1):
            return boxes, wave


def test_scored_words_neither_pile_up_on_the_waveform_nor_take_a_tab_stop_each(page, tmp_path):
    t = take(page, "One two three four five six seven eight.")
    scored = _scored_words(page, t, download(page, f"{WB} [data-wb=bundle]"), tmp_path)
    assert scored
    boxes, wave = _labels_in_one_row(page)
    assert len(boxes) == 6
    assert not _overlapping(boxes), boxes
    # One row of marks at the top of the waveform, not a pile of labels down over it.
    assert all(wave["y"] - 1 <= b[1] and b[3] <= wave["y"] + 20 for b in boxes), (boxes, wave)
    # On a phone the same marks stand closer: stacked where they would overlap, and in one row
    # again once the window is wide (stacked once, at the scale they were added at, they stayed so).
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.wait_for_timeout(500)
        narrow = page.evaluate(LABEL_BOXES, "e-")
        assert not _overlapping(narrow), narrow
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})
    boxes, wave = _labels_in_one_row(page)
    assert all(wave["y"] - 1 <= b[1] and b[3] <= wave["y"] + 20 for b in boxes), (boxes, wave)
    # The marked words: one Tab stop; arrows move between them, Enter jumps the cursor to the word.
    words = page.locator(f"{WB} [data-wb=eval-text] [data-at]")
    assert words.count() == 6
    assert page.evaluate("[...document.querySelectorAll('#vox-workbench [data-wb=eval-text] [data-at]')].filter((w) => w.tabIndex === 0).length") == 1
    words.first.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.textContent") == words.nth(2).inner_text()
    page.keyboard.press("Enter")
    assert abs(page.evaluate("window.workbench.view.a.getCurrentTime()") - 0.124) < 0.002


def test_on_a_phone_a_vertical_swipe_on_the_waveform_scrolls_the_page_quietly(page, app):
    with phone(page, app) as small:
        take(small)
        wave = f"{WB} [data-wb=wave-a]"
        small.locator(wave).scroll_into_view_if_needed()
        settled(small)
        cdp = small.context.new_cdp_session(small)
        said = []  # what devtools shows: console errors and the browser's interventions ("Ignored attempt to cancel a touchmove…")
        cdp.send("Log.enable")
        cdp.on("Log.entryAdded", lambda e: e["entry"]["level"] in ("error", "warning") and said.append(e["entry"]["text"]))
        small.on("console", lambda m: m.type == "error" and said.append(m.text))
        for rest_ms in (0, 150):  # a quick flick, and a finger that rests a moment before it swipes up
            small.locator(wave).scroll_into_view_if_needed()
            box = small.locator(wave).bounding_box()
            x, y = box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2
            touch = lambda kind, dy=0: cdp.send("Input.dispatchTouchEvent", {  # noqa: E731
                "type": kind, "touchPoints": [] if kind == "touchEnd" else [{"x": x + dy * 0.05, "y": y - dy}]})
            before = small.evaluate("scrollY")
            touch("touchStart")
            small.wait_for_timeout(rest_ms)
            for k in range(1, 16):
                touch("touchMove", k * 12)
                small.wait_for_timeout(16)
            touch("touchEnd")
            small.wait_for_timeout(300)
            assert small.evaluate("scrollY") > before + 50, rest_ms  # the page scrolled
            assert small.evaluate("window.workbench.view.selection") is None, rest_ms  # nothing selected
        assert not said, said
