"""The transcriber's own rules (inference/serving/asr.py), with loaders that stand in for transformers:
one load per device however many callers arrive together, a failed load remembered for a while (a
hub that cannot be reached takes half a minute to say so), and the model never loaded on the
engine's thread. And the command line: --asr-model's default and `none`."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import app as demo_app
from inference.serving.asr import AsrUnavailable, NotLoaded, Transcriber


class Engine:
    device = "cpu"


class Pipe:
    class feature_extractor:  # noqa: N801 - shaped as transformers' pipeline is
        sampling_rate = 16000

    def __call__(self, inputs):
        return {"text": f" {len(inputs['raw'])} samples at {inputs['sampling_rate']} "}


def test_callers_arriving_together_load_the_model_once():
    loads = []

    def slow_load(name, device):
        loads.append((name, str(device)))
        time.sleep(0.2)
        return Pipe()
    asr = Transcriber("some/whisper", load=slow_load)
    threads = [threading.Thread(target=asr.load, args=("cpu",)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [("some/whisper", "cpu")]
    # 8 kHz in, resampled to the feature extractor's 16 kHz on the way.
    assert asr.on_engine(8000, np.zeros(8000, np.float32))(Engine()) == "16000 samples at 16000"


def test_a_call_before_the_load_says_which_device_needs_it_and_loads_nothing():
    asr = Transcriber("some/whisper", load=lambda name, device: pytest.fail("loaded on the engine's thread"))
    assert asr.on_engine(16000, np.zeros(160, np.float32))(Engine()) == NotLoaded("cpu")


def test_a_failed_load_is_remembered_for_a_while_then_tried_again():
    tries = []

    def offline(name, device):
        tries.append(name)
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")
    asr = Transcriber("openai/whisper-large-v3-turbo", load=offline, retry_after_s=60)
    for _ in range(3):
        with pytest.raises(AsrUnavailable, match="could not be loaded: OSError: We couldn't connect") as refused:
            asr.load("cpu")
    assert len(tries) == 1 and "--asr-model none" in str(refused.value)
    asr.retry_after_s = 0
    with pytest.raises(AsrUnavailable):
        asr.load("cpu")
    assert len(tries) == 2


def test_switched_off_it_refuses_without_loading():
    asr = Transcriber(None, load=lambda name, device: pytest.fail("loaded while switched off"))
    with pytest.raises(AsrUnavailable, match="switched off"):
        asr.load("cpu")


@pytest.mark.parametrize("argv, model", [([], "openai/whisper-large-v3-turbo"), (["--asr-model", "none"], None),
                                         (["--asr-model", "None"], None), (["--asr-model", "/w/tiny"], "/w/tiny")])
def test_the_command_line_chooses_the_model_or_none(argv, model):
    settings = demo_app.app_settings(demo_app.parse_args(argv), "127.0.0.1")
    assert settings.asr_model == model
