"""Word timestamps of a known text (issue #47, inference/analysis/alignment.py): the text's units as
the contract names them, and align() on the tests' tiny random Whisper (tests/fixtures/tiny_whisper.py)
loaded by the app's own code. Random weights time nothing meaningfully, so what is checked there is
the shape of the answer (every unit, in order, monotone, inside the clip; a batch as each clip alone);
the timing itself is checked on constructed attention, where the right boundaries are known."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from inference.analysis import alignment
from inference.analysis.alignment import align, alignment_matrix, spaced_out, unit_times, units
from inference.analysis.loading import ModelUnavailable
from inference.analysis.recognition import load_recognizer
from inference.errors import InputError

from ..fixtures.tiny_whisper import write_tiny_whisper

RATE = 16000
ENGLISH = "Hello, world! The voice [pause 500ms] is here <break time=\"1s\"/> today."
CHINESE = "你好，世界！[pause 1s]我爱Python编程。"


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory):
    return load_recognizer(str(write_tiny_whisper(tmp_path_factory.mktemp("whisper"))), "cpu")


def noise(seconds: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(seconds * RATE)) * 0.1).astype(np.float32)


def test_words_keep_their_punctuation_and_pause_tags_are_not_words():
    assert units(ENGLISH, False) == ["Hello,", "world!", "The", "voice", "is", "here", "today."]
    assert units("one[pause 200ms]two", False) == ["one", "two"]  # a pause parts the words on its sides
    assert units("", False) == [] and units("  [pause 1s] ", False) == []


def test_chinese_is_timed_by_characters_with_latin_words_whole():
    assert units(CHINESE, True) == ["你", "好", "世", "界", "我", "爱", "Python", "编", "程"]
    assert units("2024年，「OK」吗？ hi, 好", True) == ["2024", "年", "OK", "吗", "hi,", "好"]


def test_a_malformed_pause_tag_is_refused_as_synthesis_refuses_it():
    with pytest.raises(InputError, match="not understood"):
        units("one [pause:1s] two", False)


def check_shape(timed, text, chinese, seconds):
    assert [word for word, _, _ in timed] == units(text, chinese), "every unit, in order"
    bounds = [t for _, start, end in timed for t in (start, end)]
    assert all(a <= b for a, b in zip(bounds, bounds[1:])), f"monotone: {timed}"
    assert all(end > start for _, start, end in timed), f"each unit lasts: {timed}"
    assert 0 <= bounds[0] and bounds[-1] <= seconds


def test_every_unit_comes_back_in_order_within_its_clip(recognizer):
    clips = [noise(4.0, 1), noise(6.5, 2), noise(1.0, 3)]
    texts = [ENGLISH, CHINESE, "Short."]
    timed = align(recognizer, clips, texts, [False, True, False])
    for got, clip, text, zh in zip(timed, clips, texts, [False, True, False]):
        check_shape(got, text, zh, len(clip) / RATE)


def test_a_batch_times_each_clip_as_it_would_be_timed_alone(recognizer):
    clips = [noise(3.0, 4), noise(8.0, 5), noise(5.0, 6)]
    texts = ["A short one.", ENGLISH, CHINESE]  # of different lengths: the shorter ones padded
    chinese = [False, False, True]
    together = align(recognizer, clips, texts, chinese)
    for clip, text, zh, batched in zip(clips, texts, chinese, together):
        alone = align(recognizer, [clip], [text], [zh])[0]
        assert [w for w, _, _ in alone] == [w for w, _, _ in batched]
        gaps = [abs(a - b) for (_, *x), (_, *y) in zip(alone, batched) for a, b in zip(x, y)]
        assert max(gaps) <= alignment.FRAME_S + 1e-9, (alone, batched)


def test_an_empty_text_gives_no_words(recognizer):
    assert align(recognizer, [noise(2.0, 7), noise(2.0, 8)], ["", "Hello there."], [False, False])[0] == []
    assert align(recognizer, [noise(1.0, 9)], ["[pause 1s]"], [True]) == [[]]
    assert align(recognizer, [], [], []) == []


def test_clips_longer_than_one_window_or_empty_are_refused(recognizer):
    with pytest.raises(InputError, match="30 s"):
        align(recognizer, [noise(31.0, 10)], ["Too long."], [False])
    with pytest.raises(InputError, match="empty"):
        align(recognizer, [np.zeros(0, np.float32)], ["Nothing."], [False])


def test_a_checkpoint_without_alignment_heads_cannot_time_words(recognizer, monkeypatch):
    monkeypatch.setattr(recognizer.pipe.model.generation_config, "alignment_heads", None)
    with pytest.raises(ModelUnavailable, match="cannot time words.*alignment_heads.*openai/whisper"):
        align(recognizer, [noise(2.0, 11)], ["Hello."], [False])


def test_the_model_keeps_its_attention_implementation(recognizer):
    """The forced pass needs eager attention (sdpa returns no weights) only for itself."""
    model = recognizer.pipe.model
    model.set_attn_implementation("sdpa")
    align(recognizer, [noise(2.0, 12)], ["Hello world."], [False])
    assert model.config._attn_implementation == "sdpa"


def test_a_multilingual_prompt_names_the_language_and_the_task(recognizer, monkeypatch):
    model, tokenizer = recognizer.pipe.model, recognizer.pipe.tokenizer
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>",
                                                        "<|notimestamps|>")]
    assert alignment.prompt(model, tokenizer, False) == [ids[0], ids[3]], "English-only: no language, no task"
    monkeypatch.setattr(model.generation_config, "is_multilingual", True)
    assert alignment.prompt(model, tokenizer, False) == ids
    with pytest.raises(ModelUnavailable, match="<|zh|>"):  # the tiny tokenizer knows English alone
        alignment.prompt(model, tokenizer, True)


def test_each_unit_owns_the_tokens_of_its_text(recognizer):
    tokenizer = recognizer.pipe.tokenizer
    spoken = alignment.spoken_units("Hello, world 你好", True)
    ids, counts = alignment.token_ranges(tokenizer, spoken)
    assert len(ids) == sum(counts) and all(counts)
    pieces = np.split(np.array(ids), np.cumsum(counts)[:-1])
    assert [tokenizer.decode(p) for p in pieces] == ["Hello,", " world", " 你", "好"]


def flat(pairs) -> list[float]:
    return [t for pair in pairs for t in pair]


def diagonal(token_frames: list[int], noise_level: float = 0.0, background: float = -1.0) -> np.ndarray:
    """An alignment matrix whose token k attends to its own run of token_frames[k] frames, and less
    than average to the others' (as after the standardisation over tokens: `background` < 0)."""
    frames = sum(token_frames)
    matrix = np.full((len(token_frames), frames), background)
    at = 0
    for k, n in enumerate(token_frames):
        matrix[k, at:at + n] = 1.0
        at += n
    return matrix + noise_level * np.random.default_rng(0).standard_normal(matrix.shape)


