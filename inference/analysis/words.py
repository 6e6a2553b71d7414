"""A take's words on its timeline (word timestamps, subtitles), made in the analysis process: the
text that was asked for, part by part (a long text's segments), aligned against the audio made.

Like an evaluation (evaluation.py), it says which clips the aligner must hear (`clips`, `texts`);
the process aligns those of every take waiting together, batched, and hands each its share back
(`result`). The aligner takes one Whisper window at most: a part that lasts longer (a segment
played slower than the model's pace) is aligned in windows of equal length, its words shared
between them by how long they take to say, so a word near a window's edge may be placed a little off.
"""
from __future__ import annotations

import math

from .alignment import units
from .evaluation import RATE, Take
from .recognition import MAX_SECONDS
from .scores import is_chinese

# Speech per unit: an ideograph is a syllable; a word, its letters (as inference/text/segments.py weighs them).
_CJK_WEIGHT = 3


class TakeWords:
    def __init__(self, take: Take):
        self.take = take
        # (part, start s, text, by characters) of each clip, in order
        self.windows: list[tuple[int, float, str, bool]] = []
        self._clips = []
        for i, (text, start, end) in enumerate(take.parts):
            chinese = take.chinese or is_chinese(text)  # a Chinese part of a mixed take: by characters
            for lo, hi, words in split(units(text, chinese), start, end):
                self.windows.append((i, lo, ("" if chinese else " ").join(words), chinese))
                self._clips.append(take.audio[int(lo * RATE):int(hi * RATE)])

    def clips(self) -> list:
        return self._clips

    def texts(self) -> list[str]:
        return [text for _, _, text, _ in self.windows]

    def languages(self) -> list[bool]:
        """Whether each clip's text is read by characters (Chinese)."""
        return [chinese for _, _, _, chinese in self.windows]

    def result(self, aligned: list[list[tuple[str, float, float]]]) -> list[dict]:
        """The words of the whole take, in order, timed on its timeline."""
        return [{"word": word, "start_s": round(at + start, 3), "end_s": round(at + end, 3), "segment": part}
                for (part, at, _, _), words in zip(self.windows, aligned) for word, start, end in words]


def split(words: list[str], start: float, end: float) -> list[tuple[float, float, list[str]]]:
    """(start s, end s, its words) of each window of a part: one when it fits a Whisper window,
    else equal windows sharing the words by weight. A part without words needs no window."""
    if not words:
        return []
    count = math.ceil((end - start) / MAX_SECONDS - 1e-9) or 1
    if count == 1:
        return [(start, end, words)]
    weights = [_CJK_WEIGHT if len(w) == 1 and not w.isascii() else len(w) + 1 for w in words]
    total, length = sum(weights), (end - start) / count
    windows: list[tuple[float, float, list[str]]] = [(start + k * length, start + (k + 1) * length, []) for k in range(count)]
    said = 0
    for word, weight in zip(words, weights):
        k = min(count - 1, int((said + weight / 2) / total * count))  # the window its middle falls in
        windows[k][2].append(word)
        said += weight
    return [window for window in windows if window[2]]
