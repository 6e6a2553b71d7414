"""Normalization against the official normalizer, segmentation, and the control prefix."""
from __future__ import annotations

import os
import signal

import pytest

from inference import SynthesisRequest
from inference.text.normalize import Normalizer, normalize, normalize_all
from inference.request.prompt import control_prefix
from inference.text.segments import SEGMENT_WEIGHT, split_segments, split_sentences, weight
from inference.text.spoken import SpokenText
from bench.official import official_text_normalizer

# (what it covers, text): each must come out exactly as the official normalizer gives it.
CASES = [
    ("en number with grouping", "I paid 12,250 dollars."),
    ("en currency", "It costs $5 each."),
    ("en decimal and unit", "It is 3.14 meters and 2.5 kg."),
    ("en date", "We met on Jan 5, 2024."),
    ("en time", "The meeting is at 3:30pm."),
    ("en percentage", "Prices rose 15% this year."),
    ("en units", "He ran 10 km in 45 min."),
    ("en abbreviation", "Dr. Smith lives on Baker St."),
    ("en ordinals", "The 1st and 2nd place."),
    ("en year", "He was born in 1990."),
    ("en euro", "It was only €20."),
    ("en phone-like", "Call me at 555-1234."),
    ("en markdown heading and link", "## Title: see [the docs](http://example.com) now."),
    ("en markdown list", "- first item\n- second item"),
    ("en html", "Press <b>Enter</b> now."),
    ("zh integer", "我花了1250元。"),
    ("zh date and time", "2024年1月5日下午3:30开会。"),
    ("zh percentage and decimal", "增长了50%，约3.5公斤。"),
    ("zh negative temperature and square metres", "温度是-5℃，面积10m²。"),
    ("zh arithmetic", "550 + 320 = 870 千卡。"),
    ("zh hyphen before digit", "x-2等于多少？"),
    ("zh mixed script", "我用iPhone 15 Pro拍的。"),
    ("zh brackets", "（括号）【重点】——结束"),
    ("zh emoji", "今天很开心😀！"),
    ("zh curly quotes", "他说“你好”。"),
]


@pytest.fixture(scope="module")
def official():
    return official_text_normalizer()


@pytest.mark.parametrize("what, text", CASES, ids=[c[0] for c in CASES])
def test_normalization_matches_the_official(official, what, text):
    assert normalize(text) == official.normalize(text), what


@pytest.mark.parametrize("text, spoken", [
    ("I paid 1,250 dollars.", "I paid one thousand two hundred and fifty dollars."),
    ("It costs $1,250.", "It costs one thousand two hundred and fifty dollars."),
])
def test_a_leading_one_thousand_is_read_whole_where_wetext_drops_the_one(official, text, spoken):
    assert normalize(text) == spoken
    assert official.normalize(text) == spoken.replace("one thousand", "thousand")  # the deviation, on purpose


@pytest.mark.parametrize("text, spoken, officially", [
    ("It costs $5.99 each.", "It costs five dollars and ninety nine cents each.", "It costs five point nine nine dollars each."),
    ("价格是42.50元。", "价格是四十二元五角。", "价格是四十二点五零元。"),
])
def test_money_is_read_as_said_where_wetext_reads_a_decimal(official, text, spoken, officially):
    assert normalize(text) == spoken
    assert official.normalize(text) == officially  # the deviation, on purpose (tests/unit/test_money_is_read_as_people_say_it.py)


def test_a_leading_one_million_stays_as_wetext_reads_it(official):
    assert normalize("About 1,000,000 people.") == official.normalize("About 1,000,000 people.") == "About one million people."


@pytest.mark.parametrize("text, spoken", [
    ("Version 3.2.1 is out.", "Version three point two point one is out."),
    ("It took 2 hrs and 1 hr.", "It took two hours and one hour."),
    ("It took 5 secs.", "It took five seconds."),
    ("The flat is 1,200 m² in size.", "The flat is one thousand two hundred square meters in size."),
    ("A 3 ft² tile.", "A three square feet tile."),
    ("We met on 24.12.2024.", "We met on the twenty fourth of december twenty twenty four."),  # a date stays a date
])
def test_versions_and_unit_abbreviations_are_read(text, spoken):
    assert normalize(text) == spoken


def test_grouped_numbers_say_and_the_same_way_whatever_their_first_digit():
    # WeText alone: "two thousand and twenty four" but "two million two hundred fifty thousand".
    assert normalize("1,024 and 2,024 and 1,250,000 and 2,250,000 and 12,345.") == (
        "one thousand and twenty four and two thousand and twenty four and one million two hundred and fifty "
        "thousand and two million two hundred and fifty thousand and twelve thousand three hundred and forty five.")
    assert normalize("It costs $1,234.50.") == "It costs one thousand two hundred and thirty four dollars and fifty cents."


