"""A saved voice picked in ultimate cloning after the clip's automatic transcript filled the box
(issue 58, finding 1): the box shows the voice's own transcript, as the line under the picker says,
and the take is made with it, not with the clip's transcript left over. A take saved as a voice
keeps the words it read as its transcript, without the pause tags of its text."""
from __future__ import annotations

import httpx

from ..support.app_helpers import set_max_len
from .test_page_transcript import ASSETS, BOX, app, browser, note_state, page, upload, whisper  # noqa: F401 (fixtures)
from .test_page_voice_library import _library
from .test_page_plays_every_mode import _run

PICKER = ".vox-voice-pick[data-mode='ultimate']"
TEXT = "Hello there. [pause 200ms] How are you? <break time='100ms'/> Fine."


def save_take_as_voice(page, name: str):
    _library(page)
    page.fill("#vox-voices .vox-voice-name", name)
    page.click("#vox-voices .vox-save-take")
    page.wait_for_function("document.querySelector('#vox-voices .vox-voices-status').textContent.startsWith('Saved')",
                           timeout=60_000)


def test_a_voice_picked_after_an_automatic_transcript_is_cloned_with_its_own_transcript(app, page):
    upload(page, ASSETS / "guide_en.wav")
    note_state(page, "automatic")
    automatic = page.locator(BOX).input_value()
    set_max_len(page, 3)
    page.fill("#vox-text textarea", TEXT)
    first = _run(page)
    assert first["state"] == "finished", first.get("error")
    save_take_as_voice(page, "QA Voice")
    with httpx.Client(base_url=app.url, timeout=30) as client:
        saved = {v["name"]: v for v in client.get("/voxcpm/voices").json()["voices"]}
    own = saved["QA Voice"]["transcript"]
    assert own == "Hello there. How are you? Fine.", "the take's words, its pause tags left out"
    assert own != automatic

    page.wait_for_selector(f"{PICKER} option[value='QA Voice']", state="attached")
    page.select_option(f"{PICKER} select", "QA Voice")
    assert "its transcript in the box below" in page.locator(f"{PICKER} .vox-voice-using").inner_text()
    note_state(page, "voice")
    page.wait_for_function("([box, want]) => document.querySelector(box).value === want", arg=[BOX, own])
    # Gradio's own value of the box, once every hook it was handed has run: what Generate reads.
    assert page.evaluate("window.gradio.readForm()")["ultimate_transcript"] == own
    assert page.locator(BOX).input_value() == own

    page.fill("#vox-text textarea", "A new sentence.")
    take = _run(page)
    assert take["state"] == "finished", take.get("error")
    assert take["body"]["voice"] == "QA Voice"
    assert take["body"]["prompt_text"] in (None, "", own), "the voice's transcript, not the clip's left in the box"
