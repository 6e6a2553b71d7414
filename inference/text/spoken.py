"""A request's text as the model will speak it: whitespace collapsed, optionally normalized
(inference/text/normalize.py), and cut into segments (inference/text/segments.py).

Everything is computed when the object is made, on the thread that makes it: a request is
prepared before it reaches the engine's thread (inference/runtime/prepare.py), so normalizing a
long text (WeText takes seconds for 20,000 characters) never holds up the streams being generated.
"""
from __future__ import annotations

import re

from . import normalize as tn
from ..errors import InputError
from .content import has_content
from .segments import SEGMENT_WEIGHT, split_segments
from .tokenizer import normalize_text

_EDGE_SPACE = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)


class SpokenText:
    def __init__(self, text: str, normalize: bool = False, segment_weight: int = SEGMENT_WEIGHT):
        text = normalize_text(text)
        if normalize:  # the official clean-up runs on the whole text: markdown can span sentences
            text = tn.clean_text(text)
        if not has_content(text):
            raise InputError("after markdown and emoji are removed, the text holds nothing to speak: "
                             "give words, or turn normalization off")
        self.lang = tn.language(text)
        self._normalize = normalize
        self._segments = [self._speakable(raw) for raw in split_segments(text, segment_weight)]

    def __len__(self) -> int:
        return len(self._segments)

    def _speakable(self, raw: str) -> str:
        if not self._normalize:
            return raw
        # WeText strips the ends; the space between two segments must survive, or the
        # continuation prompt would read "one.Two".
        lead, body, trail = _EDGE_SPACE.match(raw).groups()
        return lead + tn.normalize(body, self.lang) + trail if body else raw

    def segment(self, k: int) -> str:
        """Segment k as spoken."""
        return self._segments[k]

    @property
    def segments(self) -> list[str]:
        return list(self._segments)

    def ready(self, start: int = 0) -> list[str]:
        """The segments from `start` on whose spoken form is known (all of them)."""
        return self._segments[start:]
