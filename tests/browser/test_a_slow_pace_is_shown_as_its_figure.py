"""The panel's pace bars say how many times real time a take ran (static/player/panel.js), in Node:
a take slower than a tenth of real time read "0.0× real time" (issue 58 item 4), as if it made
nothing. Below 1 the figure keeps two significant digits (no trailing zero); from 1 on, one decimal."""
from __future__ import annotations

import pytest

from ..support.node_module import HAS_NODE, call

if not HAS_NODE:
    pytest.skip("node is needed to run the page's JavaScript", allow_module_level=True)


@pytest.mark.parametrize("rtf, said", [
    (30.0, "0.033× real time"),
    (250.0, "0.004× real time"),
    (2.5, "0.4× real time"),
    (1.25, "0.8× real time"),
    (1.0, "1.0× real time"),
    (0.25, "4.0× real time"),
    (0.05, "20.0× real time"),
])
def test_the_pace_says_how_many_times_real_time_even_when_slow(rtf, said):
    assert call("player/panel.js", "timesRealTime", rtf) == said
