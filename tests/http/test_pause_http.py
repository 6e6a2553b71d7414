"""Pause tags over HTTP: /voxcpm/stream (framed and bare, at speed 1 and 2) and /v1/audio/speech carry
the silence where the engine puts it, the frames mark it, the status shows it, the offline render
holds the same zeros at the same offsets, and a bad tag is a 400 that says what is accepted."""
from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import soundfile as sf

from inference import SynthesisRequest

from ..support.app_helpers import SAMPLE_RATE, assert_same_audio, pcm_of, reference_engine
from ..fixtures.frames import read_frames
from .test_pcm_route import app  # noqa: F401 - the same served app
from ui.http.frames import AUDIO, META, STATUS

TEXT = "Hello there. [pause 500ms] How are you? <break time='1s'/>"
BODY = {"text": TEXT, "control": "A calm voice", "seed": 8, "max_len": 4}
HALF, WHOLE = SAMPLE_RATE // 2, SAMPLE_RATE


def expected(req: SynthesisRequest) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The engine's own int16 samples of the request, and (first sample, samples) of each pause."""
    audio, runs, at = [], [], 0
    for chunk in reference_engine().stream(req):
        if chunk.pause and runs and runs[-1][0] + runs[-1][1] == at:
            runs[-1] = (runs[-1][0], runs[-1][1] + len(chunk.audio))
        elif chunk.pause:
            runs.append((at, len(chunk.audio)))
        audio.append(chunk.audio)
        at += len(chunk.audio)
    return np.clip(np.rint(np.concatenate(audio) * 32767.0), -32768, 32767).astype(np.int16), runs


@pytest.fixture(scope="module")
def want():
    pcm, runs = expected(SynthesisRequest(TEXT, control="A calm voice", seed=8, max_len=4))
    assert [n for _, n in runs] == [HALF, WHOLE] and runs[1][0] + WHOLE == pcm.size  # the trailing pause ends it
    return pcm, runs


def test_the_framed_stream_marks_the_silence_and_the_render_holds_it(client, want):
    pcm, runs = want
    response = client.post("/voxcpm/stream", json=BODY, params={"format": "frames"})
    assert response.status_code == 200, response.text
    got = read_frames(response.content)
    metas, audio = [v for k, v in got if k == META], [v for k, v in got if k == AUDIO]
    offsets = np.cumsum([0] + [a.size for a in audio[:-1]])
    assert [m["offset"] for m in metas] == list(offsets) and [m["samples"] for m in metas] == [a.size for a in audio]
    marked = [(m["offset"], m["samples"]) for m in metas if m["pause"]]
    assert marked[0][0] == runs[0][0] and sum(n for _, n in marked) == HALF + WHOLE
    assert all("latents" not in m for m in metas)
    # A pause belongs to the segment it follows: the status's segment_ends fall after it.
    assert {m["segment"] for m in metas if m["pause"] and m["offset"] < runs[1][0]} == {0}
    assert {m["segment"] for m in metas if m["pause"] and m["offset"] >= runs[1][0]} == {1}
    stream = np.concatenate(audio)
    assert_same_audio(stream, pcm)
    for start, n in runs:
        assert not stream[start:start + n].any(), "the pause is not exact silence"
    status = got[-1][1]
    assert got[-1][0] == STATUS and status["outcome"] == "ok"
    assert status["spoken_text"] == "Hello there. [pause 500ms] How are you? <break time='1s'/>"
    assert [(p["before"], p["ms"]) for p in status["pauses"]] == [(1, 500), (2, 1000)]
    assert status["samples"] == stream.size and status["patches"] == sum(not m["pause"] for m in metas)
    assert status["segment_ends"] == [runs[0][0] + HALF, stream.size]
    offline = client.get(f"/voxcpm/jobs/{response.headers['x-request-id']}/offline.wav")
    assert offline.status_code == 200
    rendered, rate = sf.read(io.BytesIO(offline.content), dtype="int16")
    assert rate == SAMPLE_RATE and rendered.shape == stream.shape
    assert np.max(np.abs(rendered.astype(np.int32) - stream)) <= 1
    for start, n in runs:
        assert not rendered[start:start + n].any()


def test_bare_pcm_and_the_openai_route_carry_the_same_silence(app, client, want):  # noqa: F811
    pcm, _ = want
    assert_same_audio(pcm_of(client.post("/voxcpm/stream", json=BODY).content), pcm)
    body = {"model": "tts-1", "voice": "design", "instructions": "A calm voice", "input": TEXT,
            "response_format": "pcm", "sample_rate": SAMPLE_RATE, "seed": 8, "max_len": 4}
    response = httpx.post(f"{app.url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert_same_audio(pcm_of(response.content), pcm)


def test_speed_stretches_the_speech_and_the_pauses_last_as_written(client, want):
    """At speed 2 each run of speech is half as long and each pause as long as its tag says, where
    it was: the page promises "50 ms to 10 s of silence" whatever the speed (issue 44, item 2)."""
    pcm, runs = want
    response = client.post("/voxcpm/stream", json={**BODY, "speed": 2.0}, params={"format": "frames"})
    assert response.status_code == 200, response.text
    got = read_frames(response.content)
    stream = np.concatenate([v for k, v in got if k == AUDIO])
    (first, half), (second, whole) = runs
    assert stream.size == round(first / 2) + half + round((second - first - half) / 2) + whole
    assert got[-1][1]["output_samples"] == stream.size and got[-1][1]["speed"] == 2.0
    start = round(first / 2)
    assert not stream[start:start + half].any() and not stream[-whole:].any(), "the pauses, whole"
    assert stream[start - 64:start].any() and stream[start + half:start + half + 64].any(), "speech around it"
    offline = client.get(f"/voxcpm/jobs/{response.headers['x-request-id']}/offline.wav")
    rendered, _ = sf.read(io.BytesIO(offline.content), dtype="int16")
    assert rendered.shape == stream.shape and np.max(np.abs(rendered.astype(np.int32) - stream)) <= 1, \
        "the render is heard as the stream was"


@pytest.mark.parametrize("text, words", [
    ("Hello [pause 20s] there.", "the pause tag '[pause 20s]' asks for 20 s: a pause is 50 ms to 10 s"),
    ("Hello <break time=5s/> there.", "the pause tag '<break time=5s/>' is not understood"),
    ("[pause 1s] [pause 2s]", "only pause tags"),
])
def test_a_bad_tag_is_a_400_on_both_routes(app, client, text, words):  # noqa: F811
    response = client.post("/voxcpm/stream", json={"text": text})
    assert response.status_code == 400 and words in response.json()["error"]
    response = httpx.post(f"{app.url}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": text},
                          timeout=60)
    assert response.status_code == 400 and words in response.json()["error"]["message"]


def test_pauses_past_the_output_bound_are_refused_up_front_on_both_routes(app, client):  # noqa: F811
    """Issue 37, item 2: 61 ten-second pauses are 610 s of silence, past the default bound of 600 s
    of audio a request may produce (--max-output-seconds), at any speed (a pause lasts as written)."""
    text = "Hi. " + "[pause 10s] Hi. " * 61
    response = client.post("/voxcpm/stream", json={"text": text, "control": "A calm voice", "max_len": 2, "speed": 2})
    assert response.status_code == 400
    assert "610.0 s of silence" in response.json()["error"] and "at most 600 s" in response.json()["error"]
    response = httpx.post(f"{app.url}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": text},
                          timeout=60)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "input" and "at most 600 s" in error["message"]
    status = client.get("/voxcpm/spec").json()["limits"]["max_output_seconds"]
    assert status == 600
