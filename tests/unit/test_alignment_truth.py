"""The ground truth that bench/alignment.py measures the word aligner against (issue #47): words
spoken one by one, trimmed, joined with known gaps. Its boundaries must be where the sound is:
silent between words, loud at each word's first and last 5 ms. Checked with espeak-ng as the
benchmark runs it (skipped without it: .ci/run installs it), and with stand-in words without it."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from bench import alignment as bench
from inference.analysis.alignment import units

RATE = bench.RATE
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def samples(seconds: float) -> int:
    return int(round(seconds * RATE))


def check_matches_energy(truth: bench.Truth):
    audio, words = truth.audio, truth.words
    assert [w for w, _, _ in words] == units(truth.text, truth.chinese), "the aligner's units, in order"
    edges = [0] + [samples(t) for _, start, end in words for t in (start, end)] + [len(audio)]
    for lo, hi in zip(edges[::2], edges[1::2]):  # before the first word, the gaps, after the last
        assert not np.any(audio[lo:hi]), f"silence from {lo / RATE:.3f} s to {hi / RATE:.3f} s"
    for word, start, end in words:
        lo, hi = samples(start), samples(end)
        assert hi - lo >= bench.FRAME and (hi - lo) % bench.FRAME == 0
        loud = bench.loud_frames(audio[lo:hi])
        assert loud[0] and loud[-1], f"{word!r} is loud at its first and last 5 ms"


def test_stand_in_words_are_trimmed_and_joined_at_their_known_times():
    def tone(unit: str, voice: str) -> np.ndarray:  # quiet padding around a tone as long as the unit
        t = np.arange(int(0.08 * RATE * len(unit))) / RATE
        return np.concatenate([np.full(800, 1e-4), 0.3 * np.sin(2 * np.pi * 220 * t), np.zeros(1200)]).astype(np.float32)
    truth = bench.build_truth("One, two three [pause 1s] four.", False, np.random.default_rng(3), speak_unit=tone)
    check_matches_energy(truth)
    lengths = [end - start for _, start, end in truth.words]
    assert lengths == pytest.approx([0.32, 0.24, 0.4, 0.4], abs=0.0051), "the padding is trimmed away"
    assert truth.words[0][1] == bench.EDGE_S


def test_gaps_are_whole_frames_in_range_and_some_words_touch():
    found = bench.gaps(400, np.random.default_rng(0))
    ms = np.array(found) / RATE * 1000
    assert all(g % bench.FRAME == 0 for g in found)
    assert np.all((ms == 0) | ((ms >= 40) & (ms <= 400)))
    assert 0.1 < np.mean(ms == 0) < 0.3 and np.ptp(ms[ms > 0]) > 300


@needs_espeak
@pytest.mark.parametrize("text, chinese", [(bench.SENTENCES["en"][1], False), (bench.SENTENCES["zh"][1], True)])
def test_espeak_truth_is_silent_between_words_and_loud_inside(text, chinese):
    truth = bench.build_truth(text, chinese, np.random.default_rng(0))
    check_matches_energy(truth)
    starts = [start for _, start, _ in truth.words]
    ends = [end for _, _, end in truth.words]
    assert any(a == b for a, b in zip(ends, starts[1:])), "some words touch"


def test_errors_are_measured_per_boundary():
    truth = bench.Truth("a b", False, np.zeros(RATE, np.float32), [("a", 0.1, 0.3), ("b", 0.5, 0.7)])
    errors = bench.boundary_errors(truth, [("a", 0.12, 0.5), ("b", 0.5, 0.69)])
    assert errors["start"] == pytest.approx([0.02, 0.0]) and errors["end"] == pytest.approx([0.2, 0.01])
    assert bench.summary(errors["start"] + errors["end"])["within_40ms"] == 0.75
    with pytest.raises(ValueError, match="dropped"):
        bench.boundary_errors(truth, [("a", 0.1, 0.3)])
    # With the path exact each word would end at the next one's start (late by the gap): the fit to
    # the sound inside each span gives the true ends back, within a 10 ms frame.
    sounding = np.zeros(RATE, np.float32)
    for _, start, end in truth.words:
        sounding[int(start * RATE):int(end * RATE)] = 0.3
    assert bench.end_floor(bench.Truth("a b", False, sounding, truth.words)) == pytest.approx([0.0, 0.0], abs=0.011)


@needs_espeak
def test_the_chinese_truth_is_spoken_as_mandarin_not_as_english_tone_digits():
    # espeak-ng marks each switch to another language's phonemes with "(en)": Debian's cmn voice
    # switches for most characters (their pinyin's tone digit read as an English number).
    import subprocess

    characters = "".join(u for text in bench.SENTENCES["zh"] for u in units(text, True) if not u.isascii())
    said = subprocess.run(["espeak-ng", "-q", "-x", "-v", bench.VOICES["zh"], characters], check=True,
                          capture_output=True, text=True).stdout
    assert "(en)" not in said, said
    cmn = subprocess.run(["espeak-ng", "-q", "-x", "-v", "cmn", characters], check=True, capture_output=True, text=True).stdout
    assert "(en)" in cmn, "the check tells the broken voice apart"


def test_the_docs_name_the_voices_the_benchmark_speaks_with():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for voice in bench.VOICES.values():
        assert f"`{voice}`" in docs, voice
