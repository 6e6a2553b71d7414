"""bench/lab/engine_apart.py, the engine in a process of its own behind a bare stream route (what a
split of the serving layer could give at best, measured by `bench.serve --apart`), and the same on a
thread of the front's process: each speaks what the engine in process speaks, frame by frame, tells
a request it could not start why, and frees the row of a client that leaves."""
from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from bench.http_load import FrameCounter
from bench.serve import ROOT, free_port, wait_ready
from inference import SynthesisRequest
from tests.support.app_helpers import reference_engine, tiny_checkpoint
from ui.services.audio import to_pcm


def serve(*extra: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.lab.engine_apart", "--checkpoint", tiny_checkpoint(),
                             "--device", "cpu", "--port", str(port), "--max-streams", "4", *extra], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout_s=120)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def apart():
    """The engine in a process of its own."""
    yield from serve()


@pytest.fixture(scope="module")
def on_a_thread():
    """The same engine loop on a thread of the front's process (--thread)."""
    yield from serve("--thread")


def frames_of(url: str, body: dict) -> list[tuple[str, bytes]]:
    counter, frames = FrameCounter(), []
    with httpx.stream("POST", f"{url}/voxcpm/stream?format=frames", json=body, timeout=120) as response:
        assert response.status_code == 200
        for data in response.iter_raw():
            frames += [(chr(kind), payload) for kind, payload in counter.feed(data)]
    return frames


@pytest.mark.parametrize("where", ["apart", "on_a_thread"])
def test_the_engine_apart_or_on_a_thread_streams_what_the_engine_in_process_makes(where, request):
    url = request.getfixturevalue(where)
    body = {"mode": "design", "text": "Hello from the other process.", "control": "calm", "seed": 11,
            "min_len": 3, "max_len": 3, "inference_timesteps": 2, "cfg_value": 2.0}
    frames = frames_of(url, body)
    assert [k for k, _ in frames] == ["M", "A"] * 3 + ["S"]
    audio = np.frombuffer(b"".join(p for k, p in frames if k == "A"), "<i2")
    metas = [json.loads(p) for k, p in frames if k == "M"]
    assert [m["offset"] for m in metas] == [0, metas[0]["samples"], 2 * metas[0]["samples"]]
    want = reference_engine().synthesize(SynthesisRequest(**{k: v for k, v in body.items() if k != "mode"}))
    np.testing.assert_array_equal(audio, np.frombuffer(to_pcm(want), "<i2"))  # the app's own rounding
    status = json.loads(frames[-1][1])
    assert status["state"] == "done" and status["ttfp_s"] > 0 and status["queue_s"] >= 0


def test_a_request_the_engine_refuses_gets_a_failed_status_with_why_and_the_next_one_is_spoken(apart):
    frames = frames_of(apart, {"text": "", "seed": 1})
    assert [k for k, _ in frames] == ["S"]
    status = json.loads(frames[0][1])
    assert status["state"] == "failed" and "text" in status["error"]
    after = frames_of(apart, {"text": "And now a real one.", "seed": 2, "min_len": 1, "max_len": 1,
                              "inference_timesteps": 2})
    assert [k for k, _ in after] == ["M", "A", "S"]


def test_clients_that_leave_free_their_rows_for_the_requests_waiting_in_line(apart):
    words = " ".join(["Every row is taken by a long text that nobody hears to the end."] * 6)
    long = {"text": words, "min_len": 480, "max_len": 480, "inference_timesteps": 2}
    for seed in range(4):  # every row of the four, each left after its first audio frame
        counter = FrameCounter()
        with httpx.stream("POST", f"{apart}/voxcpm/stream", json={**long, "seed": seed}, timeout=60) as response:
            for data in response.iter_raw():
                if any(kind == ord("A") for kind, _ in counter.feed(data)):
                    break
    after = frames_of(apart, {"text": "Still room.", "seed": 9, "min_len": 1, "max_len": 1, "inference_timesteps": 2})
    assert [k for k, _ in after] == ["M", "A", "S"], after[-1]
    # It waited for a row no longer than a cancel takes (a step), not for a long text to end.
    assert json.loads(after[-1][1])["queue_s"] < 1.0
