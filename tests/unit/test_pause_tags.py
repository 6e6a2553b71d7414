"""Pause tags in the text (inference/text/pauses.py): the accepted forms, their bounds, clear
refusals, and how a text is cut at them before normalization and segmentation."""
from __future__ import annotations

import pytest

from inference.errors import InputError
from inference.request import modes
from inference.request.continuation import Report
from inference.text.normalize import clean_text
from inference.text.pauses import parse_tag, split_pauses
from inference.text.spoken import SpokenText


@pytest.mark.parametrize("tag, ms", [
    ("[pause 500ms]", 500), ("[pause 1.5s]", 1500), ("[PAUSE 2 S]", 2000), ("[ pause  .5s ]", 500),
    ("[pause 50ms]", 50), ("[pause 10s]", 10000), ("[Pause 10000ms]", 10000),
    ('<break time="500ms"/>', 500), ("<break time='2s'/>", 2000), ('<BREAK TIME="250ms">', 250),
    ('< break  time = " 1s " / >', 1000),
])
def test_the_accepted_forms(tag, ms):
    pause = parse_tag(tag)
    assert pause.ms == ms and pause.tag == tag


@pytest.mark.parametrize("tag, words", [
    ("[pause 49ms]", "asks for 49 ms"), ("[pause 10.5s]", "asks for 10.5 s"), ("[pause 0s]", "asks for 0 ms"),
    ('<break time="20s"/>', "asks for 20 s"),
])
def test_out_of_range_is_refused_naming_the_tag_and_the_range(tag, words):
    with pytest.raises(InputError) as refused:
        SpokenText(f"Hello {tag} there.")
    message = str(refused.value)
    assert repr(tag) in message and words in message and "50 ms to 10 s" in message
    assert "[pause 500ms]" in message and '<break time="500ms"/>' in message


@pytest.mark.parametrize("tag", ["[pause]", "[pause 5]", "[pause 5 min]", "[pause five s]", "[pause 1s",
                                 '<break time="5"/>', "<break strength='weak'/>", "<break>", '<break time=500ms/>',
                                 '<break time="1s\'/>'])
def test_a_malformed_tag_is_refused_not_read_aloud(tag):
    with pytest.raises(InputError, match="is not understood: a pause is 50 ms to 10 s"):
        SpokenText(f"Hello {tag} there.")


@pytest.mark.parametrize("text", ["[pauses] are fine", "<breaking> news", "a pause, then", "take a break."])
def test_words_that_only_look_alike_are_text(text):
    assert split_pauses(text) == [text]
    assert SpokenText(text).pauses == []


def test_pauses_cut_the_text_into_segments_where_they_fall():
    spoken = SpokenText("One. [pause 1s] Two, three. <break time='250ms'/>Four.")
    # A pause is a boundary however short the text; the space before a tag opens the next segment.
    assert spoken.segments == ["One.", " Two, three.", " Four."]
    assert spoken.pauses == [{"before": 1, "ms": 1000, "tag": "[pause 1s]"},
                             {"before": 2, "ms": 250, "tag": "<break time='250ms'/>"}]
    assert SpokenText("One. Two, three.").segments == ["One. Two, three."]
    # Cut as the same text without the tag would be cut there: the space opens the next segment.
    assert SpokenText("One. [pause 1s] Two, three.").segments == SpokenText("One. Two, three.", segment_weight=13).segments


def test_leading_trailing_and_consecutive_pauses():
    spoken = SpokenText("[pause 200ms] Hi. [pause 1s] [pause 0.5s]<break time=\"300ms\"/> Yo. [pause 2s]")
    assert spoken.segments == ["Hi.", " Yo."]  # no leading space after a leading tag: as "Hi." alone
    assert [(p["before"], p["ms"]) for p in spoken.pauses] == [(0, 200), (1, 1800), (2, 2000)]
    assert spoken.pauses[1]["tag"] == '[pause 1s][pause 0.5s]<break time="300ms"/>'
    assert [spoken.pause_ms(k) for k in range(3)] == [200, 1800, 2000]


def test_pauses_in_a_row_are_bounded_as_one():
    with pytest.raises(InputError, match=r"add up to 12 s at one point.*at most 10 s"):
        SpokenText("Hi. [pause 6s] [pause 6s] Yo.")


@pytest.mark.parametrize("text", ["[pause 1s]", "[pause 1s] [pause 2s]", " <break time='1s'/> "])
def test_a_text_of_pauses_alone_is_refused(text):
    with pytest.raises(InputError, match="only pause tags: give words"):
        SpokenText(text)


def test_the_normalizer_leaves_the_tags_alone():
    text = 'It costs $5. <break time="500ms"/> I paid 1,250 dollars. [pause 1s] Bye.'
    assert "break" not in clean_text(text)  # read whole, the clean-up would drop the SSML tag as HTML
    spoken = SpokenText(text, normalize=True)
    assert spoken.segments == ["It costs five dollars.", " I paid one thousand two hundred and fifty dollars.",
                               " Bye."]
    assert [p["ms"] for p in spoken.pauses] == [500, 1000]


def test_the_text_as_spoken_shows_where_the_pauses_fall():
    spoken = SpokenText("[pause 1s] Hi. [pause 500ms] Yo. [pause 2s]")
    report = Report(segments=spoken.segments, segment_count=len(spoken), pauses=spoken.pauses)
    assert report.spoken_text() == "[pause 1s] Hi. [pause 500ms] Yo. [pause 2s]"
    assert Report(segments=["Hi."], segment_count=2, pauses=spoken.pauses).spoken_text() == "[pause 1s] Hi. [pause 500ms]"
    assert Report(segments=["A.", " B."], segment_count=2).spoken_text() == "A. B."


def test_the_spec_states_the_bounds():
    assert modes.spec_json()["pauses"] == {"min_ms": 50, "max_ms": 10000,
                                           "forms": ["[pause 500ms]", "[pause 1.5s]", '<break time="500ms"/>']}


def test_a_huge_tag_is_not_echoed_whole():
    with pytest.raises(InputError) as err:
        split_pauses("[pause " + "0" * 19_000 + "1ms]")
    assert len(str(err.value)) < 300
