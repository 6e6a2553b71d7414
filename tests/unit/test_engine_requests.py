"""Engine-level request handling on the tiny checkpoint: the forms noise may take, what is refused,
and several streams at once."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inference import InputError, SynthesisRequest

from ..support.app_helpers import load_engine

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


def test_interleaved_streams_each_give_their_own_audio(engine):
    """Two stream() generators consumed in turn share the batch; each equals itself run alone."""
    want = [run(engine, seed=seed, min_len=4, max_len=4) for seed in (4, 5)]
    first = engine.stream(SynthesisRequest(TEXT, seed=4, min_len=4, max_len=4))
    got_first = [next(first)]
    second = engine.stream(SynthesisRequest(TEXT, seed=5, min_len=4, max_len=4))
    got_second = []
    for a, b in zip(first, second):
        got_first.append(a)
        got_second.append(b)
    got_second += list(second)
    for got, exp in ((got_first, want[0]), (got_second, want[1])):
        assert [c.index for c in got] == [c.index for c in exp]
        a, b = np.concatenate([c.audio for c in got]), np.concatenate([c.audio for c in exp])
        assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-5  # batched rows round a little differently


@pytest.mark.parametrize("text", ["\u200b", "\x00", "\x07\x1b", "\u0301", "\u202e\u200f", "\ufeff \u3000"])
def test_text_with_nothing_to_say_is_refused_as_empty(text):
    with pytest.raises(InputError, match="text is empty"):
        SynthesisRequest(text)


@pytest.mark.parametrize("text", ["e\u0301", "42", "?", "\u4f60\u597d", "\u200bHello\u200b", "\U0001F642"])
def test_any_letter_digit_punctuation_or_symbol_is_something_to_say(text):
    assert SynthesisRequest(text).text == text


def test_step_returns_what_it_made_and_each_chunk_is_final(engine):
    """One output path: each step returns its streams' new chunks (and, in the step a stream ends
    in, that stream); a chunk is complete when made and cannot be changed afterwards."""
    stream, got, last = engine.start(SynthesisRequest(TEXT, seed=7, min_len=3, max_len=3)), [], []
    while not stream.done:
        last = engine.step()
        for s, chunks in last:
            assert s is stream
            got += chunks
    assert stream in [s for s, _ in last], "the step it ended in returns it"
    want = run(engine, seed=7, min_len=3, max_len=3)
    assert [c.index for c in got] == [c.index for c in want] == [0, 1, 2]
    for a, b in zip(got, want):
        assert a.audio.dtype == np.float32 and a.segment == b.segment == 0
        np.testing.assert_array_equal(a.audio, b.audio)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].index = 5


def test_a_request_refused_for_one_field_names_it(engine):
    cases = [(dict(text=""), "text"), (dict(text="caf\ud800"), "text"), (dict(text=TEXT, cfg_value=11.0), "cfg_value"),
             (dict(text=TEXT, control="calm", prompt_audio=(16000, np.zeros(16000)), prompt_text="Hi."), "control"),
             (dict(text=TEXT, prompt_audio=(16000, np.zeros(16000))), "prompt_text"),
             (dict(text=TEXT, min_len=5, max_len=4), "max_len")]
    for fields, param in cases:
        with pytest.raises(InputError) as refused:
            SynthesisRequest(**fields)
        assert refused.value.param == param, (fields, refused.value)
    for fields, param in [(dict(text="x" * (engine.max_text_chars + 1)), "text"),
                          (dict(text=TEXT, control="y" * (engine.max_text_chars + 1)), "control")]:
        with pytest.raises(InputError, match="the limit is") as refused:
            engine.prepare(SynthesisRequest(**fields))
        assert refused.value.param == param


def test_host_memory_counts_the_page_cache_the_kernel_can_drop():
    """Rows on the CPU are sized by the memory the kernel can hand out, page cache included: the
    free pages alone once refused to start a replica on a machine with 19 GB available."""
    import os

    from inference.runtime.decode_step import host_memory

    page = os.sysconf("SC_PAGE_SIZE")
    free_pages = os.sysconf("SC_AVPHYS_PAGES") * page
    available, total = host_memory()
    assert total == os.sysconf("SC_PHYS_PAGES") * page
    assert free_pages * 0.9 <= available <= total  # MemAvailable = free + reclaimable (10%: pages move meanwhile)
