"""Long text into sentences, and sentences into segments the model reads one at a time.

VoxCPM2 drifts (hurries, buzzes, loses the voice) after a few hundred characters, so a long
text is generated segment by segment, each continuing from the tail of the one before
(inference/request/continuation.py). Sentences come from `sentencex` (maintained, rule-based, about 300
languages, CJK full stops included); consecutive sentences are grouped while the segment stays
within a bound, and a sentence over the bound is cut at clause punctuation, then at spaces,
then anywhere. Every piece is an exact slice of the text: joined, they give it back, and the
whitespace between two sentences starts the next piece (so "A. B." reads as "A." + " B.",
and the continuation prompt's text is the original text, tokenized as written).
"""
from __future__ import annotations

import re

from sentencex import segment as sentencex_segment

from .normalize import language

# Speech per character: a CJK ideograph is a syllable (about 0.25 s), a Latin letter about a
# fifteenth of a second, so an ideograph weighs as three characters.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# A segment of this weight is about 20 s of speech: well inside what VoxCPM2 keeps steady.
SEGMENT_WEIGHT = 300
_CLAUSE_END = re.compile(r"[,;:，；：、—)\]）」』》]+\s*")


def weight(text: str) -> int:
    return len(text) + 2 * len(_CJK.findall(text))


def split_sentences(text: str) -> list[str]:
    """Sentences as slices of `text`, whitespace moved to the front of the following one."""
    found = [s for s in sentencex_segment(language(text), text) if s]
    if "".join(found) != text:  # sentencex dropped or changed something: one piece, cut by weight
        found = [text]
    pieces, start = [], 0
    for sentence in found:
        end = start + len(sentence.rstrip())
        if end > start:
            pieces.append((start, end))
        start += len(sentence)
    if not pieces:
        return [text] if text else []
    bounds = [0] + [b for _, b in pieces[:-1]] + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def split_segments(text: str, limit: int = SEGMENT_WEIGHT) -> list[str]:
    """Consecutive sentences grouped into segments of at most `limit` weight each."""
    segments: list[str] = []
    for sentence in split_sentences(text):
        for piece in _within(sentence, limit):
            if segments and weight(segments[-1]) + weight(piece) <= limit:
                segments[-1] += piece
            else:
                segments.append(piece)
    return segments


def _within(sentence: str, limit: int) -> list[str]:
    """A sentence in pieces of at most `limit` weight: cut after clause punctuation where
    possible, else before a space, else at the limit."""
    pieces = []
    while weight(sentence) > limit:
        cut = _last_cut(sentence, limit)
        pieces.append(sentence[:cut])
        sentence = sentence[cut:]
    return pieces + ([sentence] if sentence else [])


def _last_cut(sentence: str, limit: int) -> int:
    room = _longest_prefix(sentence, limit)
    head = sentence[:room]
    clause = [m.end() for m in _CLAUSE_END.finditer(head) if m.end() < room]
    if clause:
        return _before_space(sentence, clause[-1])
    space = head.rfind(" ", 1)
    return space if space > 0 else max(1, room)


def _before_space(sentence: str, cut: int) -> int:
    """Move a cut back over the whitespace the clause pattern swallowed: it opens the next piece."""
    while cut > 1 and sentence[cut - 1].isspace():
        cut -= 1
    return cut


def _longest_prefix(sentence: str, limit: int) -> int:
    total = 0
    for i, ch in enumerate(sentence):
        total += weight(ch)
        if total > limit:
            return i
    return len(sentence)
