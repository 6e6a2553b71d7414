"""A take's words in the analysis process (inference/analysis/words.py): each part aligned on its
own and placed on the take's timeline; a part longer than one Whisper window aligned in windows
that share its words by how long they take to say."""
import numpy as np

from inference.analysis.evaluation import RATE, Take
from inference.analysis.recognition import MAX_SECONDS
from inference.analysis.words import TakeWords, split


def test_a_part_that_fits_one_window_is_one_clip():
    assert split(["a", "b"], 2.0, 10.0) == [(2.0, 10.0, ["a", "b"])]
    assert split([], 0.0, 10.0) == []


def test_a_long_part_is_cut_into_equal_windows_that_keep_every_word_in_order():
    words = [f"w{i:02d}" for i in range(99)]  # all as long to say
    windows = split(words, 1.0, 1.0 + 2.5 * MAX_SECONDS)
    assert len(windows) == 3 and all(hi - lo <= MAX_SECONDS + 1e-9 for lo, hi, _ in windows)
    assert [w for _, _, ws in windows for w in ws] == words
    assert [len(ws) for _, _, ws in windows] == [33, 33, 33]
    assert windows[0][0] == 1.0 and windows[-1][1] == 1.0 + 2.5 * MAX_SECONDS


def test_words_share_windows_by_how_long_they_take_to_say():
    words = ["a"] * 10 + ["extraordinarily"] * 2
    windows = split(words, 0.0, 2 * MAX_SECONDS)
    assert [len(ws) for _, _, ws in windows] == [10, 2]


def test_each_parts_words_land_on_the_takes_timeline_with_its_index():
    take = Take(np.zeros(4 * RATE, np.float32), [("Hello there.", 0.0, 1.5), ("你好", 1.5, 4.0)], None, False)
    words = TakeWords(take)
    assert words.texts() == ["Hello there.", "你好"] and words.languages() == [False, True]
    assert [len(c) for c in words.clips()] == [int(1.5 * RATE), int(2.5 * RATE)]
    out = words.result([[("Hello", 0.0, 0.5), ("there.", 0.5, 1.0)], [("你", 0.1, 0.4), ("好", 0.4, 0.9)]])
    assert out == [{"word": "Hello", "start_s": 0.0, "end_s": 0.5, "segment": 0},
                   {"word": "there.", "start_s": 0.5, "end_s": 1.0, "segment": 0},
                   {"word": "你", "start_s": 1.6, "end_s": 1.9, "segment": 1},
                   {"word": "好", "start_s": 1.9, "end_s": 2.4, "segment": 1}]


def test_a_part_of_pauses_only_asks_the_aligner_for_nothing():
    take = Take(np.zeros(RATE, np.float32), [("[pause 500ms]", 0.0, 1.0)], None, False)
    assert TakeWords(take).clips() == [] and TakeWords(take).result([]) == []
