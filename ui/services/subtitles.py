"""A take's timed words as subtitles: SubRip (.srt) and WebVTT (.vtt).

Words are grouped into cues the way subtitle guidelines ask (a line a viewer reads at a glance, at
most MAX_CUE_S on screen, a new cue after a sentence's end or a pause), and each format is written
exactly as its players parse it: SRT's numbered blocks with comma milliseconds; WebVTT's header,
dot milliseconds, escaped text, and each word after a cue's first given its own timestamp tag, so a
player that supports them (browsers' ::cue(:past)) highlights the word being spoken. No words give
a valid empty file of either kind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE_CHARS = 42  # the common guideline for a subtitle line (Netflix, BBC: 37-42)
MAX_CJK_CHARS = 16  # Chinese lines hold fewer, wider characters
MAX_CUE_S = 7.0
PAUSE_S = 1.0  # a silence this long between two words starts a new cue
_SENTENCE_END = re.compile(r"[.!?…。！？]['\"”’)）」』]*$")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
FORMATS = {"srt": "application/x-subrip", "vtt": "text/vtt"}


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    words: list[dict]

    @property
    def text(self) -> str:
        return joined([w["word"] for w in self.words])


def joined(units: list[str], shown: list[str] | None = None) -> str:
    """Words as a line: spaces between them, none between two CJK characters; `shown`: what to
    write for each word instead of the word itself (the same spacing)."""
    out = ""
    for i, unit in enumerate(units):
        if i and not (_CJK.search(units[i - 1][-1:]) and _CJK.match(unit)):
            out += " "
        out += unit if shown is None else shown[i]
    return out


def cues(words: list[dict]) -> list[Cue]:
    """Consecutive words gathered into cues: a cue ends after a sentence's last word, before a word
    that would make its line too long or keep it on screen too long, and at a pause."""
    out: list[Cue] = []
    current: list[dict] = []
    for word in words:
        if current and not fits(current, word):
            out.append(Cue(current[0]["start_s"], current[-1]["end_s"], current))
            current = []
        current.append(word)
        if _SENTENCE_END.search(word["word"]):
            out.append(Cue(current[0]["start_s"], current[-1]["end_s"], current))
            current = []
    if current:
        out.append(Cue(current[0]["start_s"], current[-1]["end_s"], current))
    return out


def fits(current: list[dict], word: dict) -> bool:
    text = joined([w["word"] for w in current] + [word["word"]])
    limit = MAX_CJK_CHARS if _CJK.search(text) else MAX_LINE_CHARS
    return (len(text) <= limit and word["end_s"] - current[0]["start_s"] <= MAX_CUE_S
            and word["start_s"] - current[-1]["end_s"] < PAUSE_S)


def clock(seconds: float, separator: str) -> str:
    ms = max(0, round(seconds * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{separator}{ms % 1000:03d}"


def srt(words: list[dict]) -> str:
    blocks = [f"{i}\n{clock(c.start, ',')} --> {clock(c.end, ',')}\n{c.text}\n"
              for i, c in enumerate(cues(words), 1)]
    return "\n".join(blocks)


def vtt(words: list[dict]) -> str:
    blocks = []
    for cue in cues(words):
        # Escaped as the format asks ("-->" and tags cannot appear in cue text), each later word
        # after its own timestamp tag.
        units = [w["word"] for w in cue.words]
        shown = [escape(units[0])] + [f"<{clock(w['start_s'], '.')}>{escape(w['word'])}" for w in cue.words[1:]]
        text = joined(units, shown)
        blocks.append(f"{clock(cue.start, '.')} --> {clock(cue.end, '.')}\n{text}\n")
    return "WEBVTT\n\n" + "\n".join(blocks)


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write(words: list[dict], fmt: str) -> str:
    """The words as a subtitle file of `fmt` (a key of FORMATS)."""
    return srt(words) if fmt == "srt" else vtt(words)
