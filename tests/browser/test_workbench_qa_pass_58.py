"""The listening-QA workbench's findings of issue 58, each done as the QA engineer did it in Chromium,
on one page. The words that play late are in test_page_words_late.py (they need the aligner)."""
from __future__ import annotations

import math
import re
from pathlib import Path

from ..support.workbench_page import app, download, drag, page, settled, take  # noqa: F401 (fixtures)
from .test_workbench_findings import choose_b_file, tone

WB = "#vox-workbench"


def test_a_take_filtered_out_of_the_list_says_so_on_screen(page):
    take(page, "A take about apples.")
    pears = take(page, "A take about pears.")
    page.fill(f"{WB} [data-wb=filter]", "apples")
    notice = page.locator(f"{WB} [data-wb=filtered]")
    notice.wait_for()
    assert f"Take {pears['n']} is filtered out of the list" in notice.inner_text(), notice.inner_text()
    assert page.evaluate("window.workbench.selected.id") == pears["id"]  # still on screen, and saying so
    page.click(f"{WB} [data-wb=filter-clear]")
    notice.wait_for(state="hidden")
    assert page.input_value(f"{WB} [data-wb=filter]") == ""
    assert pears["id"] in page.evaluate("window.workbench.listed().map((t) => t.id)")


# The element in focus: [its data-wb or data-act (else its tag), its aria-label].
FOCUSED = "() => { const e = document.activeElement; return [e.dataset.wb || e.dataset.act || e.tagName, e.getAttribute('aria-label')]; }"


def _removed(page, left: int) -> list:
    """Until the marker list shows `left` rows (a row goes once its removal is saved, a moment after
    the take drops the marker): then where the focus is."""
    page.wait_for_function("n => document.querySelectorAll('#vox-workbench [data-wb=markers] li').length === n", arg=left)
    return page.evaluate(f"({FOCUSED})()")


def test_removing_markers_by_keyboard_keeps_the_focus_on_the_next_marker(page):
    take(page, "A take to mark three times, then unmark by keyboard.")
    page.focus(f"{WB} [data-wb=wave-a]")
    page.keyboard.press("Home")
    for key in ("1", "2", "3"):  # a click, a glitch and a mispronunciation, 300 ms apart
        page.keyboard.press(key)
        for _ in range(3):
            page.keyboard.press("ArrowRight")
    assert len(page.evaluate("window.workbench.selected.markers")) == 3
    page.focus(f"{WB} [data-wb=markers] li[data-index='1'] button[data-act=remove]")
    page.keyboard.press("Enter")  # M2 goes: M3 is now M2, and its Remove has the focus
    assert _removed(page, 2) == ["remove", "Remove marker 2"]
    assert page.evaluate("window.workbench.selected.markers[1].kind") == "mispronunciation"
    said = page.locator(f"{WB} [data-wb=message]").inner_text()
    assert "Removed M2 glitch" in said and "M3 is now M2" in said, said
    page.keyboard.press("Enter")  # the last one goes: the one before it takes the focus
    assert _removed(page, 1) == ["remove", "Remove marker 1"]
    page.keyboard.press("Enter")  # none left: the waveform, where markers are made
    assert _removed(page, 0)[0] == "wave-a"


def test_brackets_say_where_they_went_beside_the_waveform_in_view(page):
    take(page, "A take whose boundaries are all flagged at a low threshold.")
    page.fill(f"{WB} [data-wb=blist-threshold]", "0.1")
    page.locator(f"{WB} [data-wb=blist-threshold]").dispatch_event("change")
    # The QA engineer's view: the waveform in the middle of the window, the toolbar far above it.
    page.evaluate("document.querySelector('#vox-workbench [data-wb=wave-a]').scrollIntoView({ block: 'center' })")
    page.focus(f"{WB} [data-wb=wave-a]")
    page.keyboard.press("Home")
    page.keyboard.press("]")
    said = page.locator(f"{WB} [data-wb=wave-said]")
    said.filter(has_text=re.compile(r"Flagged boundary at \d+\.\d ms")).wait_for()
    box, wave = said.bounding_box(), page.locator(f"{WB} [data-wb=wave-a]").bounding_box()
    height = page.evaluate("innerHeight")
    assert 0 <= box["y"] and box["y"] + box["height"] <= height, (box, height)
    assert 0 <= wave["y"] - (box["y"] + box["height"]) < 40, (box, wave)  # just above the waveform
    assert page.locator(f"{WB} [data-wb=message]").inner_text() == ""  # not said twice
    page.fill(f"{WB} [data-wb=blist-threshold]", "6")
    page.locator(f"{WB} [data-wb=blist-threshold]").dispatch_event("change")


