"""The measures TTS papers report for a take, as the seed-tts-eval convention computes them:

- Intelligibility: the take's transcript against the text as spoken, both normalized the same way
  (traditional Chinese to simplified, lower case, punctuation removed; apostrophes inside words
  kept), then the word error rate over words, or for Chinese the character error rate over
  characters: (substitutions + deletions + insertions) / reference units, from jiwer's alignment,
  which also says which words were misread, missing or inserted.
- Speaker similarity: the cosine of two unit-length speaker embeddings (speaker.py).

Pure functions of text, numbers and arrays; the models' calls are made elsewhere (services.py).
"""
from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

APOSTROPHES = {"'", "\u2019", "\u02bc"}
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")
QUIET_FRAME_S = 0.02  # a long take is cut into windows at its quietest 20 ms...
QUIET_SEARCH = 1 / 3  # ...within the last third of each window


@dataclass(frozen=True)
class Unit:
    """A scored word (a character, in Chinese): normalized text and where it came from: its span in
    the original reference text, or its times in the take (seconds)."""
    text: str
    span: tuple[int, int] | None = None
    start: float | None = None
    end: float | None = None


@functools.lru_cache(maxsize=1)
def _to_simplified():
    from wetext.utils import preprocess  # WeText's traditional-to-simplified grammar (already a dependency)

    return lambda text: preprocess(text, traditional_to_simple=True)


def simplified(text: str) -> str:
    return _to_simplified()(text) if CJK.search(text) else text


def is_punctuation(ch: str) -> bool:  # or a symbol (seed-tts-eval's list has $, %, ~...)
    return unicodedata.category(ch)[0] in "PSC" and ch not in APOSTROPHES  # controls dropped too


def clean(text: str) -> str:
    """Lower case, punctuation removed (not replaced by a space, as seed-tts-eval does): character by
    character, so a character's place in the text is kept."""
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join("'" if ch in APOSTROPHES else ch for ch in text if not is_punctuation(ch))


def normalize(text: str) -> str:
    """Both sides of a score go through this: simplified Chinese, then clean(), single spaces."""
    return " ".join(clean(simplified(text)).split())


def is_chinese(text: str, language: str = "auto") -> bool:
    """Scored by characters (CER) when asked for `zh`, or with `auto` when most of the text's letters
    are Chinese characters."""
    if language != "auto":
        return language == "zh"
    letters = [ch for ch in text if ch.isalnum()]
    return bool(letters) and sum(bool(CJK.match(ch)) for ch in letters) * 2 >= len(letters)


def reference_units(text: str, chinese: bool) -> list[Unit]:
    """The reference text's units, each with its span in `text` (for marking it in the page)."""
    units = []
    for match in re.finditer(r"\S+", text):
        word = match.group()
        if chinese:  # every character on its own, Latin letters too (as the convention splits them)
            converted = simplified(word)
            converted = converted if len(converted) == len(word) else word  # keep each character's place
            for i, ch in enumerate(converted):
                units.extend(Unit(c, (match.start() + i, match.start() + i + 1)) for c in clean(ch).replace(" ", ""))
        else:
            norm = normalize(word).replace(" ", "")
            if norm:
                units.append(Unit(norm, (match.start(), match.end())))
    return units


def heard_units(words: list[tuple[str, float | None, float | None]], chinese: bool, offset: float = 0.0) -> list[Unit]:
    """The recognizer's transcript as units, each with its times in the take (`offset`: where its
    window starts). The transcript is split as a whole (the recognizer's pieces need not end at
    spaces); a unit takes its times from the pieces its first and last characters came from."""
    text = "".join(word for word, _, _ in words)
    piece = [i for i, (word, _, _) in enumerate(words) for _ in word]  # character -> its piece

    def at(value):
        return None if value is None else round(value + offset, 3)
    units = []
    for unit in reference_units(text, chinese):
        first, last = words[piece[unit.span[0]]], words[piece[unit.span[1] - 1]]
        units.append(Unit(unit.text, start=at(first[1]), end=at(last[2])))
    return units


