"""One take's evaluation (POST /voxcpm/evaluate), made in the analysis process: its words heard
window by window and scored against the text as spoken, part by part (a long text's segments),
and its speaker embeddings compared with the clip it copies.

An evaluation says which audio each model must hear (`recognition_clips`, `embedding_clips`);
the process runs those for every evaluation waiting together, batched, and hands each its share
back (`result`). A model that is not available makes its measure say why, not the request fail.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import scores
from .loading import ModelUnavailable
from .recognition import MAX_SECONDS as HEARD_SECONDS, Heard
from .speaker import MAX_SECONDS as EMBEDDED_SECONDS

RATE = 16000  # takes and clips come at this rate: both models take it, so nothing is resampled twice


@dataclass(frozen=True)
class Take:
    """A take to evaluate: float32 mono at RATE, the parts scored on their own (text as spoken,
    start s, end s), the clip it copies (at RATE) if any, and whether it is scored by characters."""
    audio: np.ndarray
    parts: list[tuple[str, float, float]]
    reference: np.ndarray | None
    chinese: bool


class Evaluation:
    def __init__(self, take: Take, recognizer: str | None, speaker: str | None):
        """recognizer, speaker: the models' names, as the result reports them."""
        self.take, self.recognizer, self.speaker = take, recognizer, speaker
        self.pieces = [take.audio[int(start * RATE):int(end * RATE)] for _, start, end in take.parts]
        # (part, its window's first sample) of each clip the recognizer hears, in order
        self.heard_at = [(i, lo) for i, piece in enumerate(self.pieces)
                         for lo, _ in scores.windows(piece, RATE, HEARD_SECONDS)]

    @property
    def language(self) -> str:
        """What the take says, as the recognizer is told (a multilingual one may mishear it else)."""
        return "zh" if self.take.chinese else "en"

    def recognition_clips(self) -> list[np.ndarray]:
        return [piece[lo:hi] for piece in self.pieces for lo, hi in scores.windows(piece, RATE, HEARD_SECONDS)]

    def embedding_clips(self) -> list[np.ndarray]:
        """The clip's windows, then each part's; none without a clip (nothing to compare with)."""
        if self.take.reference is None:
            return []
        return [audio[lo:hi] for audio in [self.take.reference, *self.pieces]
                for lo, hi in scores.windows(audio, RATE, EMBEDDED_SECONDS) if hi > lo]

    def result(self, heard: list[Heard] | ModelUnavailable, embedded: list[np.ndarray] | ModelUnavailable) -> dict:
        """The scores, from what the models made of recognition_clips() and embedding_clips()."""
        segments = [{"index": i, "text": text, "start_s": round(start, 3), "end_s": round(end, 3)}
                    for i, (text, start, end) in enumerate(self.take.parts)]
        if not isinstance(heard, ModelUnavailable):
            self._score_words(segments, heard)
        similarity = None
        if self.take.reference is not None:
            similarity = self._similarity(segments, embedded)
        return {"intelligibility": self._intelligibility(segments, heard), "segments": segments,
                "similarity": similarity}

    def _score_words(self, segments: list[dict], heard: list[Heard]):
        chinese = self.take.chinese
        for i, segment in enumerate(segments):
            mine = [(lo, h) for (part, lo), h in zip(self.heard_at, heard) if part == i]
            start = self.take.parts[i][1]
            units = [unit for lo, h in mine for unit in scores.heard_units(h.words, chinese, start + lo / RATE)]
            transcript = " ".join(h.text for _, h in mine if h.text)
            score = scores.error_rate(scores.reference_units(segment["text"], chinese), units, chinese)
            segment["intelligibility"] = {"transcript": transcript, **score}

    def _intelligibility(self, segments: list[dict], heard) -> dict:
        if isinstance(heard, ModelUnavailable):
            return {"available": False, "reason": str(heard)}
        parts = [s["intelligibility"] for s in segments]
        return {"available": True, "model": self.recognizer, "language": self.language,
                "transcript": " ".join(p["transcript"] for p in parts), **scores.totals(parts)}

    def _similarity(self, segments: list[dict], embedded) -> dict:
        if isinstance(embedded, ModelUnavailable):
            return {"available": False, "reason": str(embedded)}
        windows = [[hi - lo for lo, hi in scores.windows(audio, RATE, EMBEDDED_SECONDS) if hi > lo]
                   for audio in [self.take.reference, *self.pieces]]
        if not windows[0]:
            return {"available": False, "reason": "the clip has no audio"}
        at, means = 0, []
        for weights in windows:  # each audio's windows, weighted by length, as one embedding
            mine, at = embedded[at:at + len(weights)], at + len(weights)
            means.append(scores.mean_embedding(mine, weights) if mine else None)
        voice, takes = means[0], []
        for segment, mean, weights in zip(segments, means[1:], windows[1:]):
            if mean is not None:
                segment["similarity"] = round(scores.cosine(mean, voice), 4)
                takes.append((mean, sum(weights)))
        if not takes:
            return {"available": False, "reason": "the take has no audio"}
        take = scores.mean_embedding([m for m, _ in takes], [w for _, w in takes])
        return {"available": True, "model": self.speaker, "score": round(scores.cosine(take, voice), 4)}
