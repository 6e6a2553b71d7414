"""Issue 58: a reload lost the form (the text, the mode's tab, the settings, the clip). Done as the
QA engineer did it in Chromium: the form filled in, the page reloaded, and everything is back, the
clip in its box and stored on the server again; a clip too large to keep is named instead."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from ..support.page_handles import take_handles
from ..support.workbench_page import app, page  # noqa: F401 (fixtures)

CLIP = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
KEPT = "document.querySelector('#vox-form-note')"
# The form as the page last saved it (localStorage), once it holds what `want` says.
SAVED = """want => {
    const saved = JSON.parse(localStorage.getItem('voxcpm-form') || 'null');
    const { clip, ...fields } = want;
    return Boolean(saved) && Object.entries(fields).every(([k, v]) => JSON.stringify(saved.fields[k]) === JSON.stringify(v))
      && saved.clips.ultimate?.name === clip;
}"""


def value(page, selector: str) -> str:
    return page.locator(selector).input_value()


def fill_the_form(page, clip: Path):
    page.fill("#vox-text textarea", "Words to keep across a reload.")
    page.click("#vox-tab-ultimate-button")
    page.set_input_files("#vox-ultimate-audio input[type=file]", str(clip))
    page.wait_for_function("document.querySelector('#vox-ultimate-ref textarea, #vox-ultimate-ref input').value !== ''")
    page.fill("#vox-ultimate-transcript textarea", "The clip's own words.")
    if not page.locator("#vox-cfg").is_visible():
        page.get_by_text("Advanced settings").click()
    page.locator("#vox-cfg input[type=number]").fill("3.5")
    page.locator("#vox-cfg input[type=number]").press("Enter")
    page.locator("#vox-random-seed input[type=checkbox]").uncheck()
    page.locator("#vox-seed input").fill("1234")
    page.locator("#vox-seed input").press("Enter")


def test_the_form_and_its_clip_come_back_after_a_reload(page):
    fill_the_form(page, CLIP)
    page.wait_for_function(SAVED, arg={"text": "Words to keep across a reload.", "mode": "ultimate", "cfg_value": 3.5,
                                       "seed": 1234, "random_seed": False,
                                       "ultimate_transcript": "The clip's own words.", "clip": CLIP.name})
    page.reload()
    take_handles(page)
    assert page.locator("#vox-form-note").inner_text().startswith("The form is as you left it")
    assert value(page, "#vox-text textarea") == "Words to keep across a reload."
    assert page.locator("#vox-tab-ultimate-button").get_attribute("aria-selected") == "true"
    assert value(page, "#vox-mode textarea, #vox-mode input") == "ultimate"
    assert value(page, "#vox-ultimate-transcript textarea") == "The clip's own words."
    if not page.locator("#vox-cfg").is_visible():
        page.get_by_text("Advanced settings").click()
    assert value(page, "#vox-cfg input[type=number]") == "3.5"
    assert value(page, "#vox-seed input") == "1234"
    assert not page.locator("#vox-random-seed input[type=checkbox]").is_checked()
    # The clip is in its box again, and stored on the server under a new id.
    page.wait_for_function("document.querySelector('#vox-ultimate-ref textarea, #vox-ultimate-ref input').value !== ''")
    form = page.evaluate("window.gradio.readForm()")
    assert form["ultimate_audio"] == CLIP.name
    assert not page.errors, page.errors


def test_a_clip_too_large_to_keep_is_named_after_the_reload(page, tmp_path):
    big = tmp_path / "long_recording.wav"
    sf.write(big, np.zeros((60 * 48000, 2), np.int16), 48000, subtype="PCM_16")  # 11 MB
    page.evaluate("localStorage.removeItem('voxcpm-form')")  # a first visit: the clip box is empty
    page.reload()
    take_handles(page)
    page.click("#vox-tab-ultimate-button")
    page.set_input_files("#vox-ultimate-audio input[type=file]", str(big))
    page.wait_for_function(f"{KEPT}.textContent.includes('will not be kept')")
    page.wait_for_function(SAVED, arg={"mode": "ultimate", "clip": big.name})
    page.reload()
    take_handles(page)
    note = page.locator("#vox-form-note").inner_text()
    assert "Not kept, give it again" in note and big.name in note, note
