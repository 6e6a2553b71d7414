"""The README's screenshot, docs/screenshot.png, taken from the page as it is: the app with the tiny
random model in headless Chromium, the first voice-design example played once with a fixed seed so
that the player's figures and the workbench's take (the same waveform every time) are on it. The file is rewritten only when the page looks
different: a take's figures (times, RTF) differ from run to run, so a few changed pixels are not a
change, a moved or new control is."""
from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

from ui import Settings

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, load_engine, serve, set_max_len
from ..support.page_handles import click_generate, take_handles

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshot.png"
WIDTH, HEIGHT = 1280, 900
SEED = 7
CHANGED = 0.02  # share of pixels that must differ before the file is replaced

if not os.environ.get("CI"):  # CI installs both (.ci/run); elsewhere, say why it did not run
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("apt-get install chromium", allow_module_level=True)
from playwright.sync_api import sync_playwright  # noqa: E402

# The share of pixels that differ between two PNGs (1.0 when their sizes differ), decoded by the
# browser itself so that the test needs no image library.
DIFFERENCE = """async ([a, b]) => {
    const load = async (data) => createImageBitmap(await (await fetch('data:image/png;base64,' + data)).blob());
    const [x, y] = [await load(a), await load(b)];
    if (x.width !== y.width || x.height !== y.height) return 1;
    const pixels = (bitmap) => {
        const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
        const ctx = canvas.getContext('2d');
        ctx.drawImage(bitmap, 0, 0);
        return ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
    };
    const [p, q] = [pixels(x), pixels(y)];
    let differ = 0;
    for (let i = 0; i < p.length; i += 4) {
        if (p[i] !== q[i] || p[i + 1] !== q[i + 1] || p[i + 2] !== q[i + 2]) differ += 1;
    }
    return differ / (p.length / 4);
}"""


@pytest.fixture(scope="module")
def app():
    # As a newcomer first sees it: `python app.py --random-weights`, its banner above the page.
    from app import RANDOM_NOTICE

    running = serve(Settings.of(prebuffer_ms=80, notice=RANDOM_NOTICE), engine=load_engine(max_streams=2))
    yield running
    running.stop()


def test_the_readmes_screenshot_shows_the_page_as_it_is(app):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        page = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}).new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(app.url + "/")
        take_handles(page)
        page.locator("#vox-tab-design [data-testid='dataset-cell-0-0']").click()
        page.wait_for_function("document.querySelector('#vox-text textarea').value.length > 0")
        set_max_len(page, 8)
        page.locator("#vox-random-seed input").uncheck()  # one seed: the same waveform in every screenshot
        seed = page.locator("#vox-seed input")
        seed.fill(str(SEED))
        seed.press("Enter")
        page.get_by_text("Advanced settings").click()  # closed again: the screenshot shows the main controls
        click_generate(page)
        page.wait_for_function("window.player.run && window.player.run.state === 'finished'", timeout=120_000)
        page.wait_for_function("window.workbench.takes.length === 1", timeout=30_000)
        assert page.evaluate("window.player.run.body.seed") == SEED
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(500)  # the waveform's last paint
        shot = page.screenshot(full_page=True)
        old = SCREENSHOT.read_bytes() if SCREENSHOT.exists() else None
        changed = 1.0 if old is None else page.evaluate(
            DIFFERENCE, [base64.b64encode(old).decode(), base64.b64encode(shot).decode()])
        browser.close()
    assert errors == []
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(shot[16:20], "big") == WIDTH
    if changed > CHANGED:
        SCREENSHOT.write_bytes(shot)
    assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
