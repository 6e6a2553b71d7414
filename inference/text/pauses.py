"""Pause tags in a text: `[pause 500ms]`, `[pause 1.5s]` or SSML's `<break time="500ms"/>`.

A pause is exact silence at that point of the stream, and a segment boundary: the text on each
side is normalized and segmented on its own (inference/text/spoken.py), so the tags are cut out
here, before the normalizer could read them as words or strip `<break>` as HTML. Anything that
starts like a tag but is not one of the accepted forms, or asks for a pause out of bounds, is
refused rather than read aloud.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError

MIN_PAUSE_MS = 50.0  # shorter than a gap between two words: nobody would hear it
MAX_PAUSE_MS = 10_000.0  # at one point, however many tags: a longer silence is better made by the client
FORMS = ("[pause 500ms]", "[pause 1.5s]", '<break time="500ms"/>')

# Whatever opens like a pause tag, up to where such a tag would close: checked against the forms.
_CANDIDATE = re.compile(r"\[\s*pause\b[^\[\]]*\]?|<\s*break\b[^<>]*>?", re.IGNORECASE)
_DURATION = r"(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s)"
_FORMS = (re.compile(rf"\[\s*pause\s+{_DURATION}\s*\]", re.IGNORECASE),
          re.compile(rf"<\s*break\s+time\s*=\s*(?P<quote>[\"'])\s*{_DURATION}\s*(?P=quote)\s*/?\s*>", re.IGNORECASE))


@dataclass(frozen=True)
class Pause:
    """Silence at one point of the text: its length, and the tags that asked for it as written."""

    ms: float
    tag: str

    def __add__(self, other: Pause) -> Pause:
        return Pause(self.ms + other.ms, self.tag + other.tag)


def accepted() -> str:
    return f"a pause is {_show(MIN_PAUSE_MS)} to {_show(MAX_PAUSE_MS)}, written " + ", ".join(FORMS[:-1]) \
        + f" or {FORMS[-1]}"


def _show(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def parse_tag(tag: str) -> Pause:
    """One tag as written -> its Pause; InputError naming the tag when malformed or out of range."""
    match = next((m for form in _FORMS if (m := form.fullmatch(tag))), None)
    if match is None:
        raise InputError(f"the pause tag {tag[:60]!r} is not understood: {accepted()}", "text")
    ms = float(match["number"]) * (1.0 if match["unit"].lower() == "ms" else 1000.0)
    if not MIN_PAUSE_MS <= ms <= MAX_PAUSE_MS:
        raise InputError(f"the pause tag {tag[:60]!r} asks for {_show(ms)}: {accepted()}", "text")
    return Pause(ms, tag)


def check_total(pause: Pause):
    """Tags in a row add up; their sum is bounded as one tag is."""
    if pause.ms > MAX_PAUSE_MS:
        raise InputError(f"the pauses {pause.tag[:120]!r} add up to {_show(pause.ms)} at one point of the text; "
                         f"at most {_show(MAX_PAUSE_MS)} of silence may fall in one place", "text")


def split_pauses(text: str) -> list[str | Pause]:
    """The text as pieces of text and the pauses between them, in order. Whitespace next to a tag
    goes to the front of the text after it (as between two sentences: inference/text/segments.py),
    so "one. [pause 1s] Two." reads "one." then " Two.", as "one. Two." would be cut."""
    parts: list[str | Pause] = []
    start = 0
    for match in _CANDIDATE.finditer(text):
        parts += [text[start:match.start()], parse_tag(match.group())]
        start = match.end()
    parts.append(text[start:])
    for i in range(1, len(parts) - 1, 2):  # each pause sits between two text pieces
        before = parts[i - 1]
        parts[i - 1] = before.rstrip()
        if not parts[i + 1][:1].isspace():  # one space between words, as the text without the tag has
            parts[i + 1] = before[len(parts[i - 1]):] + parts[i + 1]
    return parts
