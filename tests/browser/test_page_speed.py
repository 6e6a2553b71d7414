"""The page in headless Chromium with the Speed slider of the advanced settings (issue 23 items 2-3):
the take plays stretched to the end, twice as long at 0.5, with its patches placed in the audio
sent; and the take's playback report reaches GET /metrics."""
from __future__ import annotations

import os
import shutil

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ui import Settings

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, load_engine, serve, set_max_len, wait_until
from ..support.page_handles import click_generate, take_handles

if not os.environ.get("CI"):  # CI installs both (.ci/run); elsewhere, say why it did not run
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("apt-get install chromium", allow_module_level=True)
from playwright.sync_api import sync_playwright  # noqa: E402


def set_speed(page, speed: float):
    box = page.locator("#vox-speed input[type=number]")
    box.wait_for()  # set_max_len opened the accordion
    for _ in range(20):  # Gradio may still be drawing the accordion's content
        box.fill(str(speed))
        box.press("Enter")
        page.wait_for_timeout(250)
        if page.evaluate("document.querySelector('#vox-speed input[type=range]').value") == str(speed):
            return
    raise AssertionError("could not set the speed")


def reports(base: str) -> float:
    text = httpx.get(base + "/metrics", timeout=30).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "voxcpm_playback_reports_total")


def test_the_speed_slider_stretches_the_take_and_its_playback_is_reported():
    running = serve(Settings.of(prebuffer_ms=80), engine=load_engine(max_streams=2))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(running.url + "/")
            take_handles(page)
            set_max_len(page, 8)
            set_speed(page, 0.5)
            page.locator("#vox-tab-design [data-testid='dataset-cell-0-0']").click()
            # Gradio fills the boxes from the example a task or more later (under load, after
            # a click on Generate could already have sent an empty text).
            page.wait_for_function("document.querySelector('#vox-text textarea').value.trim() !== ''")
            click_generate(page)
            page.wait_for_function("['finished', 'failed'].includes(window.player.run.state)", timeout=90_000)
            run = page.evaluate("window.player.snapshot()")
            browser.close()
        assert run["state"] == "finished", run.get("error")
        assert run["body"]["speed"] == 0.5 and run["final"]["speed"] == 0.5
        assert run["samples"] == run["played"] == run["final"]["output_samples"] == 2 * run["final"]["samples"]
        offsets = [b["offset"] for b in run["boundaries"]]
        assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] < run["samples"]
        assert wait_until(lambda: reports(running.url) == 1)
    finally:
        running.stop()
