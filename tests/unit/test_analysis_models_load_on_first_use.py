"""How the analysis process loads a model (inference/analysis/loading.py Slot), with loaders that
stand in for transformers: one load however many jobs ask together, a job waits for a load at most
its wait and then hears that it is being loaded while the load goes on, a failed load is remembered
for a while (a hub that cannot be reached takes half a minute to say so) and its reason says how
to fix it; switched off, nothing loads. And the command line: --asr-model's default and `none`."""
from __future__ import annotations

import threading
import time

import pytest

import app as demo_app
from inference.analysis import loading, recognition
from inference.analysis.loading import ModelUnavailable, Slot


def slot(load, name="some/whisper", wait_s=5.0, retry_after_s=60.0) -> Slot:
    return Slot(recognition.KIND, name, "cpu", load, retry_after_s=retry_after_s, wait_s=wait_s)


def loaded(models: Slot, within_s: float = 10.0):
    """The model once its load is done (a job asking meanwhile hears that it is being loaded)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return models.get()
        except ModelUnavailable as exc:
            if exc.state != "loading" or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_jobs_asking_together_load_the_model_once():
    loads = []

    def slow_load(name, device):
        loads.append((name, device))
        time.sleep(0.2)
        return "the model"
    models = slot(slow_load)
    got = []
    threads = [threading.Thread(target=lambda: got.append(loaded(models))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [("some/whisper", "cpu")] and got == ["the model"] * 4


def test_a_job_waits_for_a_load_at_most_its_wait_and_the_load_goes_on():
    release = threading.Event()
    models = slot(lambda name, device: release.wait(10) and "the model", wait_s=0.2)
    began = time.monotonic()
    with pytest.raises(ModelUnavailable, match="is being loaded") as refused:
        models.get()
    assert time.monotonic() - began < 2 and refused.value.loading and refused.value.option == "--asr-model"
    release.set()
    assert loaded(models) == "the model"


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


# Issue 59: the three states a model can be in, each said as it is.

def test_a_load_that_dies_of_any_exception_is_a_failure_not_a_load_forever():
    def dies(name, device):
        raise SystemExit("the loader gave up")
    models = slot(dies, wait_s=5.0)
    for _ in range(2):
        began = time.monotonic()
        with pytest.raises(ModelUnavailable, match="could not be loaded") as refused:
            models.get()
        assert refused.value.state == "failed" and time.monotonic() - began < 1
    assert "SystemExit: the loader gave up" in str(refused.value)


def test_a_failed_model_is_answered_at_once_while_it_is_tried_again_in_the_background():
    tries = []

    def slow_to_fail(name, device):
        tries.append(time.monotonic())
        loading.report("checking")
        time.sleep(0.0 if len(tries) == 1 else 2.0)  # the second try waits on a hub that never answers
        raise OSError("the hub did not answer")
    models = slot(slow_to_fail, wait_s=5.0, retry_after_s=0.3)
    with pytest.raises(ModelUnavailable, match="could not be loaded"):
        models.get()
    time.sleep(0.4)
    for _ in range(3):
        began = time.monotonic()
        with pytest.raises(ModelUnavailable, match="could not be loaded") as refused:
            models.get()
        assert time.monotonic() - began < 0.5 and refused.value.state == "failed"
    assert len(tries) == 2, "tried again once the window passed, without keeping anyone waiting"


def test_a_local_folder_being_read_says_so_without_any_download(tmp_path):
    release = threading.Event()

    def reads(name, device):
        loading.report("reading")
        release.wait(10)
        return "the model"
    models = slot(reads, name=str(tmp_path), wait_s=0.1)
    with pytest.raises(ModelUnavailable) as refused:
        models.get()
    message = str(refused.value)
    assert refused.value.state == "loading" and "being loaded from its folder" in message
    assert "download" not in message and refused.value.retry_after_s <= 5
    release.set()
    assert loaded(models) == "the model"


def test_a_download_says_how_far_it_has_got(tmp_path):
    release = threading.Event()
    blobs = tmp_path / "blobs"

    def downloads(name, device):
        loading.report("downloading", folder=tmp_path, total_bytes=10_000_000)
        blobs.mkdir()
        (blobs / "weights.incomplete").write_bytes(b"\0" * 4_000_000)
        release.wait(10)
        return "the model"
    models = slot(downloads, wait_s=0.3)
    with pytest.raises(ModelUnavailable) as refused:
        models.get()
    assert refused.value.state == "loading"
    assert "downloaded from the Hugging Face hub: 4 of 10 MB (40%)" in str(refused.value)
    assert 1 <= refused.value.retry_after_s <= 60
    release.set()


def test_a_load_that_fails_after_it_started_says_loading_then_why_at_once():
    go_on = threading.Event()

    def fails_late(name, device):
        loading.report("reading")
        go_on.wait(10)
        raise ValueError("the weights file is cut short")
    models = slot(fails_late, wait_s=0.1)
    with pytest.raises(ModelUnavailable, match="being loaded") as refused:
        models.get()
    assert refused.value.state == "loading"
    go_on.set()
    time.sleep(0.2)
    began = time.monotonic()
    with pytest.raises(ModelUnavailable, match="ValueError: the weights file is cut short") as refused:
        models.get()
    assert refused.value.state == "failed" and time.monotonic() - began < 1


def test_the_hub_probe_gives_up_at_its_deadline_even_when_the_hub_never_answers(monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import LocalEntryNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(loading, "HUB_PROBE_S", 0.3)
    # A name lookup that hangs: a request's own timeout does not cover it.
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *a, **k: time.sleep(20))
    began = time.monotonic()
    with pytest.raises(LocalEntryNotFoundError, match="did not answer"):
        loading.check_hub("nobody/not-in-any-cache")
    assert time.monotonic() - began < 2


def test_a_folder_that_is_no_whisper_checkpoint_says_what_it_holds_and_what_to_pass(tmp_path):
    from inference.model.tiny_checkpoint import write_tiny_checkpoint

    folder = write_tiny_checkpoint(tmp_path / "voxcpm")
    models = slot(recognition.load_recognizer, name=str(folder))
    with pytest.raises(ModelUnavailable) as refused:
        models.get()
    message = str(refused.value)
    assert refused.value.state == "failed" and "not a Whisper checkpoint" in message
    assert "--asr-model /path/to/folder" in message


def test_a_whisper_folder_missing_files_names_them(tmp_path):
    from tests.fixtures.tiny_whisper import write_tiny_whisper

    folder = write_tiny_whisper(tmp_path / "whisper")
    (folder / "model.safetensors").unlink()
    (folder / "processor_config.json").unlink()
    models = slot(recognition.load_recognizer, name=str(folder))
    with pytest.raises(ModelUnavailable) as refused:
        models.get()
    assert "missing" in str(refused.value) and "model.safetensors" in str(refused.value)
    assert "preprocessor_config.json" in str(refused.value)
