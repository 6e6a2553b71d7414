"""Words as they play, when they come late (issue 58, item 10): a segment's words come once it is made
and aligned, and on a slow server that is after its audio has played. The QA engineer saw such words
never light up, and the words' greys read at 1.9:1. Now the note under the words says they came
late, the replay lights every word in turn by its own clock, and every state of a word reads at AA
(4.5:1), measured as test_page_reads_well_on_a_phone_and_at_aa_contrast.py measures it.

The app is test_page_words.py's (the tiny model that never stops before its cap, the scripted
aligner in the real analysis process), with the page's default short prebuffer."""
from __future__ import annotations

import re

import pytest

from ..fixtures import analysis_stand_ins
from ..support.app_helpers import set_max_len
from ..support.workbench_page import desktop_page, slowed, take
from .test_page_reads_well_on_a_phone_and_at_aa_contrast import DRAWN_CONTRAST
from .test_page_words import BOX, PATCHES, expected_word

WORDS = "#vox-panel [data-field=words_text]"
REPLAY = "#vox-panel [data-field=result] audio"


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    from inference import Engine
    from inference.model.tiny_checkpoint import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("never-stops"), fast_vae=True, never_stops=True)
    engine = Engine.from_pretrained(str(path), device="cpu", dtype="float32", max_streams=2)
    return analysis_stand_ins.serve_scripted(serve_app, prebuffer_ms=80, engine=engine,
                                             data_dir=str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def page(app, tmp_path_factory):
    with desktop_page(app, tmp_path_factory.mktemp("downloads")) as page:
        set_max_len(page, PATCHES)
        yield page


# Every animation frame while the replay plays: its clock and the word highlighted then (-1: none).
REPLAY_SAMPLER = """() => {
    window.replaySamples = [];
    const audio = document.querySelector('#vox-panel [data-field=result] audio');
    const tick = () => {
      const now = document.querySelector('#vox-panel [data-field=words_text] [data-state=now]');
      if (!audio.paused) window.replaySamples.push([audio.currentTime, now ? Number(now.dataset.index) : -1]);
      if (!audio.ended) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
}"""


def test_words_that_come_after_their_audio_say_so_light_up_on_replay_and_read_at_aa(app, page):
    texts = "Each word comes late but lights up again.".split()
    page.locator(BOX).set_checked(True)
    with slowed(app, 0.25):  # slower than real time: the player plays every patch as it comes, and runs dry
        t = take(page, " ".join(texts))
    words = t["words"]["list"]
    assert [w["word"] for w in words] == texts
    # Live, they came after their audio (all but the last word or two, still playing then): those
    # could not light up, and the note says so.
    states = page.evaluate(f"[...document.querySelectorAll('{WORDS} span')].map((s) => s.dataset.state)")
    assert states == ["spoken"] * len(texts)
    note = page.locator("#vox-panel [data-field=words_note]").inner_text()
    late = re.match(r"(\d+) words came after their audio had played", note)
    assert late and len(texts) - 2 <= int(late[1]) <= len(texts) and "replay" in note, note
    # Paused in the middle of the replay: words heard, the word being heard and words to come, each at AA.
    middle = (words[3]["start_s"] + words[3]["end_s"]) / 2
    page.evaluate("s => { const a = document.querySelector('#vox-panel [data-field=result] audio'); a.currentTime = s; }", middle)
    page.wait_for_function(f"document.querySelector('{WORDS} [data-state=now]')?.dataset.index === '3'")
    for state, index in (("spoken", 0), ("now", 3), ("", 6)):
        span = page.locator(f"{WORDS} span").nth(index)
        assert (span.get_attribute("data-state") or "") == state
        assert span.evaluate(DRAWN_CONTRAST) >= 4.5, (state, span.evaluate("s => getComputedStyle(s).color"))
    # Played again from the start, every word lights up in its turn by the replay's clock.
    page.evaluate("() => { document.querySelector('#vox-panel [data-field=result] audio').currentTime = 0; }")
    page.wait_for_function(f"document.querySelector('{WORDS} [data-state=now]')?.dataset.index === '0'")
    page.evaluate(REPLAY_SAMPLER)
    page.evaluate("() => document.querySelector('#vox-panel [data-field=result] audio').play()")
    page.wait_for_function(f"document.querySelector('{REPLAY}').ended", timeout=30_000)
    samples = page.evaluate("window.replaySamples")
    seen = [now for i, (_, now) in enumerate(samples) if now >= 0 and (i == 0 or samples[i - 1][1] != now)]
    assert seen == list(range(len(words))), seen
    # Sampled in the same frame as the highlight was drawn, a frame's lag at most at a word's edge.
    wrong = [(s, now) for s, now in samples if now not in (expected_word(words, s), expected_word(words, s - 0.05))]
    assert not wrong, wrong[:5]
