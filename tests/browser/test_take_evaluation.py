"""A take's scores in the workbench (headless Chromium; a recognizer whose words the test chooses,
tests/fixtures/analysis_stand_ins.py, and the tiny random WavLM x-vector of tests/fixtures, both in
the app's analysis process): a cloning take with a saved voice, scored as a user does (the
button), shows its WER and speaker similarity as the route computes them, in the panel and in its
row; its misread words are marked in the text and on the waveform, and a click on one jumps the
waveform to the time the recognizer gave; the scores are kept with the take across a reload.
Screenshots of the panel at desktop and phone size go to tests/artifacts.

The recognizer is scripted, not a random Whisper: which words a random model emits depends on the
audio a random engine made, and once it emitted nothing but punctuation and one right word, so
there was no misread word to click (a flaky test)."""
from __future__ import annotations

import csv
from pathlib import Path

import httpx
import pytest

from ..fixtures import analysis_stand_ins
from ..fixtures.tiny_wavlm import write_tiny_wavlm
from ..support.app_helpers import load_engine
from ..support.workbench_page import page, ready, take  # noqa: F401 - the module's page fixture

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "voices"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WB = "#vox-workbench"
TEXT = "Hello world, the voice is here today."
HEARD = "hello word the voice is hear today"  # two words misread: "world" and "here"


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    running = serve_app(prebuffer_ms=80, data_dir=str(tmp_path_factory.mktemp("data")), engine=load_engine(max_streams=2),
                        recognizer=HEARD, recognizer_loader=analysis_stand_ins.LOADER,
                        speaker=str(write_tiny_wavlm(tmp_path_factory.mktemp("wavlm"))))
    with httpx.Client(base_url=running.url, timeout=60) as client:  # a saved voice, before the page lists them
        clip = client.post("/voxcpm/upload", content=(ASSETS / "narrator_en.wav").read_bytes()).json()["id"]
        saved = client.post("/voxcpm/voices", json={"name": "Narrator", "clip_id": clip, "transcript": "Hello."})
        assert saved.status_code == 201, saved.text
    return running


def test_a_cloning_take_shows_its_scores_and_a_misread_word_jumps_the_waveform(page):
    page.get_by_role("tab", name="Controllable cloning").click()
    page.select_option(".vox-voice-pick[data-mode='cloning'] select", "Narrator")
    made = take(page, TEXT)
    assert made["settings"]["voice"] == "Narrator"
    page.click(f"{WB} [data-wb=eval-run]")
    page.wait_for_function("window.workbench.selected.evaluation", timeout=60_000)
    result = page.evaluate("window.workbench.selected.evaluation")
    words, voice = result["intelligibility"], result["similarity"]
    assert words["available"] and voice["available"], result
    summary = page.locator(f"{WB} [data-wb=eval-summary]").inner_text()
    assert f"WER {words['rate'] * 100:.1f}%" in summary and f"Speaker similarity {voice['score']:.3f}" in summary
    row = page.locator(f"{WB} [data-take='{made['id']}']").inner_text()
    assert f"WER {words['rate'] * 100:.1f}%" in row and f"SIM {voice['score']:.2f}" in row
    marks = [w for w in result["segments"][0]["intelligibility"]["words"] if w["type"] == "misread"]
    assert [(w["ref"], w["heard"]) for w in marks] == [("world", "word"), ("here", "hear")], words
    assert words["rate"] == round(2 / 7, 4) and all(w["start"] is not None for w in marks)
    shown = page.locator(f"{WB} [data-wb=eval-text] .vox-eval-misread")
    assert shown.count() == len(marks)
    assert page.evaluate("window.workbench.view.marks('e-').length") >= len(marks), "marked on the waveform too"
    target = shown.last
    at = float(target.get_attribute("data-at"))
    assert at == marks[-1]["start"]
    page.locator(f"{WB} [data-wb=wave-a]").focus()
    page.keyboard.press("End")  # the cursor away from the word, as a user would have it after listening
    page.wait_for_function("window.workbench.view.a.getCurrentTime() > 0.5")
    target.click()
    page.wait_for_function("t => Math.abs(window.workbench.view.a.getCurrentTime() - t) < 0.01", arg=at, timeout=5_000)
    ARTIFACTS.mkdir(exist_ok=True)
    panel = page.locator(f"{WB} .vox-wb-evaluate")
    panel.screenshot(path=str(ARTIFACTS / "take_scores_desktop.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    panel.screenshot(path=str(ARTIFACTS / "take_scores_phone.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1, "the panel fits a phone's width"
    page.set_viewport_size({"width": 1280, "height": 800})
    page.reload()  # kept with the take
    ready(page)
    page.wait_for_function("window.workbench.selected && window.workbench.selected.evaluation", timeout=30_000)
    assert f"WER {words['rate'] * 100:.1f}%" in page.locator(f"{WB} [data-wb=eval-summary]").inner_text()
    assert page.locator(f"{WB} [data-wb=eval-text] .vox-eval-misread").count() == len(marks)
    with page.expect_download() as download:  # and in the takes' CSV, as the route gave them
        page.click(f"{WB} [data-wb=csv]")
    with open(download.value.path(), newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == made["id"])
    assert row["error_metric"] == "wer" and float(row["error_rate"]) == words["rate"]
    assert float(row["speaker_similarity"]) == voice["score"]
    assert not page.errors, page.errors
