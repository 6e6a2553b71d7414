"""The aligner's path through Whisper's attention, guided by the sound (issue 57).

Attention alone places a word boundary hundreds of ms off: the path gives every frame to some
token, and where a word follows a pause the attention hands over anywhere in (or before) the
pause. The audio says where the pauses are, and a TTS server's audio is clean: its silences between
words are true silences, while the short quiet inside a word (a stop's closure) lasted under 60 ms
in every espeak-ng word of the benchmark's truth.
So the path is rewarded for starting a unit (and the <|endoftext|> after the last) inside a
silence, by how surely that silence is between words (GAP_S), and the span is then fitted to the
sound inside it (alignment.fitted_to_sound), which puts each start on its onset.

Each Whisper checkpoint's alignment heads also lead or trail the sound by an amount of their own
(on the benchmark's truth the best fixed shift was 60 ms later for base, over 100 ms earlier for
tiny.en); rewarded silences near the wrong side of a word would then pull boundaries a word off. The shift
that undoes it (the "lag") is learned from the clips the model aligns (SoundLag): the attention's
own boundaries, shifted by each candidate, land in silences most often near the right one.
"""
from __future__ import annotations

import threading

import numpy as np

FRAME_S = 0.02  # one encoder frame
SOUND_HOP_S = 0.01  # the loudness frames silences are found in
GAP_S = (0.03, 0.08)  # a silence this long starts to count as between words, and this long fully
GAP_BONUS = 16.0  # the reward for a unit starting in a full gap, in the attention's standardised units
MAX_LAG_FRAMES = 12  # the lags tried, either way (240 ms)
# The shift taken: the smallest whose boundaries land in pauses at least this share as often as the
# best one's (the best is often far out, where shifted boundaries sit deep in the pauses).
KNEE = 0.8
# A lag is learned from this many boundaries at least (two or three clips of ten seconds); before
# that, none: one clip's few pauses could point anywhere (on the benchmark's Chinese, a lone clip's
# evidence once said 240 ms the wrong way).
MIN_BOUNDARIES = 40
# Once the best lag has put this many boundaries in pauses (a few minutes of speech), the lag is
# settled: later clips no longer move it, so a clip aligned again gets the same times.
SETTLED_HITS = 300


def gap_weights(clip: np.ndarray, rate: int, frames: int, silence_db: float) -> np.ndarray:
    """Per encoder frame: how surely it lies in a pause between words (0: sound, or a silence too
    short to be one; 1: a silence of GAP_S[1] or more). Silence: both of its 10 ms frames quieter
    than `silence_db` below the clip's loud level."""
    hop = max(1, int(rate * SOUND_HOP_S))
    count = len(clip) // hop
    weights = np.zeros(frames)
    if count == 0:
        return weights
    rms = np.sqrt(np.mean(np.square(clip[:count * hop].reshape(count, hop), dtype=np.float64), axis=1))
    loud = np.zeros(frames * 2, bool)
    loud[:min(count, frames * 2)] = (rms > np.percentile(rms, 99) * 10 ** (-silence_db / 20))[:frames * 2]
    loud[count:] = True  # past the clip's end: no silence to reward (the encoder's padding)
    silent = ~(loud[0::2] | loud[1::2])
    edges = np.flatnonzero(np.diff(np.concatenate([[0], silent.astype(np.int8), [0]])))
    for lo, hi in zip(edges[::2], edges[1::2]):  # each silent run, [lo, hi)
        weights[lo:hi] = np.clip(((hi - lo) * FRAME_S - GAP_S[0]) / (GAP_S[1] - GAP_S[0]), 0.0, 1.0)
    return weights


def row_starts(cost: np.ndarray, rewarded_rows: np.ndarray, reward: np.ndarray | None) -> np.ndarray | None:
    """The monotone path from the first row at the first frame to the last row at the last frame,
    one row down or none per frame (each row keeps a frame at least), of least cost, where entering
    a rewarded row at frame f costs reward[f] less: each row's first frame. None when there are
    more rows than frames (no such path)."""
    rows, frames = cost.shape
    if rows > frames:
        return None
    gain = np.zeros(frames) if reward is None else reward
    total = np.full(rows, np.inf)
    total[0] = cost[0, 0]
    moved = np.zeros((rows, frames), bool)
    for f in range(1, frames):  # rows at once, frame by frame
        down = np.concatenate([[np.inf], total[:-1]]) - gain[f] * rewarded_rows
        moved[:, f] = down < total
        total = np.where(moved[:, f], down, total) + cost[:, f]
    starts = np.zeros(rows, int)
    row = rows - 1
    for f in range(frames - 1, 0, -1):
        if row > 0 and moved[row, f]:
            starts[row] = f
            row -= 1
    return starts


def shifted(matrix: np.ndarray, lag: int) -> np.ndarray:
    """The matrix `lag` frames later (earlier when negative), its edge frame repeated."""
    if lag > 0:
        return np.concatenate([np.repeat(matrix[:, :1], lag, axis=1), matrix[:, :-lag]], axis=1)
    if lag < 0:
        return np.concatenate([matrix[:, -lag:], np.repeat(matrix[:, -1:], -lag, axis=1)], axis=1)
    return matrix


class SoundLag:
    """What a model's clips say of how far its attention is off the sound: for each candidate
    shift (in frames, positive: later), how many of the attention's own unit boundaries (without
    the sound's reward), moved by it, fall in a pause; `lag` is the shift to use. Summed over every
    clip the model aligns, so a short clip borrows the evidence of the others. `fixed`: a lag to use
    whatever the clips say."""

    def __init__(self, fixed: int | None = None):
        self.fixed = fixed
        self.lags = np.arange(-MAX_LAG_FRAMES, MAX_LAG_FRAMES + 1)
        self.hits = np.zeros(len(self.lags))
        self.boundaries = 0  # how many the hits were counted over
        self._lock = threading.Lock()

    @property
    def settled(self) -> bool:
        return self.fixed is not None or self.hits.max() >= SETTLED_HITS

    def add(self, boundaries: np.ndarray, weights: np.ndarray):
        """A clip's inner unit boundaries (frames) and its gap weights."""
        at = boundaries[None, :] + self.lags[:, None]
        inside = (at >= 0) & (at < len(weights))
        hit = np.where(inside, weights[np.clip(at, 0, len(weights) - 1)] > 0.5, False).sum(axis=1)
        with self._lock:
            if not self.settled:
                self.hits += hit
                self.boundaries += len(boundaries)

    @property
    def lag(self) -> int:
        if self.fixed is not None:
            return self.fixed
        with self._lock:
            hits, boundaries = self.hits.copy(), self.boundaries
        best = int(np.argmax(hits))
        if hits[best] == 0 or boundaries < MIN_BOUNDARIES:
            return 0
        side = np.sign(self.lags[best])
        for i in sorted(np.flatnonzero(np.sign(self.lags) * side >= 0), key=lambda i: abs(self.lags[i])):
            if hits[i] >= KNEE * hits[best]:
                return int(self.lags[i])
        return int(self.lags[best])
