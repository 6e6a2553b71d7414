"""The listening-QA workbench's defects of issue 22, each driven as a QA engineer meets it: a mouse
drag on the waveform, a blind ABX trial, a saved voice's take re-used, Stop and a second Generate,
Clear all and Delete undone, a long text's segments, the keyboard and a phone, and the small ones."""
from __future__ import annotations

import re

from .page_handles import click_generate
from .workbench_page import app, drag, page, ready, slowed, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"


def test_1_a_drag_on_the_waveform_selects_a_region_that_loops(page):
    t = take(page)
    drag(page, f"{WB} [data-wb=wave-a]", 0.2, 0.5)
    sel = page.evaluate("(() => { const s = window.workbench.view.selection; return s && [s.start, s.end]; })()")
    seconds = t["figures"]["seconds"]
    assert sel and abs(sel[0] - 0.2 * seconds) < 0.05 and abs(sel[1] - 0.5 * seconds) < 0.05, sel
    assert "selection" in page.locator(f"{WB} [data-wb=readout]").inner_text()
    page.check(f"{WB} [data-wb=loop]")
    page.click(f"{WB} [data-wb=play]")
    page.wait_for_timeout(int((sel[1] - sel[0]) * 2500) + 300)  # past the region's end, twice over
    where = page.evaluate("[window.workbench.view.a.getCurrentTime(), window.workbench.view.a.isPlaying()]")
    page.click(f"{WB} [data-wb=play]")
    assert where[1] and sel[0] - 0.02 <= where[0] <= sel[1] + 0.1, (where, sel)