def error_rate(reference: list[Unit], heard: list[Unit], chinese: bool) -> dict:
    """WER (CER for Chinese) of `heard` against `reference`, and the alignment word by word: each
    reference unit `ok`, `misread` (with what was heard) or `missing`, and each extra one `inserted`,
    with its times (a missing word: where the words around it were heard) and reference span."""
    import jiwer

    if not reference:
        raise InputError("the text has no words to score once punctuation is removed: give the text as spoken")
    out = jiwer.process_words(" ".join(u.text for u in reference), " ".join(u.text for u in heard) or "")
    marks = []
    for chunk in out.alignments[0]:
        kinds = {"equal": "ok", "substitute": "misread", "delete": "missing", "insert": "inserted"}
        kind = kinds[chunk.type]
        if kind == "inserted":
            at = reference[chunk.ref_start_idx].span[0] if chunk.ref_start_idx < len(reference) else reference[-1].span[1]
            marks.extend(_mark(kind, None, h, (at, at)) for h in heard[chunk.hyp_start_idx:chunk.hyp_end_idx])
        elif kind == "missing":
            near = _near(heard, chunk.hyp_start_idx)
            marks.extend(_mark(kind, r, near, r.span) for r in reference[chunk.ref_start_idx:chunk.ref_end_idx])
        else:
            pairs = zip(reference[chunk.ref_start_idx:chunk.ref_end_idx], heard[chunk.hyp_start_idx:chunk.hyp_end_idx])
            marks.extend(_mark(kind, r, h, r.span) for r, h in pairs)
    return {"metric": "cer" if chinese else "wer", "rate": round(float(out.wer), 4), "reference_units": len(reference),
            "substitutions": out.substitutions, "deletions": out.deletions, "insertions": out.insertions,
            "hits": out.hits, "words": marks}


def _near(heard: list[Unit], index: int) -> Unit | None:
    """Where a missing word would have been: the end of the word heard before it (or the next one's start)."""
    if index > 0:
        before = heard[index - 1]
        return Unit("", start=before.end, end=before.end)
    return heard[0] if heard else None


def _mark(kind: str, ref: Unit | None, heard: Unit | None, span) -> dict:
    return {"type": kind, "ref": ref.text if ref else None,
            "heard": heard.text if heard is not None and kind != "missing" else None,
            "start": heard.start if heard else None, "end": heard.end if heard else None,
            "span": list(span) if span else None}


def totals(parts: list[dict]) -> dict:
    """The error rate over several segments: errors summed over reference units summed (the
    corpus-level figure papers report), not a mean of the segments' rates."""
    errors = sum(p["substitutions"] + p["deletions"] + p["insertions"] for p in parts)
    units = sum(p["reference_units"] for p in parts)
    summed = {k: sum(p[k] for p in parts) for k in ("substitutions", "deletions", "insertions", "hits")}
    return {"metric": parts[0]["metric"], "rate": round(errors / units, 4), "reference_units": units, **summed}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))


def mean_embedding(embeddings: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """A take longer than one call's window: its windows' embeddings, weighted by their lengths."""
    mean = np.average(np.stack(embeddings), axis=0, weights=weights)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


def windows(audio: np.ndarray, rate: int, max_seconds: float) -> list[tuple[int, int]]:
    """[start, end) sample ranges of at most max_seconds covering `audio`, each cut at the quietest
    20 ms of its last third (between words, with luck, rather than through one)."""
    size, frame = int(max_seconds * rate), max(1, int(QUIET_FRAME_S * rate))
    spans, start = [], 0
    while len(audio) - start > size:
        lo = start + int(size * (1 - QUIET_SEARCH))
        tail = audio[lo:start + size]
        frames = len(tail) // frame
        energy = np.square(tail[:frames * frame].reshape(frames, frame)).sum(axis=1)
        cut = lo + int(np.argmin(energy)) * frame + frame // 2
        spans.append((start, cut))
        start = cut
    spans.append((start, len(audio)))
    return spans
