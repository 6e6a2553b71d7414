"""The page's code run in Node. The AudioWorklet player's sample-level behaviour, run in Node with the worklet globals stood in
for: fades at the start, around an underrun (also one that falls exactly on a block boundary, as
whole patches do) and none at the end of a stream; played and underrun counts; silence between
streams. The browser tests check the same player end to end but cannot read its output samples. And the
framed-stream reader (static/player/frames.js) on bodies written by ui/http/frames.py, split anywhere,
truncated or malformed."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ui.http import frames
from ui.http.frames import HEADER, FrameError

from ..fixtures.frames import read_frames
from ..http.test_frames import MALFORMED, sample_body

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
if NODE is None and not os.environ.get("CI"):
    pytest.skip("needs Node.js (node) to run the worklet", allow_module_level=True)

BLOCK, PREBUFFER, FADE = 128, 256, 64  # the harness's options (tests/support/worklet_harness.mjs)


def run(*steps: dict) -> tuple[np.ndarray, list[dict]]:
    done = subprocess.run([NODE, str(ROOT / "tests" / "support" / "worklet_harness.mjs"), str(ROOT / "static" / "player" / "pcm-worklet.js"),
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
    # The gap's end is reported with its frame, so the page can say how long it lasted.
    (resumed_msg,) = kinds(messages, "resumed")
    assert kinds(messages, "underrun")[0]["frame"] == (pushed - 1) // BLOCK * BLOCK  # the block that ran dry
    assert resumed_msg["frame"] == 6 * BLOCK  # the block in which the refilled buffer plays again
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


def test_running_dry_on_the_last_sample_before_the_end_arrives_is_taken_back():
    """The page says the stream ended only once its body has (the status frame after the last
    audio): a player that played every sample before that ran dry, but no audio was missing."""
    out, messages = run({"push": 3 * BLOCK, "blocks": 6}, {"end": True, "blocks": 2})
    assert len(kinds(messages, "underrun")) == 1  # dry, and not knowing yet why
    ended = kinds(messages, "ended")
    assert len(ended) == 1 and ended[0]["underruns"] == 0 and ended[0]["played"] == 3 * BLOCK
    # Samples that came after the player ran dry make it a gap, even if the end follows them.
    _, messages = run({"push": 3 * BLOCK, "blocks": 6}, {"push": PREBUFFER, "end": True, "blocks": 6})
    assert kinds(messages, "ended")[0]["underruns"] == 1


def test_a_reset_silences_at_once_and_forgets_the_stream():
    out, messages = run({"push": 10 * BLOCK, "blocks": 4}, {"reset": "next", "blocks": 3})
    assert out[: 4 * BLOCK].any() and not out[4 * BLOCK:].any()
    after = [m for m in messages if m["id"] == "next"]
    assert after and after[-1]["played"] == 0 and after[-1]["buffered"] == 0


# -- the page's reader of the framed stream (static/player/frames.js), against ui/http/frames.py's writer ---------
def parse_in_node(body: bytes, sizes: list[int]) -> dict:
    done = subprocess.run([NODE, str(ROOT / "tests" / "support" / "frames_harness.mjs"), str(ROOT / "static" / "player" / "frames.js"),
                           base64.b64encode(body).decode(), json.dumps(sizes), json.dumps(frames.spec())],
                          capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("sizes", [[1], [3, 7, 64], [100000]], ids=["byte by byte", "uneven", "at once"])
def test_frame_reader_reads_every_split(sizes):
    result = parse_in_node(sample_body(), sizes)
    assert result["error"] is None
    # The unknown-type frame is skipped, as the Python reader skips it.
    assert [f["kind"] for f in result["frames"]] == ["meta", "audio", "meta", "audio", "status"]
    assert result["frames"][0]["data"] == {"index": 0, "offset": 0} and result["frames"][-1]["data"]["text"] == "ünïcode"
    assert result["frames"][1]["pcm"] == list(range(-300, 300)) == result["frames"][3]["pcm"]


@pytest.mark.parametrize("cut", [1, HEADER.size - 1, HEADER.size + 3])
def test_frame_reader_refuses_a_truncated_body(cut):
    result = parse_in_node(sample_body()[:-cut], [5])
    assert result["error"].startswith("the stream ended inside a frame")


@pytest.mark.parametrize("body, problem", MALFORMED)
def test_frame_reader_refuses_malformed_frames_as_python_does(body, problem):
    result = parse_in_node(body, [4])
    with pytest.raises(FrameError, match=problem):
        read_frames(body)
    # The same refusal at the same byte; the page names frame types in words (M: meta, S: status).
    assert re.search(problem.replace("M frame", "meta frame").replace("S frame", "status frame"), result["error"])


# -- the page's counts read in the singular for one (static/player/panel.js counted) ---------------------------

def test_counts_on_the_page_agree_with_their_number():
    script = ("const { counted } = await import(process.argv[1]);"
              "console.log(JSON.stringify([counted(0, 'underrun'), counted(1, 'underrun'), counted(2, 'underrun'),"
              " counted(1, 'patch', 'patches'), counted(3, 'patch', 'patches')]));")
    module = (ROOT / "static" / "player" / "panel.js").as_uri()
    done = subprocess.run([NODE, "--input-type=module", "-e", script, module], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == ["0 underruns", "1 underrun", "2 underruns", "1 patch", "3 patches"]
    for path in ("static/player/panel.js", "static/workbench/listing.js", "static/workbench/workbench.js"):
        source = (ROOT / path).read_text(encoding="utf-8")
        assert not re.search(r"\$\{[^}]*\} (underruns|patches|takes|gaps|network reads)\b", source), path
