"""Automatic transcripts in the page (headless Chromium, the tiny random Whisper of
tests/fixtures/tiny_whisper.py): a clip uploaded in ultimate cloning fills the transcript box with
the model's text, marked automatic until the user edits it, and that text goes with the request;
text the user typed is kept, the automatic transcript offered beside it; a saved voice without a
transcript, picked there, is transcribed the same way; with transcripts off the note under the box
says so and how to type it instead."""
from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from inference.analysis.process import Analysis
from inference.config import AnalysisSettings

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, load_engine, set_max_len, state_swapped
from ..fixtures.tiny_whisper import write_tiny_whisper
from ..support.page_handles import click_generate, take_handles

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "voices"
BOX = "#vox-ultimate-transcript textarea"
NOTE = "#vox-ultimate-transcript-note"

if not os.environ.get("CI"):
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("apt-get install chromium", allow_module_level=True)
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def whisper(tmp_path_factory) -> str:
    return str(write_tiny_whisper(tmp_path_factory.mktemp("whisper")))


def expected(whisper: str, data: bytes) -> str:
    """What the checkpoint makes of a clip (its file's bytes), through transformers directly."""
    from transformers.pipelines import pipeline

    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    pipe = pipeline("automatic-speech-recognition", model=whisper, device="cpu")
    return pipe({"raw": audio, "sampling_rate": rate})["text"].strip()


@pytest.fixture(scope="module")
def app(serve_app, whisper, tmp_path_factory):
    return serve_app(recognizer=whisper, data_dir=str(tmp_path_factory.mktemp("data")),
                     engine=load_engine(max_streams=2))


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture()
def page(app, browser):
    """A fresh page (a context of its own: nothing kept from the last test) in the module's browser."""
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(app.url + "/")
    take_handles(page)
    page.get_by_role("tab", name="Ultimate cloning").click()
    page.wait_for_function("document.querySelector('#vox-mode textarea, #vox-mode input').value === 'ultimate'")
    yield page
    context.close()
    assert not errors, errors


def upload(page, clip: Path):
    page.set_input_files("#vox-ultimate-audio input[type=file]", str(clip))


def note_state(page, state: str) -> str:
    page.wait_for_selector(f"{NOTE}[data-state='{state}']", timeout=60_000)
    return page.locator(NOTE).inner_text()


def test_an_uploaded_clip_fills_the_box_marked_automatic_until_edited(app, page, whisper):
    want = expected(whisper, (ASSETS / "guide_en.wav").read_bytes())
    upload(page, ASSETS / "guide_en.wav")
    note = note_state(page, "automatic")
    assert "automatic" in note and whisper in note
    page.wait_for_function("([box, want]) => document.querySelector(box).value === want", arg=[BOX, want])
    set_max_len(page, 3)
    page.fill("#vox-text textarea", "Hello there.")
    click_generate(page)
    page.wait_for_function("['finished', 'failed'].includes(window.player.run.state)", timeout=60_000)
    run = page.evaluate("window.player.snapshot()")
    assert run["state"] == "finished", run.get("error")
    assert run["body"]["prompt_text"] == want, "the automatic transcript went with the request"
    page.locator(BOX).press("End")
    page.locator(BOX).type(" and more")
    assert "Edited" in note_state(page, "edited")
    assert page.locator(f"{NOTE} .vox-auto-badge").count() == 0


def test_typed_text_is_kept_and_the_automatic_transcript_offered(page, whisper):
    page.fill(BOX, "My own words.")
    upload(page, ASSETS / "narrator_en.wav")
    assert "keeps the text already in it" in note_state(page, "offered")
    assert page.locator(BOX).input_value() == "My own words."
    page.click(f"{NOTE} button[data-action='use']")
    note_state(page, "automatic")
    want = expected(whisper, (ASSETS / "narrator_en.wav").read_bytes())
    page.wait_for_function("([box, want]) => document.querySelector(box).value === want", arg=[BOX, want])


def test_with_transcripts_off_the_note_says_so(app, page):
    with state_swapped(app.app.state.ctx, "analysis", Analysis(AnalysisSettings(recognizer=None))):
        upload(page, ASSETS / "speaker_zh.wav")
        note = note_state(page, "error")
    assert "switched off" in note and "Type the transcript" in note
    assert page.locator(BOX).input_value() == ""


