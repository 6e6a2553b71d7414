"""What blind A/B and ABX play (static/workbench/matched.js), run in Node as the page runs it: the same
region of A and B, equally long, the louder turned down to the quieter's loudness; and the loudness of
a region shorter than BS.1770's 400 ms block, measured ungated, reads as the standard calibrates it."""
from __future__ import annotations

import numpy as np
import pytest

from ..support.node_module import HAS_NODE, call

if not HAS_NODE:
    pytest.skip("node is needed to run the page's JavaScript", allow_module_level=True)

RATE = 48000


def sine(seconds: float, amplitude: float, hz: float = 997.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return np.rint(amplitude * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def test_a_short_region_reads_the_standards_loudness():
    """BS.1770 calibrates a full-scale 997 Hz sine at -3.01 LUFS: half scale is 6.02 dB below. A
    100 ms region (a ±50 ms loop) has no 400 ms block to gate, so it is measured ungated."""
    short = call("workbench/matched.js", "regionLoudness", sine(0.1, 0.5), RATE)
    long = call("workbench/matched.js", "regionLoudness", sine(1.0, 0.5), RATE)
    assert abs(short - (-3.01 - 6.02)) < 0.1 and abs(long - (-3.01 - 6.02)) < 0.1, (short, long)
    assert call("workbench/matched.js", "regionLoudness", np.zeros(4800, np.int16), RATE) == "-Infinity"


def test_clips_are_the_same_region_equally_long_and_equally_loud():
    a = sine(1.0, 0.5)
    b = sine(0.7, 0.25)  # shorter, and 6.02 dB quieter (at one frequency: K-weighting leaves 997 Hz as it is)
    c = call("workbench/matched.js", "matchedClips", a, b, RATE, 4800, 1e9)  # from 100 ms to "the end"
    assert (c["from"], c["to"]) == (4800, len(b))  # clamped to the shorter: no tail gives A away
    assert len(c["a"]) == len(c["b"]) == len(b) - 4800
    assert abs(c["gainA"] - (-6.02)) < 0.1 and c["gainB"] == 0  # the louder turned down, never the quieter up
    la = call("workbench/matched.js", "regionLoudness", np.array(c["a"], np.int16), RATE)
    lb = call("workbench/matched.js", "regionLoudness", np.array(c["b"], np.int16), RATE)
    assert abs(la - lb) < 0.05, (la, lb)
    # Inside the 5 ms fades the clip is the region's samples at the gain, nothing else.
    fade = 240
    want = np.rint(a[4800:len(b)].astype(float) * 10 ** (c["gainA"] / 20))[fade:-fade]
    assert np.max(np.abs(np.array(c["a"])[fade:-fade] - want)) <= 1
    assert np.array_equal(np.array(c["b"])[fade:-fade], b[4800 + fade:len(b) - fade])
    assert abs(c["a"][0]) < 100 and abs(c["b"][-1]) < 100  # faded in and out: no click at the cuts


def test_a_silent_side_is_left_as_it_is():
    c = call("workbench/matched.js", "matchedClips", sine(0.5, 0.5), np.zeros(24000, np.int16), RATE, 0, 12000)
    assert c["gainA"] == 0 and c["gainB"] == 0 and c["lufsB"] == "-Infinity" and len(c["a"]) == 12000
