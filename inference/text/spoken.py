"""A request's text as the model will speak it: whitespace collapsed, optionally normalized
(inference/text/normalize.py), and cut into segments (inference/text/segments.py).

Normalizing 20,000 characters takes WeText several seconds, far more than a first patch, so
only the first segment is normalized before the request starts; the others are normalized in
order on one background thread while the first ones are spoken (a segment of speech takes
seconds to generate, its normalization about a tenth of a second).
"""
from __future__ import annotations

import concurrent.futures
import re

from . import normalize as tn
from ..errors import InputError
from .content import has_content
from .segments import SEGMENT_WEIGHT, split_segments
from .tokenizer import normalize_text

_NORMALIZER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="normalize")
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
        self._raw = split_segments(text, segment_weight)
        self._normalize = normalize
        self._done: list[str | None] = list(self._raw) if not normalize else [None] * len(self._raw)
        self._futures: list[concurrent.futures.Future | None] = [None] * len(self._raw)
        if normalize:
            self._done[0] = self._speakable(self._raw[0])
            self._futures[1:] = [_NORMALIZER.submit(self._speakable, raw) for raw in self._raw[1:]]

    def __len__(self) -> int:
        return len(self._raw)

    def _speakable(self, raw: str) -> str:
        if not self._normalize:
            return raw
        # WeText strips the ends; the space between two segments must survive, or the
        # continuation prompt would read "one.Two".
        lead, body, trail = _EDGE_SPACE.match(raw).groups()
        return lead + tn.normalize(body, self.lang) + trail if body else raw

    def segment(self, k: int) -> str:
        """Segment k as spoken; waits for its normalization if it is not done yet."""
        if self._done[k] is None:
            self._done[k] = self._futures[k].result()
        return self._done[k]

    def ready(self, start: int = 0) -> list[str]:
        """The segments from `start` on whose spoken form is known, up to the first that is not."""
        out = []
        for k in range(start, len(self._raw)):
            if self._done[k] is None and not self._futures[k].done():
                break
            out.append(self.segment(k))
        return out

    def close(self):
        """The request ended: normalizations not begun are not needed."""
        for future in self._futures:
            if future is not None:
                future.cancel()
