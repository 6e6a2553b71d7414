"""The AudioWorklet player's sample-level behaviour, run in Node with the worklet globals stood in
for: fades at the start, around an underrun (also one that falls exactly on a block boundary, as
whole patches do) and none at the end of a stream; played and underrun counts; silence between
streams. The browser tests check the same player end to end but cannot read its output samples."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
if NODE is None and not os.environ.get("CI"):
    pytest.skip("needs Node.js (node) to run the worklet", allow_module_level=True)

BLOCK, PREBUFFER, FADE = 128, 256, 64  # the harness's options (tests/worklet_harness.mjs)


def run(*steps: dict) -> tuple[np.ndarray, list[dict]]:
    done = subprocess.run([NODE, str(ROOT / "tests" / "worklet_harness.mjs"), str(ROOT / "static" / "pcm-worklet.js"),
                           json.dumps([{"reset": "probe"}, *steps])], capture_output=True, text=True, timeout=60,
                          check=True)
    result = json.loads(done.stdout)
    return np.asarray(result["blocks"], dtype=np.float32).reshape(-1), result["messages"]


def kinds(messages: list[dict], kind: str) -> list[dict]:
    return [m for m in messages if m["type"] == kind]


def test_waits_for_the_prebuffer_then_fades_in():
    out, messages = run({"push": PREBUFFER - 1, "blocks": 2}, {"push": 1000, "blocks": 4})
    assert not out[: 2 * BLOCK].any()  # below the prebuffer: silence
    start = out[2 * BLOCK:]
    assert start[0] == 0 and 0 < start[FADE // 2] < 0.5 and start[FADE] == pytest.approx(0.5)
    assert np.all(np.diff(start[: FADE + 1]) >= 0)
    assert kinds(messages, "started")


@pytest.mark.parametrize("pushed", [3 * BLOCK, 3 * BLOCK + 40], ids=["dry on a block boundary", "dry mid-block"])
def test_an_underrun_fades_out_counts_once_and_recovers(pushed):
    out, messages = run({"push": pushed, "blocks": 6}, {"push": 2 * PREBUFFER, "end": True, "blocks": 8})
    # The last samples before the gap fall to silence instead of stopping on a full sample.
    assert out[pushed - FADE - 1] == pytest.approx(0.5) and out[pushed - 1] < 0.05
    assert np.all(np.diff(out[pushed - FADE - 1 : pushed]) <= 0) and not out[pushed : 6 * BLOCK].any()
    assert len(kinds(messages, "underrun")) == 1
    # After the gap the prebuffer refills and the sound fades back in.
    resumed = 6 * BLOCK + int(np.flatnonzero(out[6 * BLOCK:])[0])
    assert out[resumed] < 0.05 and out[resumed + FADE] == pytest.approx(0.5)
    ended = kinds(messages, "ended")
    assert len(ended) == 1 and ended[0]["played"] == pushed + 2 * PREBUFFER and ended[0]["underruns"] == 1


def test_the_end_of_a_stream_is_not_an_underrun_and_then_it_goes_quiet():
    out, messages = run({"push": 4 * BLOCK, "end": True, "blocks": 8})
    assert out[4 * BLOCK - 1] == pytest.approx(0.5)  # the last sample as sent: no fade-out at the end
    assert not out[4 * BLOCK:].any()
    assert not kinds(messages, "underrun") and len(kinds(messages, "ended")) == 1
    last_report = max(i for i, m in enumerate(messages) if m["type"] in ("metrics", "ended"))
    assert messages[last_report]["type"] == "ended"  # no reports once the stream is done


def test_a_reset_silences_at_once_and_forgets_the_stream():
    out, messages = run({"push": 10 * BLOCK, "blocks": 4}, {"reset": "next", "blocks": 3})
    assert out[: 4 * BLOCK].any() and not out[4 * BLOCK:].any()
    after = [m for m in messages if m["id"] == "next"]
    assert after and after[-1]["played"] == 0 and after[-1]["buffered"] == 0
