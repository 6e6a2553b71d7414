"""How the analysis process loads a model (inference/analysis/loading.py Slot), with loaders that
stand in for transformers: one load however many jobs ask together, a job waits for a load at most
its wait and then hears "still being loaded" while the load goes on, a failed load is remembered
for a while (a hub that cannot be reached takes half a minute to say so) and its reason says how
to fix it; switched off, nothing loads. And the command line: --asr-model's default and `none`."""
from __future__ import annotations

import threading
import time

import pytest

import app as demo_app
from inference.analysis import recognition
from inference.analysis.loading import ModelUnavailable, Slot


def slot(load, name="some/whisper", wait_s=5.0, retry_after_s=60.0) -> Slot:
    return Slot(recognition.KIND, name, "cpu", load, retry_after_s=retry_after_s, wait_s=wait_s)


def test_jobs_asking_together_load_the_model_once():
    loads = []

    def slow_load(name, device):
        loads.append((name, device))
        time.sleep(0.2)
        return "the model"
    models = slot(slow_load)
    got = []
    threads = [threading.Thread(target=lambda: got.append(models.get())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [("some/whisper", "cpu")] and got == ["the model"] * 4


def test_a_job_waits_for_a_load_at_most_its_wait_and_the_load_goes_on():
    release = threading.Event()
    models = slot(lambda name, device: release.wait(10) and "the model", wait_s=0.2)
    began = time.monotonic()
    with pytest.raises(ModelUnavailable, match="still being loaded") as refused:
        models.get()
    assert time.monotonic() - began < 2 and refused.value.loading and refused.value.option == "--asr-model"
    release.set()
    assert models.get() == "the model"


def test_a_failed_load_is_remembered_for_a_while_then_tried_again():
    tries = []

    def offline(name, device):
        tries.append(name)
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")
    models = slot(offline, name="openai/whisper-large-v3-turbo")
    for _ in range(3):
        with pytest.raises(ModelUnavailable, match="could not be loaded: OSError: We couldn't connect") as refused:
            models.get()
    assert len(tries) == 1 and "--asr-model none" in str(refused.value) and 0 < refused.value.retry_after_s <= 60
    models.retry_after_s = 0
    with pytest.raises(ModelUnavailable):
        models.get()
    assert len(tries) == 2


def test_switched_off_it_refuses_without_loading():
    models = slot(lambda name, device: pytest.fail("loaded while switched off"), name=None)
    with pytest.raises(ModelUnavailable, match="switched off") as refused:
        models.get()
    assert refused.value.retry_after_s is None, "trying again will not help"


@pytest.mark.parametrize("argv, model", [([], "openai/whisper-large-v3-turbo"), (["--asr-model", "none"], None),
                                         (["--asr-model", "None"], None), (["--asr-model", "/w/tiny"], "/w/tiny")])
def test_the_command_line_chooses_the_model_or_none(argv, model):
    settings = demo_app.app_settings(demo_app.parse_args(argv), "127.0.0.1")
    assert settings.analysis.recognizer == model
