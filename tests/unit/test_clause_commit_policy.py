"""When text arriving in pieces goes to the model (inference/text/clauses.py): at the end of a clause
as soon as the clause is complete and long enough, whatever the pieces' sizes; never inside a
number or a word; up to the last whole word when the pieces stop; all of it at the end."""
from __future__ import annotations

import pytest

from inference.text.clauses import Clauses

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
