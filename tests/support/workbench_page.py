"""Shared by the workbench's browser tests: the app (tiny random model, a voice library), a page at
desktop size with the handles on its modules, a take made as a user makes one, a download as a user saves one, and a slowed engine."""
from __future__ import annotations

import contextlib
import json
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from .app_helpers import BROWSER_FLAGS, CHROMIUM, load_engine, set_max_len
from .page_handles import click_generate, take_handles
# test_page_plays_every_mode skips (outside CI) without Playwright or Chromium, as these modules must.
from ..browser.test_page_plays_every_mode import sync_playwright  # noqa: F401

MAX_LEN = 6


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    return serve_app(prebuffer_ms=80, data_dir=str(tmp_path_factory.mktemp("data")),
                     engine=load_engine(max_streams=2))


@pytest.fixture(scope="module")
def page(app, tmp_path_factory):
    with desktop_page(app, tmp_path_factory.mktemp("downloads")) as page:
        yield page


@contextlib.contextmanager
def desktop_page(app, downloads: Path):
    """The app's page at desktop size, ready, its script errors collected in `page.errors` and its
    downloads saved in `downloads`."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.goto(app.url + "/")
        ready(page)
        page.downloads = downloads
        yield page
        browser.close()


def ready(page):
    take_handles(page)
    page.wait_for_function("window.workbench.view", timeout=30_000)
    set_max_len(page, MAX_LEN)


def take(page, text: str | None = "Hello world, this is a test.") -> dict:
    """Generate as a user does and wait until the workbench shows the new take."""
    if text is not None:
        page.fill("#vox-text textarea", text)
    click_generate(page)
    page.wait_for_function("window.player.run && ['finished', 'failed', 'stopped'].includes(window.player.run.state)"
                           " && window.workbench.selected && window.workbench.selected.id === window.player.run.id"
                           " && window.workbench.view.shown === window.player.run.id", timeout=60_000)
    settled(page)
    return page.evaluate("({ ...window.workbench.selected, pcm: null })")


def settled(page, selector: str = "#vox-workbench [data-wb=wave-a]", frames: int = 5):
    """Until the element has stayed in place for `frames` animation frames, as a user waits for a
    page to stop moving before aiming: the rest of the take's drawing (the facts above the
    waveform, B's strip, the list) goes on after it is shown, and a drag aimed at the waveform's
    old place misses it (a first take's drag once made no selection in a CI run)."""
    page.wait_for_function("""([selector, frames]) => new Promise((done) => {
        const el = document.querySelector(selector);
        let last = '', still = 0;
        const tick = () => {
          const now = JSON.stringify(el.getBoundingClientRect());
          still = now === last ? still + 1 : 0;
          last = now;
          if (still >= frames) done(true); else requestAnimationFrame(tick);
        };
        requestAnimationFrame(tick);
      })""", arg=[selector, frames], timeout=10_000)


@contextlib.contextmanager
def slowed(app, seconds: float = 0.3):
    """Each engine step takes `seconds` longer: slower than real time, the player runs dry."""
    engine = app.worker.engine
    step = engine.step

    def slow_step():
        time.sleep(seconds)
        return step()
    engine.step = slow_step
    try:
        yield
    finally:
        del engine.step


def drag(page, selector: str, x0: float, x1: float):
    """A mouse drag across an element, from and to fractions of its width."""
    page.locator(selector).scroll_into_view_if_needed()
    box = page.locator(selector).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * x0, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * x1, y, steps=10)
    page.mouse.up()


def download(page, selector: str) -> Path:
    """Clicks `selector` and returns the file the page downloaded, kept in the page's folder."""
    with page.expect_download() as info:
        page.click(selector)
    path = page.downloads / info.value.suggested_filename
    info.value.save_as(path)
    return path


@contextlib.contextmanager
def phone(page, app):
    """The page on a phone (390 x 844, touch), ready as `page` is; its browser context closes after."""
    context = page.context.browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True,
                                               is_mobile=True, device_scale_factor=2)
    try:
        small = context.new_page()
        small.goto(app.url + "/")
        ready(small)
        yield small
    finally:
        context.close()


def import_edited(page, bundle: Path, out: Path, edit) -> str:
    """A take's bundle with its report changed by edit(report) (as another session saved it), as a
    new take imported as a user does; returns the imported take's id."""
    with zipfile.ZipFile(bundle) as z:
        files = {name: z.read(name) for name in z.namelist()}
    name = next(n for n in files if n.endswith(".json"))
    report = json.loads(files[name])
    report["id"] = str(uuid.uuid4())
    edit(report)
    files[name] = json.dumps(report).encode()
    with zipfile.ZipFile(out, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    page.set_input_files("#vox-workbench [data-wb=import]", str(out))
    page.wait_for_function("id => window.workbench.selected?.id === id", arg=report["id"])
    return report["id"]
