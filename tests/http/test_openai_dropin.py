"""A client written for OpenAI's speech API works by changing its base URL alone (issue 23): the
official `openai` client against the app on a real uvicorn, with OpenAI's model and voice names."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from inference import SynthesisRequest
from ui.services.audio import FORMATS
from ui.http.builtin_voices import BUILTIN_VOICES
from ui.library.uploads import decode_audio

from ..support.app_helpers import SAMPLE_RATE, assert_same_audio, expected_pcm

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TEXT = "Hello world, this is a test."
EXTRA = {"seed": 11, "max_len": 6}
# The body asks for the model's rate, so the audio compares sample for sample with synthesize()'s
# (pcm is otherwise sent at OpenAI's 24 kHz).
AT_MODEL_RATE = {**EXTRA, "sample_rate": SAMPLE_RATE}


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    return serve_app(data_dir=str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=app.url + "/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("model", ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "VoxCPM2"])
def test_openai_model_names_are_the_one_model(client, model):
    got = client.audio.speech.create(model=model, input=TEXT, voice="design", instructions="A calm, low voice",
                                     response_format="pcm", extra_body=AT_MODEL_RATE)
    want = expected_pcm(SynthesisRequest(TEXT, control="A calm, low voice", **EXTRA))
    assert_same_audio(np.frombuffer(got.content, "<i2"), want)


def test_models_lists_every_name(app):
    listed = httpx.get(app.url + "/v1/models").json()
    assert [m["id"] for m in listed["data"]] == ["voxcpm2", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]


@pytest.mark.parametrize("name", list(BUILTIN_VOICES))
def test_each_openai_voice_is_its_fixed_design(client, name):
    voice = BUILTIN_VOICES[name]
    got = client.audio.speech.create(model="tts-1", input=TEXT, voice=name, response_format="pcm",
                                     extra_body={"max_len": 6, "sample_rate": SAMPLE_RATE})
    assert got.response.headers["x-seed"] == str(voice.seed)
    want = expected_pcm(SynthesisRequest(TEXT, control=voice.description, seed=voice.seed, max_len=6))
    assert_same_audio(np.frombuffer(got.content, "<i2"), want)


def test_instructions_and_seed_still_apply_to_an_openai_voice(client):
    got = client.audio.speech.create(model="tts-1", input=TEXT, voice="Nova", instructions="Whispering",
                                     response_format="pcm", extra_body=AT_MODEL_RATE)
    control = BUILTIN_VOICES["nova"].description + "; Whispering"
    assert_same_audio(np.frombuffer(got.content, "<i2"), expected_pcm(SynthesisRequest(TEXT, control=control, **EXTRA)))


def test_a_saved_voice_of_an_openai_name_wins(app, client):
    with httpx.Client(base_url=app.url, timeout=120) as http:
        clip_id = http.post("/voxcpm/upload", content=VOICE.read_bytes()).json()["id"]
        assert http.post("/voxcpm/voices", json={"name": "Echo", "clip_id": clip_id}).status_code == 201
        listed = http.get("/v1/audio/voices").json()
        try:
            got = client.audio.speech.create(model="tts-1", input=TEXT, voice="echo", response_format="pcm",
                                             extra_body=AT_MODEL_RATE)
        finally:
            http.delete("/voxcpm/voices/Echo")
    assert listed["voices"].count("Echo") == 1 and "echo" not in listed["voices"]
    assert [v.get("builtin", False) for v in listed["data"] if v["name"] == "Echo"] == [False]
    clip = decode_audio(VOICE.read_bytes(), max_seconds=60)
    want = expected_pcm(SynthesisRequest(TEXT, reference_audio=clip, **EXTRA))
    assert_same_audio(np.frombuffer(got.content, "<i2"), want)


def duration(data: bytes, fmt: str, rate: int) -> float:
    if fmt == "pcm":
        return len(data) / 2 / rate
    info = sf.info(io.BytesIO(data))
    assert info.samplerate == rate
    return sf.read(io.BytesIO(data), dtype="float32")[0].shape[0] / rate


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("speed", [0.5, 1.5])
def test_speed_stretches_every_format_to_its_duration(client, fmt, speed):
    def seconds(at: float) -> float:
        got = client.audio.speech.create(model="tts-1", input=TEXT, voice="alloy", response_format=fmt, speed=at,
                                         extra_body={"max_len": 8})
        return duration(got.content, fmt, int(got.response.headers["x-sample-rate"]))
    alloy = BUILTIN_VOICES["alloy"]
    plain = expected_pcm(SynthesisRequest(TEXT, control=alloy.description, seed=alloy.seed, max_len=8)).size / SAMPLE_RATE
    padding = seconds(1.0) - plain  # what the format's decoder adds (MP3's encoder delay), 0 for PCM
    assert abs(padding) < 0.1
    assert seconds(speed) - padding == pytest.approx(plain / speed, rel=0.02)


def test_the_docs_stream_example_is_accepted_as_written(app):
    api = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    body = json.loads(re.search(r"curl -sN \S+/voxcpm/stream .*?-d '(\{.*?\})'", api, re.S).group(1))
    response = httpx.post(app.url + "/voxcpm/stream", json={**body, "max_len": 4}, timeout=120)
    assert response.status_code == 200 and response.headers["x-seed"] == str(body["seed"])
    assert len(response.content) > 0 and response.headers["content-type"].startswith("audio/pcm;rate=48000")