# The labels a time axis shows: [left, right, text] of each label's text that its clipped box lets
# be seen, in order.
LABELS = """selector => [...document.querySelectorAll(selector + ' [part~=timeline-notch]')].filter((n) => n.textContent)
    .map((n) => { const r = document.createRange(); r.selectNodeContents(n); const b = r.getBoundingClientRect();
                  const clip = n.closest('[part=timeline]').getBoundingClientRect();
                  return b.right <= clip.right + 1 && b.left >= clip.left - 1 ? [b.left, b.right, n.textContent] : null; })
    .filter(Boolean).sort((x, y) => x[0] - y[0])"""


def _zoom(page, px: int):
    page.evaluate("px => { const z = document.querySelector('#vox-workbench [data-wb=zoom]'); z.value = px;"
                  " z.dispatchEvent(new Event('input', { bubbles: true })); }", px)
    page.wait_for_function("px => Math.abs(window.workbench.view.a.options.minPxPerSec - window.workbench.view.pxPerSec()) < 0.01"
                           " && Math.abs(window.workbench.view.b.options.minPxPerSec - window.workbench.view.pxPerSec()) < 0.01", arg=px)
    page.wait_for_function("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))")


def test_time_axis_labels_never_overlap_whatever_the_zoom(page):
    take(page, "A take held against a recording of twenty seconds.")
    choose_b_file(page, "twenty-seconds.wav", tone(20.0))
    page.wait_for_function("window.workbench.lastDifference && window.workbench.view.b.getDuration() === 20", timeout=30_000)
    for px in (100, 20, 400, 3000):  # the default zoom first: a 20 s axis is drawn at it
        _zoom(page, px)  # at 20 the 20 s fill the width: 60 px/s
        assert page.evaluate("window.workbench.view.pxPerSec()") == max(px, page.evaluate(
            "document.querySelector('#vox-workbench [data-wb=wave-a]').clientWidth / 20"))
        for axis in ("timeline", "timeline-b"):  # A's runs as far as A (under a second), B's its 20 s
            labels = page.evaluate(LABELS, f"{WB} [data-wb={axis}]")
            assert len(labels) >= (2 if axis == "timeline-b" else 1), (px, axis, labels)
            crowded = [(a, b) for a, b in zip(labels, labels[1:]) if a[1] + 4 > b[0]]
            assert not crowded, (px, axis, crowded[:3])
        # B's axis runs on past A's end (under a second), as far as the window shows of B's 20 s.
        start, end = page.evaluate("""() => { const v = window.workbench.view, px = v.pxPerSec();
            return [v.a.getScroll() / px, (v.a.getScroll() + document.querySelector('#vox-workbench [data-wb=wave-a]').clientWidth) / px]; }""")
        last = float(page.evaluate(LABELS, f"{WB} [data-wb=timeline-b]")[-1][2])
        assert min(end, 20) - 1.5 <= last <= min(end, 20), (px, start, end, last)
    _zoom(page, 100)
    page.select_option(f"{WB} [data-wb=b-source]", "")


def test_b_has_a_label_saying_what_it_is_and_a_time_axis(page):
    first = take(page, "The take that will be B.")
    second = take(page, "The take on screen, A.")
    page.select_option(f"{WB} [data-wb=b-source]", "offline")
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    label = page.locator(f"{WB} [data-wb=b-label]")
    assert label.inner_text() == f"B: offline render of take {second['n']}"
    label_box, wave_b = label.bounding_box(), page.locator(f"{WB} [data-wb=wave-b]").bounding_box()
    assert 0 <= wave_b["y"] - (label_box["y"] + label_box["height"]) < 12, (label_box, wave_b)
    axis = page.locator(f"{WB} [data-wb=timeline-b]")
    assert axis.is_visible() and 0 <= axis.bounding_box()["y"] - (wave_b["y"] + wave_b["height"]) < 12
    # The same times at the same places as A's axis: B is on A's time axis.
    assert [x[2] for x in page.evaluate(LABELS, f"{WB} [data-wb=timeline-b]")] == \
        [x[2] for x in page.evaluate(LABELS, f"{WB} [data-wb=timeline]")]
    page.select_option(f"{WB} [data-wb=b-source]", first["id"])
    label.filter(has_text=f"B: take {first['n']}").wait_for()
    page.select_option(f"{WB} [data-wb=b-source]", "")
    label.wait_for(state="hidden")
    assert axis.is_hidden()


