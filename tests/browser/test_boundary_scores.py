"""The workbench's click check (static/workbench/analysis.js) run in Node: a jump across a chunk
boundary flags as a click, while the edges of a pause (a chunk of exact silence a [pause 500ms] tag
asked for) are not scored: speech stopping dead there is what was asked, not a click."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 3840  # 80 ms at 48 kHz

if not shutil.which("node"):
    pytest.skip("node is needed to run the page's JavaScript", allow_module_level=True)


def scores(pcm: np.ndarray, boundaries: list[dict]) -> list[dict]:
    body = json.dumps({"pcm": pcm.tolist(), "boundaries": boundaries, "rate": 48000})
    out = subprocess.run(["node", str(ROOT / "tests/support/analysis_harness.mjs"), str(ROOT / "static/workbench/analysis.js")],
                         input=body, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def speech(n: int, start: int = 0) -> np.ndarray:
    """A smooth loud tone: small steps between samples, far from zero where a chunk ends."""
    t = np.arange(start, start + n) / 48000
    return np.rint(12000 + 8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def test_a_step_inside_speech_is_flagged():
    pcm = speech(2 * CHUNK)
    pcm[CHUNK:] += 6000
    got = scores(pcm, [{"offset": 0}, {"offset": CHUNK}])
    assert [s["offset"] for s in got] == [CHUNK] and got[0]["flagged"], got


def test_the_edges_of_a_pause_are_not_scored():
    """speech | pause (exact zeros) | speech | speech: only the boundary between the two speech
    chunks is scored, and it is smooth. Scored as any boundary, both pause edges jump from about
    12000 to 0 and back, far above 6x the steps around them."""
    pcm = np.concatenate([speech(CHUNK), np.zeros(CHUNK, np.int16), speech(2 * CHUNK)])
    boundaries = [{"offset": 0}, {"offset": CHUNK, "pause": True}, {"offset": 2 * CHUNK}, {"offset": 3 * CHUNK}]
    got = scores(pcm, boundaries)
    assert [s["offset"] for s in got] == [3 * CHUNK] and not got[0]["flagged"], got
    # Without the pause flag the same samples flag both edges: the check itself still sees them.
    plain = scores(pcm, [{"offset": b["offset"]} for b in boundaries])
    assert [s["offset"] for s in plain if s["flagged"]] == [CHUNK, 2 * CHUNK], plain