def test_numbers_are_words():
    assert normalize("1,250") != "1,250" and not any(ch.isdigit() for ch in normalize("I have 1,250 cats."))


def test_where_the_official_fails_ours_still_reads():
    # WeText's English grammar asserts on the double space an emoji leaves behind.
    assert normalize("Great job 😀 team, 3 wins!") == "Great job team, three wins!"


def test_control_brackets_are_stripped_before_wrapping():
    req = SynthesisRequest(text="Hello.", control="((happy)) （calm）")
    # What the first segment's prompt is built from (inference/request/continuation.py).
    assert control_prefix(req.control) + SpokenText(req.text, req.normalize, SEGMENT_WEIGHT).segment(0) == "(happy calm)Hello."


ENGLISH = "Dr. Smith paid $5 on Jan. 5. He left!  Then what? OK. " * 40
CHINESE = "今天天气很好。我们去公园吧！你觉得呢？好的，走吧。" * 40
MIXED = "Hello world. 你好世界。Mixed text here! 对吧？Yes." * 40


def test_sentences_in_english_chinese_and_mixed():
    assert split_sentences("Dr. Smith left at 5. He came back!  Then what?") == [
        "Dr. Smith left at 5.", " He came back!", "  Then what?"]
    assert split_sentences("今天天气很好。我们去公园吧！你觉得呢？好的") == ["今天天气很好。", "我们去公园吧！", "你觉得呢？", "好的"]
    assert split_sentences("Hello world. 你好世界。Mixed text here! Yes.") == [
        "Hello world.", " 你好世界。", "Mixed text here!", " Yes."]


@pytest.mark.parametrize("text", [ENGLISH, CHINESE, MIXED, "x" * 2000, "word " * 700, "，".join(["很长的一句话"] * 300)],
                         ids=["english", "chinese", "mixed", "no-break", "no-punctuation", "commas-only"])
@pytest.mark.parametrize("limit", [40, SEGMENT_WEIGHT])
def test_segments_are_bounded_and_lose_nothing(text, limit):
    segments = split_segments(text, limit)
    assert "".join(segments) == text
    assert all(weight(s) <= limit for s in segments), max(map(weight, segments))
    assert all(s.strip() for s in segments)


def test_a_segment_ends_at_a_sentence_end_when_one_fits():
    segments = split_segments(ENGLISH, 120)
    assert all(s.rstrip()[-1] in ".!?" for s in segments[:-1])
    segments = split_segments(CHINESE, 60)
    assert all(s[-1] in "。！？" for s in segments[:-1])


def test_spoken_text_normalizes_every_segment_in_order():
    spoken = SpokenText("I paid $5 on Jan 5. " * 40, normalize=True, segment_weight=60)
    texts = [spoken.segment(k) for k in range(len(spoken))]
    assert len(texts) > 5 and all("five" in t for t in texts) and not any(ch.isdigit() for ch in "".join(texts))
    assert all(t.startswith(" ") for t in texts[1:]), "the space between two segments is kept"
    assert spoken.ready() == texts
    assert spoken.ready(2) == texts[2:] and spoken.ready(len(texts)) == []


@pytest.fixture(scope="module")
def beside():
    """A normalizer in a process of its own, as the app serves texts (spawned once for these tests)."""
    normalizer = Normalizer(1)
    yield normalizer
    normalizer.close()


def test_a_text_normalized_in_a_process_beside_reads_as_on_this_thread(beside):
    for lang, texts in (("en", [text for what, text in CASES if what.startswith("en")]),
                        ("zh", [text for what, text in CASES if what.startswith("zh")])):
        assert beside(texts, lang) == normalize_all(texts, lang)
    assert beside.worker_pid() != os.getpid()
    spoken = [SpokenText("I paid $5 on Jan 5. " * 40, normalize=True, segment_weight=60, normalizer=n).segments
              for n in (beside, normalize_all)]
    assert spoken[0] == spoken[1]


def test_a_normalizer_whose_process_died_starts_another_for_the_next_text(beside):
    gone = beside.worker_pid()
    os.kill(gone, signal.SIGKILL)
    assert beside(["It costs $5 each."], "en") == ["It costs five dollars each."]
    assert beside.worker_pid() not in (gone, os.getpid())


def test_a_normalizer_started_ahead_has_its_process_ready_for_the_first_text():
    normalizer = Normalizer(1)
    try:
        ready = normalizer.start_soon()
        pid = ready.result(timeout=120)
        assert pid != os.getpid()
        assert normalizer(["It costs $5 each."], "en") == ["It costs five dollars each."]
        assert normalizer.worker_pid() == pid, "the text went to the process started ahead"
    finally:
        normalizer.close()
    assert Normalizer(0).start_soon() is None
