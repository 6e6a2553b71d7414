"""A request's text as the model will speak it: whitespace collapsed, cut at its pause tags
(inference/text/pauses.py), optionally normalized (inference/text/normalize.py), and cut into
segments (inference/text/segments.py).

Everything is computed when the object is made: a request is prepared before it reaches the
engine's thread (inference/runtime/prepare.py), and a served request's segments are normalized in a
process beside the app (normalize.Normalizer, one call for them all), so normalizing a long text
(WeText takes seconds for 20,000 characters, keeping the GIL) never holds up the streams being generated.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Callable

from . import normalize as tn
from ..errors import InputError
from .pauses import Pause, check_total, split_pauses
from .segments import SEGMENT_WEIGHT, split_segments
from .tokenizer import normalize_text

# Unicode categories that say nothing on their own: separators (Z*), controls, format characters
# such as zero-width spaces and bidi marks, surrogates, private use, unassigned (C*), and combining
# marks (M*), which only modify a letter. Text made only of these is as empty as whitespace.
_SILENT_CATEGORIES = ("Z", "C", "M")


def has_content(text: str) -> bool:
    """True when the text holds at least one letter, digit, punctuation mark or symbol."""
    return any(unicodedata.category(ch)[0] not in _SILENT_CATEGORIES for ch in text)


_EDGE_SPACE = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)


class SpokenText:
    def __init__(self, text: str, normalize: bool = False, segment_weight: int = SEGMENT_WEIGHT,
                 follows: bool = False, normalizer: Callable[[list[str], str], list[str]] = tn.normalize_all):
        """follows: the text continues one spoken before it (a live request's later clause), so the
        whitespace it starts with is kept, as between two segments of one text. normalizer: what
        normalizes the segments, all in one call (a served request's runs in processes of its own:
        normalize.Normalizer)."""
        parts = split_pauses(normalize_text(text))
        if not any(has_content(p) for p in parts if isinstance(p, str)):
            raise InputError("the text holds only pause tags: give words to speak around them", "text")
        if normalize:  # the official clean-up runs on the whole piece: markdown can span sentences
            parts = [_cleaned(p, first=i == 0 and not follows) if isinstance(p, str) else p for i, p in enumerate(parts)]
        pieces = [p for p in parts if isinstance(p, str)]
        if not any(has_content(p) for p in pieces):
            raise InputError("after markdown and emoji are removed, the text holds nothing to speak: "
                             "give words, or turn normalization off", "text")
        self.lang = tn.language("".join(pieces))
        self._segments: list[str] = []
        self._pauses: dict[int, Pause] = {}  # k: the silence before segment k (k = len: after the last)
        for part in parts:
            if isinstance(part, Pause):
                self._pause(part)
            elif has_content(part):
                if not self._segments and self._pauses:  # the space after a leading tag: no speech to part from
                    part = part.lstrip()
                self._segments += split_segments(part, segment_weight)
        for pause in self._pauses.values():
            check_total(pause)
        if normalize:
            self._segments = self._speakable(normalizer)

    def _pause(self, pause: Pause):
        k = len(self._segments)
        self._pauses[k] = self._pauses[k] + pause if k in self._pauses else pause

    def __len__(self) -> int:
        return len(self._segments)

    def _speakable(self, normalizer) -> list[str]:
        """The segments normalized. WeText strips the ends; the space between two segments must
        survive, or the continuation prompt would read "one.Two"."""
        edges = [_EDGE_SPACE.match(raw).groups() for raw in self._segments]
        said = iter(normalizer([body for _, body, _ in edges if body], self.lang))
        return [lead + next(said) + trail if body else lead + trail for lead, body, trail in edges]

    def extend(self, more: "SpokenText"):
        """A later clause of a live text after this one: its segments follow, and a pause it opens
        with joins the one this text ends with."""
        start = len(self._segments)
        self._segments += more.segments
        for k, pause in more.pause_marks().items():
            self._pauses[start + k] = self._pauses[start + k] + pause if start + k in self._pauses else pause

    def pause_marks(self) -> dict[int, Pause]:
        """Each pause by the segment it comes before (len(self): after the last)."""
        return dict(self._pauses)

    def segment(self, k: int) -> str:
        """Segment k as spoken."""
        return self._segments[k]

    @property
    def segments(self) -> list[str]:
        return list(self._segments)

    def pause_ms(self, k: int) -> float:
        """Milliseconds of silence before segment k (k = len(self): after the last one)."""
        pause = self._pauses.get(k)
        return 0.0 if pause is None else pause.ms

    @property
    def pauses(self) -> list[dict]:
        """Every pause, in order: before which segment, how long, and the tags as written."""
        return [{"before": k, "ms": p.ms, "tag": p.tag} for k, p in sorted(self._pauses.items())]

    def ready(self, start: int = 0) -> list[str]:
        """The segments from `start` on whose spoken form is known (all of them)."""
        return self._segments[start:]


def _cleaned(piece: str, first: bool) -> str:
    """Markdown and emoji out of one piece. clean_text strips the ends; after a pause the
    whitespace a tag moved to the piece's front is kept, as it parts the piece from the speech
    before it in the continuation prompt."""
    lead = "" if first else piece[:len(piece) - len(piece.lstrip())]
    return lead + tn.clean_text(piece)