def test_picking_a_saved_voice_without_a_transcript_fills_the_box(app, page, whisper):
    with httpx.Client(base_url=app.url, timeout=60) as client:
        clip_id = client.post("/voxcpm/upload", content=(ASSETS / "speaker_zh.wav").read_bytes()).json()["id"]
        assert client.post("/voxcpm/voices", json={"name": "Untold", "clip_id": clip_id}).status_code == 201
        flac = client.get("/voxcpm/voices/Untold/audio").content
    page.evaluate("window.voices.refresh()")
    page.wait_for_selector(".vox-voice-pick[data-mode='ultimate'] option[value='Untold']", state="attached")
    page.select_option(".vox-voice-pick[data-mode='ultimate'] select", "Untold")
    assert "automatic" in note_state(page, "automatic")
    page.wait_for_function("([box, want]) => document.querySelector(box).value === want",
                           arg=[BOX, expected(whisper, flac)])


def test_an_automatic_transcript_can_be_made_again_by_a_button(page, whisper):
    """Once filled automatically (and edited since), a button in the note asks for it again and puts it
    back in the box: there was no way to run it again but uploading the clip anew."""
    want = expected(whisper, (ASSETS / "guide_en.wav").read_bytes())
    upload(page, ASSETS / "guide_en.wav")
    note_state(page, "automatic")
    page.locator(BOX).press("End")
    page.locator(BOX).type(" and more")
    note_state(page, "edited")
    asked = []
    page.on("request", lambda r: r.url.endswith("/voxcpm/transcribe") and asked.append(r.url))
    page.click(f"{NOTE} button[data-action='again']")
    note_state(page, "automatic")
    page.wait_for_function("([box, want]) => document.querySelector(box).value === want", arg=[BOX, want])
    assert len(asked) == 1


def gated_analysis(folder: Path) -> Analysis:
    """A recognizer whose load the test ends (tests/fixtures/analysis_stand_ins.py: load_gated)."""
    from ..fixtures import analysis_stand_ins

    folder.mkdir()
    analysis = Analysis(AnalysisSettings(recognizer=str(folder), recognizer_loader=analysis_stand_ins.GATED,
                                         load_wait_s=0.2, device="cpu"))
    analysis.ping().result(60)
    return analysis


def test_while_the_model_loads_the_note_says_so_and_the_page_asks_again_by_itself(app, page, tmp_path):
    """Issues 58 and 59: the note said the model was "still being loaded (a download on first use)"
    of a local folder and never asked again; now it says the recognizer is loading and from where,
    with a moving bar and the time so far growing as the page asks again by itself, and fills the box
    once it has loaded."""
    from ..fixtures import analysis_stand_ins

    analysis = gated_analysis(tmp_path / "whisper")
    with state_swapped(app.app.state.ctx, "analysis", analysis):
        upload(page, ASSETS / "guide_en.wav")
        note = note_state(page, "loading")
        assert note.startswith("Loading the speech recognizer… it is being loaded from its folder (")
        assert "download" not in note and "transcript follows by itself" in note
        assert page.locator(f"{NOTE} progress").is_visible()
        with page.expect_request(lambda r: r.url.endswith("/voxcpm/transcribe"), timeout=30_000):
            pass  # asked again by itself, after the server's Retry-After
        page.wait_for_function("([sel, was]) => document.querySelector(sel).dataset.state === 'loading'"
                               " && document.querySelector(sel).textContent !== was", arg=[NOTE, note])
        (tmp_path / "whisper" / "release").touch()
        note_state(page, "automatic")
        assert page.locator(BOX).input_value() == analysis_stand_ins.GATED_WORDS
    analysis.close()


def test_a_load_that_fails_after_it_started_ends_the_waiting_with_its_reason(app, page, tmp_path):
    analysis = gated_analysis(tmp_path / "whisper")
    with state_swapped(app.app.state.ctx, "analysis", analysis):
        upload(page, ASSETS / "guide_en.wav")
        note_state(page, "loading")
        (tmp_path / "whisper" / "fail").touch()
        note = note_state(page, "error")
    assert "could not be loaded" in note and "Type the transcript" in note
    analysis.close()
