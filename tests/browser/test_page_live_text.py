"""The page's Live text box (issue 46 item 3; static/player/live.js): text typed after Start, or a
pasted text replayed at a rate of tokens, is spoken clause by clause as it is written, through the
page's player, with the live figures in the box's status line, and kept in the workbench like any
take; a cloning tab needs its clip or a saved voice, and Stop interrupts."""
from __future__ import annotations

import re

from ..support.workbench_page import app, page  # noqa: F401 (fixtures)

TEXT = "Good evening, and welcome to the late news. Here are tonight's top stories, read slowly."
STATUS = "#vox-live [data-live=status]"


def open_box(page):
    if not page.locator("#vox-live").is_visible():
        page.get_by_text("Live text: speak while it is being written").click()
    page.locator("#vox-live").wait_for()


def last_run(page) -> str | None:
    return page.evaluate("window.player.run && window.player.run.id")


def hearing(page, before: str | None):
    """Until the session's own run (not the run before it) has audio."""
    page.wait_for_function("before => window.player.run && window.player.run.id !== before"
                           " && window.player.run.samples > 0", arg=before, timeout=60_000)


def kept(page, before: str | None) -> dict:
    page.wait_for_function("before => window.player.run && window.player.run.id !== before"
                           " && ['finished', 'failed', 'stopped'].includes(window.player.run.state)"
                           " && window.workbench.selected && window.workbench.selected.id === window.player.run.id",
                           arg=before, timeout=60_000)
    return page.evaluate("({ ...window.workbench.selected, pcm: null })")


def replayed(page, text: str, rate: int) -> dict:
    """`text` replayed at `rate` tokens a second, until it is kept as a take (returned)."""
    open_box(page)
    page.fill("#vox-live [data-live=text]", text)
    page.fill("#vox-live [data-live=rate]", str(rate))
    before = last_run(page)
    page.click("#vox-live [data-live=replay]")
    return kept(page, before)


def started(page) -> str | None:
    """A session started with an empty box, listening to what is typed; returns the run before it."""
    open_box(page)
    page.fill("#vox-live [data-live=text]", "")
    before = last_run(page)
    page.click("#vox-live [data-live=start]")
    page.locator(STATUS).filter(has_text="Listening to what you type").wait_for()
    return before


def test_a_pasted_text_replayed_like_a_model_is_spoken_clause_by_clause_and_kept_as_a_take(page):
    take = replayed(page, TEXT, 60)
    run = page.evaluate("window.player.snapshot()")
    assert run["state"] == "finished" and run["samples"] > 0 and run["body"]["live"] is True
    assert take["settings"]["text"] == TEXT and take["settings"]["mode"] == "design"
    assert take["settings"]["seed"] is not None
    status = page.locator(STATUS).inner_text()
    assert re.search(r"First clause complete → its first audio: \d+ ms · clauses spoken: 4 · underruns: \d+", status), status
    assert run["live"]["clauses"] == 4 and run["live"]["clauseToAudioMs"] > 0


def test_text_typed_after_start_is_spoken_as_it_is_typed(page):
    before = started(page)
    page.locator("#vox-live [data-live=text]").press_sequentially("Typed by hand, one key at a time. ", delay=5)
    hearing(page, before)  # before Finish: spoken as it was typed
    page.click("#vox-live [data-live=finish]")
    take = kept(page, before)
    assert take["settings"]["text"] == "Typed by hand, one key at a time. "
    assert page.evaluate("window.player.run.state") == "finished"


def test_a_cloning_tab_without_a_clip_says_what_live_text_needs(page):
    open_box(page)
    page.get_by_role("tab", name="Controllable cloning").click()
    page.fill("#vox-live [data-live=text]", TEXT)
    page.click("#vox-live [data-live=replay]")
    page.locator(STATUS).filter(has_text="this tab has no clip: upload or record one, or pick a saved voice").wait_for()
    page.get_by_role("tab", name="Voice design").click()


def test_a_cloning_tab_speaks_live_text_in_its_uploaded_clip_with_its_style(page):
    from pathlib import Path

    clip = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
    open_box(page)
    page.get_by_role("tab", name="Controllable cloning").click()
    page.set_input_files("#vox-clone-audio input[type=file]", str(clip))
    page.locator("#vox-clone-note").filter(has_text="Reference ready").wait_for(timeout=30_000)
    page.fill("#vox-live [data-live=text]", "Spoken in the uploaded clip's voice, as it arrives.")
    page.fill("#vox-live [data-live=rate]", "60")
    before = last_run(page)
    page.click("#vox-live [data-live=replay]")
    take = kept(page, before)
    assert take["settings"]["mode"] == "cloning" and take["figures"]["samples"] > 0
    assert "The server said" not in page.locator(STATUS).inner_text()
    page.get_by_role("tab", name="Voice design").click()


def test_a_saved_voice_picked_in_the_cloning_tab_speaks_live_text(page):
    """The voice library's pick reaches the live session (static/app.js hands it to live.js)."""
    replayed(page, "A voice to keep.", 60)  # a take to save as the voice
    if not page.locator("#vox-voices .vox-voice-name").is_visible():
        page.get_by_text("Voice library").click()
    page.fill("#vox-voices .vox-voice-name", "Kept live")
    page.click("#vox-voices .vox-save-take")
    page.locator("#vox-voices .vox-voices-status").filter(has_text="Saved").wait_for(timeout=60_000)
    page.get_by_role("tab", name="Controllable cloning").click()
    page.select_option(".vox-voice-pick[data-mode='cloning'] select", "Kept live")
    take = replayed(page, "Spoken in the saved voice, as it arrives.", 60)
    run = page.evaluate("window.player.snapshot()")
    assert run["body"]["voice"] == "Kept live" and run["body"]["live"] is True
    assert take["settings"]["mode"] == "cloning" and take["figures"]["samples"] > 0
    assert "The server said" not in page.locator(STATUS).inner_text()
    page.select_option(".vox-voice-pick[data-mode='cloning'] select", "")
    page.get_by_role("tab", name="Voice design").click()


def test_stop_interrupts_live_text_and_keeps_what_was_heard(page):
    open_box(page)
    page.fill("#vox-live [data-live=text]", TEXT * 3)
    page.fill("#vox-live [data-live=rate]", "20")
    before = last_run(page)
    page.click("#vox-live [data-live=replay]")
    hearing(page, before)
    page.click("#vox-stop")
    take = kept(page, before)
    assert take["outcome"] == "stopped" and take["figures"]["samples"] > 0
    assert page.errors == []
