"""When text that arrives in pieces goes to the model (a live request, inference/request/feed.py):
clause by clause, as soon as each is complete and long enough to be spoken well.
"""
from __future__ import annotations

import math
import re
from typing import Iterator


class Ends:
    """Where a piece of text ends: a run of `marks` followed by a space (so "3.5" and "e.g" mid-word
    do not end one), or a run of `cjk_marks`, which need none; closing quotes and brackets stay with
    it. What the pattern `[marks]+[closers]*(?=\\s)|[cjk_marks]+[cjk_closers]*` finds with finditer,
    found in time linear in the text: that pattern retries every shorter run from every mark of a
    long run that no space follows (a piece of 20,000 "!" took 4.4 s of the event loop)."""

    def __init__(self, marks: str, cjk_marks: str, closers: str = "\"'”’)]", cjk_closers: str = "”’」』）"):
        self.marks, self.closers = marks, closers
        self.chars = "".join(sorted(set(marks + cjk_marks + closers + cjk_closers)))  # all a match may hold
        self.runs = re.compile(f"[{re.escape(self.chars)}]+")
        self.cjk = re.compile(f"[{re.escape(cjk_marks)}]+[{re.escape(cjk_closers)}]*")

    def run_start(self, text: str) -> int:
        """Where the run of characters a match may hold that `text` ends in begins (its length if none)."""
        return len(text.rstrip(self.chars))

    def finditer(self, text: str, pos: int = 0) -> Iterator[int]:
        """The end of each match from `pos`, in order. A match lies within one run of the characters
        it may hold. In a run, the first alternative can match only from the first mark of the
        marks-then-closers its end is made of, and only with a space after the run: the scan's
        CJK matches come first, up to that mark, and then it (if the scan has not passed it)."""
        for run in self.runs.finditer(text, pos):
            a, b, chars = run.start(), run.end(), run.group()
            q = len(chars.rstrip(self.closers))  # the closers the run ends in begin here
            p = len(chars[:q].rstrip(self.marks))  # and the marks before them here
            first = p if p < q and b < len(text) and text[b].isspace() else None  # where the first alternative matches
            at = 0
            for cjk in self.cjk.finditer(chars):
                if first is not None and cjk.start() >= first:
                    break
                at = cjk.end()
                yield a + at
            if first is not None and at < q:
                yield b


CLAUSE_END = Ends(".!?;:,…", "。！？；：，、…")
SENTENCE_END = Ends(".!?…", "。！？…")  # what split_granularity "sentence" waits for
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
NOT_SPACE = re.compile(r"\S")


class Clauses:
    """The commit policy: text comes in pieces of any size; a clause goes to the model as soon as
    it is complete and at least `min_chars` long (a shorter one waits for the next, so that no
    word or two is spoken alone); when the pieces stop, `idle()` gives what is there up to its last
    word; at the end of an utterance, `rest()` gives all of it. Whitespace after a clause stays
    with the next one, which reads it as the space between them."""

    def __init__(self, min_chars: float, ends: Ends = CLAUSE_END):
        """min_chars: math.inf keeps everything until rest() (the client commits); ends: where a
        piece may end (CLAUSE_END, or SENTENCE_END)."""
        self.min_chars, self.ends, self.buffer = min_chars, ends, ""

    def add(self, text: str) -> list[str]:
        """The clauses `text` completes. Each piece costs what it adds, not the buffer: a session
        may send its whole text limit without a clause end, one character at a time, and every
        piece runs on the event loop. The scan resumes at the run of end characters the buffer
        ended in (an end there may now be complete, or longer); the ends before it were all seen,
        and were too short to cut at, which they stay until a cut after them."""
        if self.min_chars == math.inf:  # nothing is ever cut here: no need to look
            self.buffer += text
            return []
        resume = self.ends.run_start(self.buffer)
        self.buffer += text
        out, start, words = [], 0, None
        for end in self.ends.finditer(self.buffer, resume):
            if words is None or words < start:  # the clause's first character that is not a space
                found = NOT_SPACE.search(self.buffer, start)
                words = found.start() if found else len(self.buffer)
            if end - words >= self.min_chars:  # its length stripped: it ends in a mark, not a space
                out.append(self.buffer[start:end])
                start = end
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
