"""The page as a new user first sees it: app.py started from the command line (so served through the
loading gate), opened in Debian's Chromium. The Chinese examples must render as glyphs, not as the
empty boxes of a missing CJK font (.ci/run installs one); the screenshot is kept for eyes."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ui.page.examples import design_examples

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

if not os.environ.get("CI"):  # CI installs both (.ci/run); elsewhere, say why it did not run
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("apt-get install chromium", allow_module_level=True)
from playwright.sync_api import sync_playwright  # noqa: E402

# Draws each character alone in the font the example cell uses and counts distinct images: with no
# font for the script, every character is the same missing-glyph box, so there is one image.
DISTINCT_GLYPHS = """([selector, chars]) => {
    const family = getComputedStyle(document.querySelector(selector)).fontFamily;
    const canvas = document.createElement('canvas');
    canvas.width = canvas.height = 48;
    const g = canvas.getContext('2d', { willReadFrequently: true });
    g.font = `32px ${family}`;
    const drawn = [...chars].map((ch) => {
        g.clearRect(0, 0, 48, 48);
        g.fillText(ch, 4, 38);
        return g.getImageData(0, 0, 48, 48).data.join(',');
    });
    return new Set(drawn).size;
}"""


@pytest.fixture(scope="module")
def app_url():
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GRADIO_SERVER_NAME", "SPACE_ID", "VOXCPM_TOKEN")}
    proc = subprocess.Popen([sys.executable, "app.py", "--random-weights", "--device", "cpu", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        yield base
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_the_form_holds_an_example_on_first_load(app_url):
    """An empty text box made a newcomer's first Generate an error: the page opens with the first
    design example's text and voice description."""
    text, description = design_examples()[0]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        page = browser.new_page()
        page.goto(app_url + "/")
        page.wait_for_selector("#vox-text textarea", timeout=60_000)
        assert page.locator("#vox-text textarea").input_value() == text
        assert page.locator("#vox-description textarea").input_value() == description
        browser.close()


def test_chinese_examples_render_as_glyphs(app_url):
    row, (text, _) = next((i, r) for i, r in enumerate(design_examples()) if not r[0].isascii())
    cell = f"#vox-tab-design [data-testid='dataset-cell-{row}-0']"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(app_url + "/")
        page.wait_for_selector(cell, timeout=60_000)
        page.evaluate("document.fonts.ready")
        chars = "".join(dict.fromkeys(c for c in text if not c.isascii() and c.isalpha()))[:8]
        distinct = page.evaluate(DISTINCT_GLYPHS, [cell, chars])
        page.click(cell)  # the example fills the text box: the page's events go through app.py's server
        page.wait_for_function("t => document.querySelector('#vox-text textarea').value === t", arg=text)
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#vox-tab-design").screenshot(path=str(ARTIFACTS / "page-chinese-examples.png"))
        browser.close()
    assert len(chars) == 8
    assert distinct == len(chars), (f"{distinct} distinct images for {len(chars)} Chinese characters: "
                                    "no CJK font (apt-get install fonts-wqy-microhei)")
