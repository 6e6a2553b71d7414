"""Pauses on the page (headless Chromium): the workbench marks each pause's silence on the waveform
where the stream's frames put it, lists the pauses between the segments (a click seeks to the
silence), the panel's text as spoken keeps the tags, and the text box says how to write one."""
from __future__ import annotations

from ..support.workbench_page import app, page, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"
TEXT = "Hello there. [pause 500ms] How are you? <break time='250ms'/>"


def spans(boundaries: list[dict]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b in boundaries:
        if b.get("pause") and out and sum(out[-1]) == b["offset"]:
            out[-1] = (out[-1][0], out[-1][1] + b["samples"])
        elif b.get("pause"):
            out.append((b["offset"], b["samples"]))
    return out


def test_the_workbench_and_the_panel_show_where_the_pauses_fall(page):
    t = take(page, TEXT)
    assert t["outcome"] == "finished", t["status"]
    silence = spans(t["boundaries"])
    assert [n for _, n in silence] == [24000, 12000]
    assert page.evaluate("window.workbench.view.marks('p-')") == [start for start, _ in silence]
    labels = page.evaluate("window.workbench.view.regions.getRegions().filter((r) => r.id.startsWith('p-'))"
                           ".map((r) => r.content && r.content.textContent)")
    assert labels == ["pause 500 ms", "pause 250 ms"]
    items = page.locator(f"{WB} [data-wb=segments] li")
    assert items.all_inner_texts() == ["Hello there.", "⏸ pause 500 ms", "How are you?", "⏸ pause 250 ms"]
    # One Tab stop for the list (issue 58: one each made the page's Tab order long); arrows move in it.
    assert [i.evaluate("li => li.tabIndex") for i in items.all()] == [0, -1, -1, -1]
    items.nth(0).focus()
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.textContent") == "⏸ pause 500 ms"
    items.nth(3).click()
    assert abs(page.evaluate("window.workbench.view.a.getCurrentTime()") * 48000 - silence[1][0]) < 48
    spoken = page.locator("#vox-panel [data-field='spoken_text']").text_content()
    assert spoken == "Hello there. [pause 500ms] How are you? <break time='250ms'/>"
    assert t["figures"]["patches"] == sum(not b.get("pause") for b in t["boundaries"])
    # A pause's edges are no clicks: not scored, not marked as boundaries, and the line says why.
    edges = {b["offset"] for i, b in enumerate(t["boundaries"]) if b.get("pause") or (i and t["boundaries"][i - 1].get("pause"))}
    assert edges and not edges & {s["offset"] for s in t["scores"]}, (edges, t["scores"])
    assert "edges of pauses are not scored" in page.locator(f"{WB} [data-wb=boundaries]").inner_text()
    # The text box says how to write one, the SSML form shown as text, not swallowed as a tag.
    assert 'A pause: [pause 500ms] or <break time="500ms"/> (50 ms to 10 s' in page.locator("#vox-text").inner_text()
    assert not page.errors, page.errors
