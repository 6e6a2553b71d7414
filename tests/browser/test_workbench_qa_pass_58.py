"""The listening-QA workbench's findings of issue 58, each done as the QA engineer did it in Chromium,
on one page. The words that play late are in test_page_words_late.py (they need the aligner)."""
from __future__ import annotations

import math
import re

from ..support.workbench_page import app, download, drag, page, settled, take  # noqa: F401 (fixtures)
from .test_workbench_findings import choose_b_file, tone

WB = "#vox-workbench"


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