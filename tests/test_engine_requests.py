"""Engine-level request handling on the tiny checkpoint: the forms noise may take, what is refused,
and one stream at a time."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from inference import InputError, SynthesisRequest

from .app_helpers import load_engine

TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def engine():
    return load_engine()


def noise(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 64, 4)).astype(np.float32)


def run(engine, **kw) -> list:
    return list(engine.stream(SynthesisRequest(TEXT, **kw)))


def test_noise_tensors_of_any_dtype_give_the_audio_of_their_values(engine):
    rounded = torch.from_numpy(noise(4)).to(torch.bfloat16)
    want = run(engine, noise=rounded.float().numpy(), min_len=4, max_len=4)
    for given in (rounded, rounded.float().requires_grad_(), rounded.double()):
        got = run(engine, noise=given, min_len=4, max_len=4)
        assert len(got) == len(want) == 4
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.audio, b.audio)


def test_noise_rows_cap_the_length_and_must_cover_min_len(engine):
    assert len(run(engine, noise=noise(3), min_len=3, max_len=50)) == 3
    with pytest.raises(InputError, match="noise has 2 rows .* min_len asks for 5 patches"):
        engine.stream(SynthesisRequest(TEXT, noise=noise(2), min_len=5))


@pytest.mark.parametrize("bad, words", [
    (np.full((3, 64, 4), np.nan, np.float32), "NaN or infinite"),
    (np.zeros((3, 4, 64), np.float32), r"shape \[steps, 64, 4\]"),
    ([["not", "numbers"]], "tensor or array of numbers"),
])
def test_bad_noise_is_refused_at_once(engine, bad, words):
    with pytest.raises(InputError, match=words):
        engine.stream(SynthesisRequest(TEXT, noise=bad, min_len=0))


def test_a_newer_stream_stops_an_unfinished_one_instead_of_corrupting_both(engine):
    want = run(engine, seed=5, min_len=4, max_len=4)
    first = engine.stream(SynthesisRequest(TEXT, seed=4, min_len=6, max_len=6))
    next(first)
    second = engine.stream(SynthesisRequest(TEXT, seed=5, min_len=4, max_len=4))
    got = list(second)
    with pytest.raises(RuntimeError, match="one stream at a time"):
        next(first)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.audio, b.audio)


@pytest.mark.parametrize("text", ["\u200b", "\x00", "\x07\x1b", "\u0301", "\u202e\u200f", "\ufeff \u3000"])
def test_text_with_nothing_to_say_is_refused_as_empty(text):
    with pytest.raises(InputError, match="text is empty"):
        SynthesisRequest(text)


@pytest.mark.parametrize("text", ["e\u0301", "42", "?", "\u4f60\u597d", "\u200bHello\u200b", "\U0001F642"])
def test_any_letter_digit_punctuation_or_symbol_is_something_to_say(text):
    assert SynthesisRequest(text).text == text