# Which fonts draw an element's text, and how many of its glyphs each (what devtools' Computed tab lists).
def _fonts(page, selector: str) -> dict:
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    return {f["familyName"]: f["glyphCount"] for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]}


def test_the_difference_has_a_scale_and_db_reads_as_db(page):
    first = take(page, "The take that will be B, for the difference.")
    take(page, "The take on screen, against it.")
    page.select_option(f"{WB} [data-wb=b-source]", first["id"])
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    steps = page.evaluate("window.workbench.lastDifference.maxAbs")
    assert steps > 0
    marks = page.locator(f"{WB} [data-wb=diff-scale] span")
    assert marks.all_inner_texts() == [f"+{steps}", "0", f"−{steps}"]
    strip = page.locator(f"{WB} [data-wb=wave-d]").bounding_box()
    top, bottom = marks.first.bounding_box(), marks.last.bounding_box()
    assert abs(top["y"] - strip["y"]) < 4 and abs(bottom["y"] + bottom["height"] - strip["y"] - strip["height"]) < 4, (top, bottom, strip)
    line = page.locator(f"{WB} [data-wb=diff-label]").inner_text()
    dbfs = f"{20 * math.log10(steps / 32767):.1f} dBFS"
    assert f"±{steps} steps ({dbfs})" in line, line
    # Semibold, as the strip's title is: every letter of it from one face, none from the fallback
    # (Gradio's semibold file holds A and B alone among the capitals: "dB" was drawn "dʙ").
    fonts = _fonts(page, f"{WB} [data-wb=diff-label]")
    fallback = sum(n for family, n in fonts.items() if not family.startswith("Source Sans"))
    assert fallback <= sum(not c.isascii() for c in line), (fonts, line)
    page.select_option(f"{WB} [data-wb=b-source]", "")


def _abx_session(page, trials: int = 1):
    page.fill(f"{WB} [data-wb=abx-trials]", str(trials))
    page.click(f"{WB} [data-wb=abx-start]")
    for _ in range(trials):
        page.click(f"{WB} [data-wb=abx-answer-a]")
    page.locator(f"{WB} [data-wb=abx-score]").filter(has_text="this session").wait_for()


def test_an_abx_result_names_its_b_and_region_and_goes_stale_when_either_changes(page):
    first = take(page, "The take that will be B, blind.")
    take(page, "The take on screen, listened to blind.")
    page.select_option(f"{WB} [data-wb=b-source]", first["id"])
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    drag(page, f"{WB} [data-wb=wave-a]", 0.2, 0.6)
    start, end = page.evaluate("[window.workbench.view.selection.start, window.workbench.view.selection.end]")
    _abx_session(page)
    score = page.locator(f"{WB} [data-wb=abx-score]")
    said = score.inner_text()
    assert f"B: take {first['n']}" in said and f"{start * 1000:.1f}–{end * 1000:.1f} ms" in said, said
    assert score.get_attribute("data-stale") == "false"
    # Another region: the result is for the region before, and says so.
    drag(page, f"{WB} [data-wb=wave-a]", 0.1, 0.3)
    score.filter(has_text="Stale: the region has changed").wait_for()
    assert f"B: take {first['n']}" in score.inner_text() and score.get_attribute("data-stale") == "true"
    # Back to that region, then another B: stale again, for B.
    page.evaluate("([s, e]) => window.workbench.view.select(s, e)", [start, end])
    score.filter(has_text="ABX, this session").wait_for()
    page.select_option(f"{WB} [data-wb=b-source]", "offline")
    score.filter(has_text="Stale: B has changed").wait_for()
    page.select_option(f"{WB} [data-wb=b-source]", "")


