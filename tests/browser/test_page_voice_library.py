"""The voice library in headless Chromium: keep a designed take as a voice, reload the page, find
it, and clone with it in ultimate cloning; the audio equals synthesize() with the take's WAV as
the clip and its text as the transcript."""
from __future__ import annotations

import io
import os
import shutil

import pytest
import soundfile as sf

from inference import SynthesisRequest
from ui.page.examples import design_examples
from ui.library.uploads import decode_audio

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, assert_same_audio, expected_pcm, load_engine, set_max_len
from ..support.page_handles import take_handles
from .test_page_plays_every_mode import _pick_example, _run, _wav

MAX_LEN = 6

if not os.environ.get("CI"):
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("apt-get install chromium", allow_module_level=True)
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    return serve_app(data_dir=str(tmp_path_factory.mktemp("data")), engine=load_engine(max_streams=2))


def _open(page, url: str):
    page.goto(url)
    take_handles(page)
    set_max_len(page, MAX_LEN)


def _library(page):
    if not page.locator("#vox-voices .vox-voice-name").is_visible():
        page.get_by_text("Voice library").click()
    page.locator("#vox-voices .vox-voice-name").wait_for()


def test_save_a_take_reload_and_clone_with_it(app):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        _open(page, app.url + "/")
        _pick_example(page, "design", 0)
        take = _run(page)
        assert take["state"] == "finished", take.get("error")
        _, take_wav = _wav(page)
        _library(page)
        page.fill("#vox-voices .vox-voice-name", "Designed one")
        page.click("#vox-voices .vox-save-take")
        page.wait_for_function("document.querySelector('#vox-voices .vox-voices-status').textContent.startsWith('Saved')",
                               timeout=60_000)

        page.reload()
        _open(page, app.url + "/")
        _library(page)
        page.wait_for_selector("#vox-voices li[data-name='Designed one'] audio")
        page.get_by_role("tab", name="Ultimate cloning").click()
        page.wait_for_function("document.querySelector('#vox-mode textarea, #vox-mode input').value === 'ultimate'")
        page.select_option(".vox-voice-pick[data-mode='ultimate'] select", "Designed one")
        page.fill("#vox-text textarea", "A new sentence in the kept voice.")
        run = _run(page)
        _, cloned = _wav(page)
        browser.close()
    assert run["state"] == "finished", run.get("error")
    assert run["body"]["voice"] == "Designed one" and run["body"]["reference_id"] is None
    assert not errors, errors
    # The take as the page uploaded it (its WAV), its text as the transcript.
    wav = io.BytesIO()
    sf.write(wav, take_wav, 48000, format="WAV", subtype="PCM_16")
    clip = decode_audio(wav.getvalue(), max_seconds=60)
    want = expected_pcm(SynthesisRequest("A new sentence in the kept voice.", reference_audio=clip, prompt_audio=clip,
                                         prompt_text=design_examples()[0][0], seed=int(run["seed"]), max_len=MAX_LEN))
    assert run["samples"] == want.size and run["played"] == run["samples"]
    assert_same_audio(cloned, want)
