"""The take evaluation's error rate (inference/analysis/scores.py) against the standard definition,
counted by hand: WER = (substitutions + deletions + insertions) / reference words, after both texts
are normalized as seed-tts-eval does (lower case, punctuation removed, traditional Chinese made
simplified), CER over characters for Chinese; and the marks the page draws (misread, missing,
inserted words with their times and their place in the text)."""
from __future__ import annotations

import numpy as np
import pytest

from inference.errors import InputError
from inference.analysis.scores import (cosine, error_rate, heard_units, is_chinese, mean_embedding, normalize,
                                      reference_units, windows)

TEXT = "The quick brown fox, jumps over the LAZY dog!"


def score(text: str, words: list[tuple[str, float, float]], chinese: bool = False) -> dict:
    return error_rate(reference_units(text, chinese), heard_units(words, chinese), chinese)


def timed(transcript: str) -> list[tuple[str, float, float]]:
    return [(f" {w}", i * 0.5, i * 0.5 + 0.4) for i, w in enumerate(transcript.split())]


def test_wer_counts_one_substitution_one_deletion_one_insertion_over_nine_words():
    # By hand: fox -> box (substitution), the second "the" unheard (deletion), "today" added (insertion);
    # "Quick" and "LAZY" match whatever their case, and the punctuation counts for nothing.
    got = score(TEXT, timed("the Quick brown box jumps over lazy dog. Today"))
    assert (got["substitutions"], got["deletions"], got["insertions"], got["hits"]) == (1, 1, 1, 7)
    assert got["reference_units"] == 9 and got["metric"] == "wer"
    assert got["rate"] == pytest.approx(3 / 9, abs=1e-4)


def test_marks_say_what_was_heard_where_and_which_words_of_the_text():
    marks = score(TEXT, timed("the quick brown box jumps over lazy dog today"))["words"]
    misread = [m for m in marks if m["type"] == "misread"]
    missing = [m for m in marks if m["type"] == "missing"]
    inserted = [m for m in marks if m["type"] == "inserted"]
    assert [(m["ref"], m["heard"], m["start"], m["end"]) for m in misread] == [("fox", "box", 1.5, 1.9)]
    assert TEXT[slice(*misread[0]["span"])] == "fox,"
    # The missing "the" sits where the words around it were heard: after "over" (ends at 2.9 s).
    assert [(m["ref"], m["start"], TEXT[slice(*m["span"])]) for m in missing] == [("the", 2.9, "the")]
    assert missing[0]["span"][0] == TEXT.index("the LAZY")
    assert [(m["heard"], m["start"], m["span"]) for m in inserted] == [("today", 4.0, [len(TEXT), len(TEXT)])]
    assert sum(m["type"] == "ok" for m in marks) == 7


def test_a_perfect_take_scores_zero_and_apostrophes_are_part_of_a_word():
    assert score("Don't stop, Mr. Smith.", timed("don't stop mr smith"))["rate"] == 0
    got = score("Don't stop.", timed("dont stop"))
    assert (got["substitutions"], got["rate"]) == (1, 0.5)


def test_chinese_is_scored_by_characters_with_traditional_made_simplified_on_both_sides():
    text = "今天天氣很好。"
    assert is_chinese(text) and not is_chinese(TEXT)
    assert normalize("今天天氣，很好！") == "今天天气很好"
    # By hand: 很 -> 真 (substitution), 啊 added (insertion), over 6 characters.
    got = score(text, [("今天天氣真好", 0.0, 1.0), ("啊", 1.0, 1.2)], chinese=True)
    assert got["metric"] == "cer" and got["reference_units"] == 6
    assert (got["substitutions"], got["deletions"], got["insertions"]) == (1, 0, 1)
    assert got["rate"] == pytest.approx(2 / 6, abs=1e-4)
    assert [text[slice(*m["span"])] for m in got["words"] if m["type"] == "misread"] == ["很"]


def test_nothing_heard_is_every_word_missing_and_no_words_is_refused():
    got = score("one two three", [])
    assert (got["deletions"], got["rate"]) == (3, 1.0)
    with pytest.raises(InputError, match="no words to score"):
        score("?!", timed("hello"))


def test_long_audio_is_cut_at_its_quietest_point_into_windows_that_cover_it():
    rate = 100
    audio = np.ones(25 * rate, np.float32)
    audio[int(8.5 * rate):int(8.6 * rate)] = 0  # a pause near the end of the first 10 s window
    spans = windows(audio, rate, 10.0)
    assert spans[0][0] == 0 and spans[-1][1] == len(audio)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and all(hi - lo <= 10 * rate for lo, hi in spans)
    assert 8.5 * rate <= spans[0][1] <= 8.6 * rate


def test_similarity_is_the_cosine_of_the_embeddings():
    a, b = np.array([1.0, 0.0]), np.array([1.0, 1.0])
    assert cosine(a, b) == pytest.approx(2 ** -0.5)
    assert np.allclose(mean_embedding([a, np.array([0.0, 1.0])], [1, 1]), [2 ** -0.5, 2 ** -0.5])
