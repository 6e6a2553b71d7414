"""Timed words as SubRip and WebVTT files (ui/services/subtitles.py), checked against what the
formats require of a player's parser."""
import re

from ui.services import subtitles


def w(word, start, end, segment=0):
    return {"word": word, "start_s": start, "end_s": end, "segment": segment}


SENTENCES = [w("Hello", 0.10, 0.42), w("there.", 0.45, 0.80), w("How", 1.00, 1.20), w("are", 1.22, 1.35),
             w("you?", 1.36, 1.70)]


def test_srt_blocks_are_numbered_with_comma_milliseconds_and_end_at_sentences():
    text = subtitles.srt(SENTENCES)
    assert text == ("1\n00:00:00,100 --> 00:00:00,800\nHello there.\n\n"
                    "2\n00:00:01,000 --> 00:00:01,700\nHow are you?\n")


def test_vtt_has_its_header_dot_milliseconds_and_a_timestamp_tag_before_each_later_word():
    text = subtitles.vtt(SENTENCES)
    assert text.startswith("WEBVTT\n\n")
    assert "00:00:00.100 --> 00:00:00.800\nHello <00:00:00.450>there.\n" in text
    assert "00:00:01.000 --> 00:00:01.700\nHow <00:00:01.220>are <00:00:01.360>you?\n" in text


def test_vtt_escapes_what_would_read_as_a_tag_or_a_cue_arrow():
    text = subtitles.vtt([w("a<b>", 0, 0.5), w("-->", 0.5, 1.0), w("&", 1.0, 1.2)])
    body = text.split("\n", 3)[3]
    assert "<b>" not in body and "-->" not in body
    assert "a&lt;b&gt;" in body and "--&gt;" in body and "&amp;" in body


def test_no_words_give_valid_empty_files():
    assert subtitles.srt([]) == ""
    assert subtitles.vtt([]) == "WEBVTT\n\n"


def test_a_long_run_of_words_is_cut_into_lines_a_viewer_can_read():
    words = [w(f"word{i}", i * 0.3, i * 0.3 + 0.25) for i in range(40)]
    cues = subtitles.cues(words)
    assert sum(len(c.words) for c in cues) == 40
    assert all(len(c.text) <= subtitles.MAX_LINE_CHARS and c.end - c.start <= subtitles.MAX_CUE_S for c in cues)
    assert [x["word"] for c in cues for x in c.words] == [x["word"] for x in words]


def test_a_pause_between_words_starts_a_new_cue():
    cues = subtitles.cues([w("before", 0, 0.4), w("after", 2.0, 2.4)])
    assert [c.text for c in cues] == ["before", "after"]


def test_chinese_characters_join_without_spaces_and_latin_words_keep_theirs():
    words = [w("你", 0, 0.2), w("好", 0.2, 0.4), w("VoxCPM", 0.4, 0.9), w("很", 0.9, 1.1), w("好", 1.1, 1.3)]
    assert subtitles.cues(words)[0].text == "你好 VoxCPM 很好"
    vtt = subtitles.vtt(words)
    assert "你<00:00:00.200>好 <00:00:00.400>VoxCPM <00:00:00.900>很<00:00:01.100>好" in vtt


def test_times_past_an_hour_are_written_in_full():
    text = subtitles.srt([w("late", 3725.5, 3726.25)])
    assert re.search(r"^01:02:05,500 --> 01:02:06,250$", text, re.M)