def test_dtw_over_a_diagonal_matrix_gives_the_known_boundaries():
    # units of 2, 1 and 3 tokens; each token 10 frames (0.2 s), then <|endoftext|> for 5 frames
    known = flat([(0.0, 0.4), (0.4, 0.6), (0.6, 1.2)])
    assert flat(unit_times(diagonal([10] * 6 + [5]), [2, 1, 3], seconds=1.3)) == pytest.approx(known)
    noisy = unit_times(diagonal([10] * 6 + [5], noise_level=0.05), [2, 1, 3], seconds=1.3)
    assert flat(noisy) == pytest.approx(known, abs=alignment.FRAME_S + 1e-9), "within a frame"


def test_the_alignment_matrix_from_attention_heads_times_the_units():
    """Two heads attending along the diagonal (one of them noisy), as softmaxed attention: after the
    standardisation, the median filter and the average, DTW still finds each token's frames."""
    clean = diagonal([8, 12, 6, 14, 10], background=0.0) * 0.9 + 0.1 / 50
    noisy = np.clip(clean + 0.2 * np.random.default_rng(1).random(clean.shape), 0, None)
    weights = torch.tensor(np.stack([clean, noisy]), dtype=torch.float16)  # as a GPU gives them
    matrix = alignment_matrix(weights)
    assert matrix.shape == (5, 50)
    assert flat(unit_times(matrix, [1, 2, 1], seconds=1.0)) == pytest.approx(flat([(0.0, 0.16), (0.16, 0.52), (0.52, 0.8)]))


def test_boundaries_are_made_monotone_inside_the_clip_and_each_unit_lasts():
    got = spaced_out(np.array([0.3, 0.2, 0.2, 0.9, 5.0]), seconds=1.0)
    starts, ends = zip(*got)
    assert got[0] == (0.3, 0.3 + alignment.MIN_UNIT_S) and ends[-1] == 1.0
    assert all(e > s for s, e in got) and list(starts[1:]) == list(ends[:-1])
    assert flat(spaced_out(np.array([1.0, 1.0, 1.0]), seconds=1.0)) == pytest.approx([0.998, 0.999, 0.999, 1.0])


def test_a_units_span_is_fitted_to_the_sound_inside_it():
    """The path gives a word the silence after it; the fit gives it back, and a span with no sound
    in it (a word the path put in a pause) keeps its times."""
    rate = 16000
    clip = np.zeros(rate * 2, np.float32)
    t = np.arange(rate) / rate
    clip[int(0.2 * rate):int(0.6 * rate)] = 0.3 * np.sin(2 * np.pi * 220 * t[:int(0.4 * rate)])
    clip[int(1.1 * rate):int(1.5 * rate)] = 0.3 * np.sin(2 * np.pi * 330 * t[:int(0.4 * rate)])
    fitted = alignment.fitted_to_sound(clip, rate, [(0.15, 1.05), (1.05, 1.9), (1.9, 2.0)])
    assert fitted[0] == pytest.approx((0.2, 0.6), abs=0.011)
    assert fitted[1] == pytest.approx((1.1, 1.5), abs=0.011)
    assert fitted[2] == (1.9, 2.0)
