"""The framed stream body (ui/http/frames.py): the reader against the writer, split anywhere; truncated
and malformed bodies refused with a message that says where; and the route over real HTTP, whose
frames carry the same samples as bare PCM, chunk metadata at the true offsets and a final status."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from inference import SynthesisRequest
from ui.http.frames import AUDIO, HEADER, MAX_PAYLOAD, MEDIA_TYPE, META, STATUS, FrameError, frame, json_frame

from ..support.app_helpers import assert_same_audio, expected_pcm, pcm_of
from ..fixtures.frames import FrameReader, read_frames
from .test_pcm_route import app  # noqa: F401 - the same served app

TEXT = "Hello world, this is a test."


def sample_body() -> bytes:
    pcm = np.arange(-300, 300, dtype="<i2").tobytes()
    return (json_frame(META, {"index": 0, "offset": 0}) + frame(AUDIO, pcm) + frame(b"X", b"later version")
            + json_frame(META, {"index": 1, "offset": 600}) + frame(AUDIO, pcm)
            + json_frame(STATUS, {"outcome": "ok", "text": "ünïcode"}))


def test_reader_gets_the_frames_back_from_any_split():
    body = sample_body()
    whole = read_frames(body)
    assert [k for k, _ in whole] == [META, AUDIO, META, AUDIO, STATUS]  # the unknown type is skipped
    assert whole[0][1] == {"index": 0, "offset": 0} and whole[-1][1]["text"] == "ünïcode"
    assert np.array_equal(whole[1][1], np.arange(-300, 300))
    rng = random.Random(0)
    for _ in range(50):
        reader, got, at = FrameReader(), [], 0
        while at < len(body):
            step = rng.choice([1, 3, 7, 64, 1000])
            got += reader.feed(body[at:at + step])
            at += step
        reader.close()
        assert [k for k, _ in got] == [k for k, _ in whole]
        assert all(np.array_equal(a, b) if k == AUDIO else a == b for (k, a), (_, b) in zip(got, whole))


@pytest.mark.parametrize("cut", [1, HEADER.size - 1, HEADER.size + 3])
def test_a_truncated_body_is_refused(cut):
    body = sample_body()
    with pytest.raises(FrameError, match="ended inside a frame"):
        read_frames(body[:-cut])


MALFORMED = [
    (b"A\x01\0\0" + b"\0\0\0\0", "bad frame header at byte 0"),  # reserved bytes not zero
    (HEADER.pack(b"A", b"\0\0\0", MAX_PAYLOAD + 1), "bad frame header"),  # oversized: refused from the header
    (frame(AUDIO, b"\x01\x02\x03"), "half a sample"),
    (frame(META, b"[1, 2]"), "M frame at byte 0 is not a JSON object"),
    (frame(META, b"\xff\xfe"), "not a JSON object"),
    (json_frame(META, {"a": 1}) + frame(STATUS, b"{"), f"S frame at byte {HEADER.size + 7} is not"),
]


@pytest.mark.parametrize("body, problem", MALFORMED)
def test_malformed_frames_are_refused_saying_where(body, problem):
    with pytest.raises(FrameError, match=problem):
        read_frames(body)


def test_the_writer_refuses_an_oversized_payload():
    with pytest.raises(FrameError, match="limit"):
        frame(AUDIO, bytes(MAX_PAYLOAD + 2))


def test_framed_route_carries_the_samples_boundaries_and_status(client):
    body = {"text": TEXT, "control": "A calm voice", "seed": 99, "min_len": 5, "max_len": 5}
    response = client.post("/voxcpm/stream", json=body, headers={"Accept": MEDIA_TYPE})
    assert response.status_code == 200 and response.headers["content-type"] == MEDIA_TYPE
    got = read_frames(response.content)
    metas = [v for k, v in got if k == META]
    audio = [v for k, v in got if k == AUDIO]
    assert [k for k, _ in got][-1] == STATUS and len(metas) == len(audio) == 5
    assert [m["index"] for m in metas] == list(range(5))
    assert [m["offset"] for m in metas] == list(np.cumsum([0] + [a.size for a in audio[:-1]]))
    assert all(m["samples"] == a.size == 7680 for m, a in zip(metas, audio))
    assert all(m["job"] == response.headers["x-request-id"] for m in metas)
    assert metas[0]["server_ms"] > 0 and np.all(np.diff([m["server_ms"] for m in metas]) >= 0)
    # Each frame leaves after its patch was handed over, and the request reached the line after
    # the handler began: the served-path benchmark splits a slow first audio by these.
    assert all(m["sent_ms"] >= m["server_ms"] for m in metas)
    status = got[-1][1]
    assert 0 < status["intake_s"] < 10
    assert status["outcome"] == "ok" and status["state"] == "done" and status["seed"] == 99
    assert status["patches"] == 5 and status["samples"] == 5 * 7680 and status["rtf"] > 0
    want = expected_pcm(SynthesisRequest(TEXT, control="A calm voice", seed=99, min_len=5, max_len=5))
    assert_same_audio(np.concatenate(audio), want)
    # The same request as bare PCM (a query flag, or no Accept at all) gives the same samples.
    for params, headers in (({"format": "pcm"}, {"Accept": MEDIA_TYPE}), ({}, {})):
        bare = client.post("/voxcpm/stream", json=body, params=params, headers=headers)
        assert bare.headers["content-type"].startswith("audio/pcm")
        assert np.array_equal(pcm_of(bare.content), np.concatenate(audio))
    flagged = client.post("/voxcpm/stream", json=body, params={"format": "frames"})
    assert flagged.headers["content-type"] == MEDIA_TYPE and len(read_frames(flagged.content)) == 11


def test_an_unknown_format_is_refused_before_anything_runs(client):
    response = client.post("/voxcpm/stream", json={"text": TEXT}, params={"format": "mp3"})
    assert response.status_code == 400
    assert response.json()["error"] == "format 'mp3' is unknown: use format=frames or format=pcm"


def test_errors_before_audio_stay_json_in_framed_mode(client):
    response = client.post("/voxcpm/stream", json={"text": TEXT, "cfg_value": 50.0}, params={"format": "frames"})
    assert response.status_code == 400 and "cfg_value" in json.loads(response.content)["error"]
