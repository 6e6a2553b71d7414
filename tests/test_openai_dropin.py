"""A client written for OpenAI's speech API works by changing its base URL alone (issue 23): the
official `openai` client against the app on a real uvicorn, with OpenAI's model and voice names."""
from __future__ import annotations

import httpx
import numpy as np
import openai
import pytest

from inference import SynthesisRequest
from ui import AppSettings

from .app_helpers import assert_same_audio, expected_pcm, serve

TEXT = "Hello world, this is a test."
EXTRA = {"seed": 11, "max_len": 6}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    running = serve(AppSettings(data_dir=str(tmp_path_factory.mktemp("data"))))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=app.url + "/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("model", ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "VoxCPM2"])
def test_openai_model_names_are_the_one_model(client, model):
    got = client.audio.speech.create(model=model, input=TEXT, voice="design", instructions="A calm, low voice",
                                     response_format="pcm", extra_body=EXTRA)
    want = expected_pcm(SynthesisRequest(TEXT, control="A calm, low voice", **EXTRA))
    assert_same_audio(np.frombuffer(got.content, "<i2"), want)


def test_models_lists_every_name(app):
    listed = httpx.get(app.url + "/v1/models").json()
    assert [m["id"] for m in listed["data"]] == ["voxcpm2", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