def test_abx_is_played_and_answered_with_the_keys(page):
    take(page, "A take to listen to blind with the keys.")
    page.select_option(f"{WB} [data-wb=b-source]", "offline")
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    # The help lists them.
    page.focus(f"{WB} [data-wb=wave-a]")
    page.keyboard.press("?")
    help_text = page.locator(f"{WB} [data-wb=help]").inner_text()
    assert re.search(r"a / b / x\s+ABX.*play A / B / X", help_text) and re.search(r"1 / 2\s+ABX.*X is A / X is B", help_text), help_text
    page.keyboard.press("Escape")
    markers = len(page.evaluate("window.workbench.selected.markers || []"))
    page.fill(f"{WB} [data-wb=abx-trials]", "2")
    page.click(f"{WB} [data-wb=abx-start]")
    for key in ("x", "a", "b"):
        page.keyboard.press(key)
        page.wait_for_function("key => window.workbench.abx.side === key", arg=key.upper())
    assert page.evaluate("document.querySelector('#vox-workbench').dataset.active") == "A"  # b played B: no switch
    page.keyboard.press("1")
    page.wait_for_function("window.workbench.abx.session?.answers.length === 1")
    page.keyboard.press("2")
    page.locator(f"{WB} [data-wb=abx-score]").filter(has_text="this session").wait_for()
    answers = page.evaluate("window.workbench.selected.abx.slice(-2).map((t) => t.answer)")
    assert answers == ["A", "B"]
    assert len(page.evaluate("window.workbench.selected.markers || []")) == markers  # no marker made by 1 or 2
    # Outside a session, on the waveform, 1 is a marker again.
    page.focus(f"{WB} [data-wb=wave-a]")
    page.keyboard.press("1")
    page.wait_for_function("n => window.workbench.selected.markers.length === n + 1", arg=markers)
    page.select_option(f"{WB} [data-wb=b-source]", "")


def _drop(page, selector: str, path):
    """A file dragged from the desktop and let go over the element, as the browser gets it."""
    page.locator(selector).scroll_into_view_if_needed()
    box = page.locator(selector).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    cdp = page.context.new_cdp_session(page)
    data = {"items": [], "files": [str(path)], "dragOperationsMask": 1}
    for kind in ("dragEnter", "dragOver", "drop"):
        cdp.send("Input.dispatchDragEvent", {"type": kind, "x": x, "y": y, "data": data})


def test_files_dropped_on_import_and_load_as_b_are_taken_and_elsewhere_never_open(page, tmp_path):
    t = take(page, "A take to export, delete and drop back.")
    bundle = download(page, f"{WB} [data-wb=bundle]")
    page.click(f"{WB} [data-take='{t['id']}'] button[data-act=delete]")
    page.wait_for_function("id => !window.workbench.takes.some((x) => x.id === id)", arg=t["id"])
    url = page.url
    _drop(page, f"{WB} label:has([data-wb=import])", bundle)
    page.wait_for_function("id => window.workbench.selected?.id === id", arg=t["id"])
    assert "Imported the bundle" in page.locator(f"{WB} [data-wb=message]").inner_text()
    wav = tmp_path / "dropped-reference.wav"
    wav.write_bytes(tone(1.0))
    _drop(page, f"{WB} label:has([data-wb=b-file])", wav)
    page.wait_for_function("document.querySelector('#vox-workbench [data-wb=b-source]').value === 'file'"
                           " && window.workbench.lastDifference", timeout=20_000)
    assert "dropped-reference.wav" in page.locator(f"{WB} [data-wb=diff]").inner_text()
    # Dropped on the workbench's introduction: not opened in place of the page, and told where to drop.
    _drop(page, f"{WB} .vox-wb-intro", wav)
    note = page.locator("#vox-drop-note")
    note.wait_for()
    assert "Import bundle" in note.inner_text() and "Load a recording as B" in note.inner_text()
    page.wait_for_timeout(300)
    assert page.url == url and page.evaluate("window.workbench.selected?.id") == t["id"]
    page.select_option(f"{WB} [data-wb=b-source]", "")


def test_a_clip_dropped_on_its_box_is_still_taken_there(page):
    """The page's guard against stray drops leaves Gradio's own drop zones to themselves."""
    clip = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
    page.get_by_role("tab", name="Ultimate cloning").click()
    url = page.url
    _drop(page, "#vox-ultimate-audio", clip)
    page.wait_for_function("document.querySelector('#vox-ultimate-ref textarea, #vox-ultimate-ref input').value.length > 10",
                           timeout=30_000)
    assert page.url == url
    page.get_by_role("tab", name="Voice design").click()
