"""The aligner's path guided by the sound (inference/analysis/sound_path.py, issue 57): pauses
between words found in the audio, the path rewarded for starting a word in one, and the lag of a
model's attention behind the sound learned from its clips. On constructed audio and attention,
where the right answer is known; tests/unit/test_real_whisper_hears_and_times_speech.py measures
it with real Whisper."""
from __future__ import annotations

import numpy as np
import pytest

from inference.analysis import alignment, sound_path
from inference.analysis.sound_path import SoundLag, gap_weights, row_starts

RATE = 16000
FRAME = int(RATE * sound_path.FRAME_S)


def sounds_and_pauses(pattern: list[tuple[str, int]]) -> np.ndarray:
    """('tone' or 'pause', frames of 20 ms) in order."""
    parts = []
    for kind, frames in pattern:
        t = np.arange(frames * FRAME) / RATE
        parts.append(0.3 * np.sin(2 * np.pi * 220 * t) if kind == "tone" else np.zeros(frames * FRAME))
    return np.concatenate(parts).astype(np.float32)


def test_a_pause_counts_as_between_words_by_its_length():
    clip = sounds_and_pauses([("tone", 10), ("pause", 1), ("tone", 10), ("pause", 10), ("tone", 10),
                              ("pause", 3), ("tone", 10)])
    weights = gap_weights(clip, RATE, 60, alignment.SILENCE_DB)
    assert np.all(weights[:10] == 0) and np.all(weights[10] == 0), "20 ms: a stop's closure, not a pause"
    assert np.all(weights[21:31] == 1.0), "200 ms: surely between words"
    assert np.all(weights[41:44] == pytest.approx(0.6)), "60 ms: partly"
    assert np.all(weights[54:] == 0), "past the clip's end: the encoder's padding is no pause"


def two_units(boundary: int, frames: int = 60) -> np.ndarray:
    """Attention of two one-token units and <|endoftext|>, handing over at `boundary` and at 50."""
    matrix = np.zeros((3, frames))
    matrix[0, :boundary], matrix[1, boundary:50], matrix[2, 50:] = 1.0, 1.0, 1.0
    return matrix


def test_the_path_starts_a_word_in_the_pause_near_where_attention_hands_over():
    rewarded = np.array([0.0, 1.0, 1.0])
    plain = row_starts(-two_units(20), rewarded, None)
    assert list(plain) == [0, 20, 50], "without the sound: where the attention hands over"
    pause = np.zeros(60)
    pause[24:30] = 1.0
    guided = row_starts(-two_units(20), rewarded, sound_path.GAP_BONUS * pause)
    assert 24 <= guided[1] < 30 and guided[2] == 50, "pulled 80 ms into the pause, the rest kept"
    far = np.zeros(60)
    far[40:46] = 1.0
    assert row_starts(-two_units(20), rewarded, sound_path.GAP_BONUS * far)[1] == 20, \
        "a pause 400 ms away does not outweigh the attention"


def test_more_tokens_than_frames_fall_back_to_a_path_that_shares_frames():
    matrix = np.random.default_rng(0).random((12, 8))
    assert row_starts(-matrix, np.ones(12), None) is None
    times = alignment.unit_times(matrix, [3, 4, 4], seconds=0.16)
    assert len(times) == 3 and all(e > s for s, e in times)


@pytest.mark.parametrize("lag", [3, -7, 0])
def test_the_attentions_lag_behind_the_sound_is_learned_from_where_boundaries_meet_pauses(lag):
    """Pauses of 100 ms before 80% of the words; the attention hands over `lag` frames before each
    word's onset. The lag learned moves those hand-overs into the pauses (anywhere in a pause is as
    good: the fit to the sound puts the word's start on its onset)."""
    rng = np.random.default_rng(5)
    learned, clips = SoundLag(), []
    for _ in range(4):
        weights, onsets, paused = np.zeros(500), [], []
        for onset in np.sort(rng.choice(np.arange(30, 470, 40), size=10, replace=False)):
            onsets.append(onset)
            paused.append(rng.random() < 0.8)
            if paused[-1]:
                weights[onset - 5:onset] = 1.0
        boundaries = np.array(onsets) - 3 - lag  # the pause's middle, `lag` frames early
        learned.add(boundaries, weights)
        clips.append((boundaries, weights, paused))
    for boundaries, weights, paused in clips:
        assert np.all(weights[boundaries[paused] + learned.lag] == 1.0), learned.lag
    assert np.sign(learned.lag) == np.sign(lag)
    assert SoundLag(fixed=2).lag == 2 and SoundLag().lag == 0, "fixed, or no evidence: no lag"
    few = SoundLag()
    few.add(clips[0][0][:5], clips[0][1])
    assert few.lag == 0, "five boundaries are too few to learn from"


def test_a_settled_lag_is_not_moved_by_later_clips():
    learned = SoundLag()
    weights = np.zeros(500)
    boundaries = np.arange(20, 480, 20)
    weights[boundaries[:, None] + np.arange(2, 6)] = 1.0  # every boundary 40-100 ms before its pause's end
    while not learned.settled:
        learned.add(boundaries, weights)
    settled = learned.lag
    assert settled > 0
    for _ in range(100):
        learned.add(boundaries + 9, weights)  # contrary evidence, long after
    assert learned.lag == settled
