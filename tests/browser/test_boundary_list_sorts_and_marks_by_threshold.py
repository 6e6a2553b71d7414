"""The per-boundary list's rows (static/workbench/analysis.js boundaryRows) in Node: times in ms, bad
above the list's own threshold, sorted by score or time either way, ties in time order."""
from __future__ import annotations

import pytest

from ..support.node_module import HAS_NODE, call

if not HAS_NODE:
    pytest.skip("node is needed to run the page's JavaScript", allow_module_level=True)

SCORES = [{"offset": 3840, "jump": 10, "typical": 5, "score": 2.0, "flagged": False},
          {"offset": 7680, "jump": 90, "typical": 10, "score": 9.0, "flagged": True},
          {"offset": 11520, "jump": 40, "typical": 10, "score": 4.0, "flagged": False},
          {"offset": 15360, "jump": 20, "typical": 5, "score": 4.0, "flagged": False}]


def test_rows_sort_by_score_and_time_and_mark_the_bad_ones():
    rows = call("workbench/analysis.js", "boundaryRows", SCORES, 48000, 3.5, "score", "desc")
    assert [r["index"] for r in rows] == [2, 3, 4, 1]  # worst first; the two 4.0s in time order
    assert [r["bad"] for r in rows] == [True, True, True, False]
    assert [r["ms"] for r in rows] == [160, 240, 320, 80]
    rows = call("workbench/analysis.js", "boundaryRows", SCORES, 48000, 6, "ms", "desc")
    assert [r["index"] for r in rows] == [4, 3, 2, 1] and [r["bad"] for r in rows] == [False, False, True, False]
    rows = call("workbench/analysis.js", "boundaryRows", SCORES, 48000, 6, "score", "asc")
    assert [r["index"] for r in rows] == [1, 3, 4, 2]
