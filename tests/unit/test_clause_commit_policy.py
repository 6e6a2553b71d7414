"""When text arriving in pieces goes to the model (inference/text/clauses.py): at the end of a clause
as soon as the clause is complete and long enough, whatever the pieces' sizes; never inside a
number or a word; up to the last whole word when the pieces stop; all of it at the end."""
from __future__ import annotations

import math
import random
import re
import time

import pytest

from inference.text.clauses import CLAUSE_END, SENTENCE_END, Clauses

TEXT = 'He paid 3.5 dollars, "twice," she said. Then: nothing at all; silence… The end.'


@pytest.mark.parametrize("size", [1, 2, 5, 11, len(TEXT)])
def test_the_clauses_are_the_same_whatever_the_size_of_the_pieces(size):
    clauses = Clauses(min_chars=12)
    out = [c for at in range(0, len(TEXT), size) for c in clauses.add(TEXT[at:at + size])]
    assert out == ['He paid 3.5 dollars,', ' "twice," she said.', ' Then: nothing at all;']
    assert clauses.rest() == " silence… The end."  # " silence…" alone is too short: it waited


def test_a_short_clause_waits_for_the_next_and_cjk_punctuation_needs_no_space():
    clauses = Clauses(min_chars=12)
    assert clauses.add("Yes, ") == []  # too short alone: it goes with what follows
    assert clauses.add("I will come tomorrow. ") == ["Yes, I will come tomorrow."]
    assert Clauses(min_chars=4).add("今天天气很好，我们去公园吧。明天") == ["今天天气很好，", "我们去公园吧。"]


def test_when_the_pieces_stop_what_is_there_goes_up_to_its_last_whole_word():
    clauses = Clauses(min_chars=12)
    clauses.add("words that stop com")
    assert clauses.idle() == "words that stop" and clauses.buffer == " com"
    assert clauses.idle() is None  # a word alone, still being written, waits
    clauses = Clauses(min_chars=12)
    clauses.add("我们去公园")
    assert clauses.idle() == "我们去公园"  # no spaces between words there
    assert Clauses(min_chars=12).rest() is None


# The policy as first written: every piece scanned the whole buffer with these patterns. It is the
# reference the scan that resumes where the last one stopped must agree with, piece for piece.
_CLAUSE_END = re.compile(r"[.!?;:,…]+[\"'”’)\]]*(?=\s)|[。！？；：，、…]+[”’」』）]*")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)|[。！？…]+[”’」』）]*")


class _WholeScan:
    def __init__(self, min_chars, ends):
        self.min_chars, self.ends, self.buffer = min_chars, ends, ""

    def add(self, text):
        self.buffer += text
        out, start = [], 0
        for end in self.ends.finditer(self.buffer):
            if len(self.buffer[start:end.end()].strip()) >= self.min_chars:
                out.append(self.buffer[start:end.end()])
                start = end.end()
        self.buffer = self.buffer[start:]
        return out

    def idle(self):
        cut = max(self.buffer.rfind(" "), self.buffer.rfind("\n"))
        if re.search(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", self.buffer[-1:]):
            cut = len(self.buffer)
        if cut <= 0 or not self.buffer[:cut].strip():
            return None
        text, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return text


@pytest.mark.parametrize("min_chars, ends, reference", [
    (12, CLAUSE_END, _CLAUSE_END), (1, CLAUSE_END, _CLAUSE_END), (40, CLAUSE_END, _CLAUSE_END),
    (1, SENTENCE_END, _SENTENCE_END), (math.inf, CLAUSE_END, _CLAUSE_END)])
def test_random_text_in_random_pieces_and_pauses_is_cut_where_a_scan_of_all_of_it_would_cut_it(min_chars, ends, reference):
    rng = random.Random(f"{min_chars}{reference.pattern}")
    alphabet = list(".!?;:,…\"'”’)]。！？；：，、”’」』）") + [" ", " ", "\n", "\u3000", "a", "b", "7", "今", "天"]
    for _ in range(600):
        ours, whole = Clauses(min_chars, ends), _WholeScan(min_chars, reference)
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        at = 0
        while at < len(text):
            size = rng.choice([1, 1, 2, 3, 7, 30])
            piece, at = text[at:at + size], at + size
            assert ours.add(piece) == whole.add(piece), (text, at)
            assert ours.buffer == whole.buffer
            if rng.random() < 0.1:  # the pieces stop for a while: what is there goes up to its last word
                assert ours.idle() == whole.idle(), (text, at)
        assert ours.rest() == (whole.buffer if whole.buffer.strip() else None)


def test_a_long_run_of_punctuation_costs_the_loop_little():
    # Each piece used to scan the whole buffer, and a run of marks with no space after it made the
    # pattern backtrack over the run from every mark: 2,000 "!" one at a time took 31 s of the
    # event loop's time, one piece of 20,000 of them 4.4 s (this machine). A live session may
    # send up to max_text_chars; the bound here is far above what the scan now takes.
    started = time.perf_counter()
    clauses = Clauses(min_chars=12)
    for _ in range(3000):
        assert clauses.add("!") == []
    assert Clauses(min_chars=12).add("!" * 20000) == []
    padded = " " * 20000 + "a, " * 3000  # spaces before many clauses too short alone
    clauses = Clauses(min_chars=12)
    out = clauses.add(padded)
    assert "".join(out) + clauses.buffer == padded and all(len(c.strip()) >= 12 for c in out) and len(out) > 500
    assert time.perf_counter() - started < 3.0
