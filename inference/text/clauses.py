"""When text that arrives in pieces goes to the model (a live request, inference/request/feed.py):
clause by clause, as soon as each is complete and long enough to be spoken well.
"""
from __future__ import annotations

import re

# A clause ends at punctuation followed by a space (so "3.5" and "e.g" mid-word do not end one), or
# at CJK punctuation, which needs none; closing quotes and brackets stay with it.
CLAUSE_END = re.compile(r"[.!?;:,…]+[\"'”’)\]]*(?=\s)|[。！？；：，、…]+[”’」』）]*")
# A sentence ends likewise, at its full stop, question or exclamation mark (what split_granularity
# "sentence" waits for).
SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)|[。！？…]+[”’」』）]*")
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


class Clauses:
    """The commit policy: text comes in pieces of any size; a clause goes to the model as soon as
    it is complete and at least `min_chars` long (a shorter one waits for the next, so that no
    word or two is spoken alone); when the pieces stop, `idle()` gives what is there up to its last
    word; at the end of an utterance, `rest()` gives all of it. Whitespace after a clause stays
    with the next one, which reads it as the space between them."""

    def __init__(self, min_chars: float, ends: re.Pattern = CLAUSE_END):
        """min_chars: math.inf keeps everything until rest() (the client commits); ends: where a
        piece may end (CLAUSE_END, or SENTENCE_END)."""
        self.min_chars, self.ends, self.buffer = min_chars, ends, ""

    def add(self, text: str) -> list[str]:
        self.buffer += text
        out, start = [], 0
        for end in self.ends.finditer(self.buffer):
            if len(self.buffer[start:end.end()].strip()) >= self.min_chars:
                out.append(self.buffer[start:end.end()])
                start = end.end()
        self.buffer = self.buffer[start:]
        return out

    def idle(self) -> str | None:
        cut = max(self.buffer.rfind(" "), self.buffer.rfind("\n"))
        if CJK.search(self.buffer[-1:]):  # no spaces between words there: all of it is words
            cut = len(self.buffer)
        if cut <= 0 or not self.buffer[:cut].strip():
            return None
        text, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return text

    def rest(self) -> str | None:
        text, self.buffer = self.buffer, ""
        return text if text.strip() else None
