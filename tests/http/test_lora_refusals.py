"""--lora refused with a message that says what was expected: a missing folder, no LoRA files, no
config, keys that match no layer of the model (named), a rank or shape that does not fit."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import startup
from inference.model.loader import load_checkpoint
from inference.model.lora import LoRAError, lora_label, read_lora

from ..support.app_helpers import free_port
from ..unit.test_checkpoint import fake_hub_cache
from .test_startup_failures import assert_short_error, run_app

CKPT = Path(__file__).resolve().parents[1] / "golden" / "ckpt"
Q = "base_lm.layers.0.self_attn.q_proj"  # [64, 64] in the tiny model
CONFIG = {"base_model": "openbmb/VoxCPM2", "lora_config": {"enable_lm": True, "enable_dit": True,
                                                           "enable_proj": False, "r": 4, "alpha": 8}}


def pair(layer: str = Q, r: int = 4, out: int = 64, inp: int = 64) -> dict[str, torch.Tensor]:
    return {f"{layer}.lora_A": torch.randn(r, inp), f"{layer}.lora_B": torch.randn(out, r)}


def write_lora(folder: Path, state: dict | None = None, config: dict | None = CONFIG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(pair() if state is None else state, str(folder / "lora_weights.safetensors"))
    if config is not None:
        (folder / "lora_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def merge_error(folder: Path) -> str:
    """What loading the tiny checkpoint with this LoRA says."""
    with pytest.raises(LoRAError) as info:
        load_checkpoint(str(CKPT), device="cpu", dtype="float32", lora=str(folder))
    assert str(CKPT) not in str(info.value)  # the LoRA is what to fix, not the checkpoint
    return str(info.value)


def test_a_fitting_lora_loads(tmp_path):
    lora = read_lora(write_lora(tmp_path / "ok"))
    assert list(lora.pairs) == [Q] and lora.scale == 2.0 and lora.base_model == "openbmb/VoxCPM2"
    assert load_checkpoint(str(CKPT), device="cpu", dtype="float32", lora=str(tmp_path / "ok")) is not None


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(LoRAError, match=r"the LoRA folder .*nowhere/step_1 does not exist: pass the folder the "
                                        r"official VoxCPM training saved"):
        read_lora(tmp_path / "nowhere" / "step_1")
    write_lora(tmp_path / "run")
    with pytest.raises(LoRAError, match="is a file; --lora takes the folder holding it"):
        read_lora(tmp_path / "run" / "lora_weights.safetensors")


def test_a_folder_without_lora_weights_says_what_was_looked_for(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoRAError, match=r"holds no LoRA weights: looked for lora_weights.safetensors and "
                                        r"lora_weights.ckpt \(it is empty\)"):
        read_lora(tmp_path / "empty")
    full = tmp_path / "full"
    full.mkdir()
    (full / "model.safetensors").write_bytes(b"")
    with pytest.raises(LoRAError, match="a full fine-tune is a checkpoint of its own, to pass as --model"):
        read_lora(full)
    write_lora(tmp_path / "save_path" / "step_0000500")
    (tmp_path / "save_path" / "latest").mkdir()
    with pytest.raises(LoRAError, match=r"it holds the training's checkpoint folders: pass one of them, such as "
                                        r".*save_path/step_0000500\)"):
        read_lora(tmp_path / "save_path")


@pytest.mark.parametrize("config, phrase", [
    (None, "has lora_weights.safetensors but no lora_config.json, which gives the LoRA's rank r and alpha"),
    ({"r": 4, "alpha": 8}, 'has no "lora_config" object: the official training writes {"base_model"'),
    ({"lora_config": {"r": 0}}, "r is 0; the rank must be a whole number, 1 or more"),
    ({"lora_config": {"alpha": "big"}}, "alpha is 'big'; it must be a number above 0"),
    ({"lora_config": {"enable_lm": "yes"}}, "enable_lm is 'yes'; it must be true or false"),
    ({"lora_config": {"enable_lm": True, "target_modules_lm": "q_proj"}}, "target_modules_lm is 'q_proj'; it must "
                                                                          "be a list of layer names"),
])
def test_a_missing_or_wrong_config_is_named(tmp_path, config, phrase):
    with pytest.raises(LoRAError) as info:
        read_lora(write_lora(tmp_path / "run", config=config))
    assert phrase in str(info.value)


def test_unreadable_files(tmp_path):
    folder = write_lora(tmp_path / "run")
    (folder / "lora_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(LoRAError, match="cannot read .*lora_config.json"):
        read_lora(folder)
    folder = write_lora(tmp_path / "run2")
    (folder / "lora_weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(LoRAError, match="cannot read the LoRA weights in .*lora_weights.safetensors"):
        read_lora(folder)


def test_keys_that_are_not_lora_matrices_or_lack_their_half(tmp_path):
    with pytest.raises(LoRAError, match=rf"keys that are not LoRA matrices .*: {Q}.weight"):
        read_lora(write_lora(tmp_path / "stray", {**pair(), f"{Q}.weight": torch.zeros(64, 64)}))
    with pytest.raises(LoRAError, match=rf"incomplete: {Q}.lora_A without {Q}.lora_B"):
        read_lora(write_lora(tmp_path / "lone", {f"{Q}.lora_A": torch.zeros(4, 64)}))
    compiled = read_lora(write_lora(tmp_path / "compiled", pair("base_lm._orig_mod.layers.0.self_attn.q_proj")))
    assert list(compiled.pairs) == [Q]  # saved from a torch.compile'd model: the same layer


def test_keys_that_match_no_layer_are_named(tmp_path):
    state = {**pair(), **pair("base_lm.layers.7.self_attn.q_proj"), **pair("speaker_proj")}
    message = merge_error(write_lora(tmp_path / "run", state))
    assert "layers of the LoRA" in message and "that match no linear layer of the model" in message
    assert "base_lm.layers.7.self_attn.q_proj, speaker_proj" in message and "named like base_lm.layers.0" in message


def test_layers_the_config_does_not_adapt_are_refused(tmp_path):
    message = merge_error(write_lora(tmp_path / "run", {**pair(), **pair("enc_to_lm_proj", inp=32)}))
    assert "does not adapt enc_to_lm_proj" in message and "the official package would leave them out" in message


def test_a_rank_other_than_the_configs(tmp_path):
    message = merge_error(write_lora(tmp_path / "run", pair(r=8)))
    assert f"{Q}: lora_A is [8, 64] and lora_B [64, 8], but lora_config.json says r = 4" in message
    assert "expected lora_A [4, in features] and lora_B [out features, 4]" in message


def test_a_lora_of_another_model_is_refused_naming_its_base(tmp_path):
    message = merge_error(write_lora(tmp_path / "run", pair(out=2048, inp=2048)))
    assert f"{Q}: the LoRA's update is [2048, 2048] but the layer's weight is [64, 64]" in message
    assert "trained on another model (lora_config.json names 'openbmb/VoxCPM2' as its base)" in message


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise OSError("network use in a test")
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_a_hub_id_is_read_from_the_hub_cache(tmp_path, offline):
    snapshot = fake_hub_cache(tmp_path / "cache", "someone/voxcpm2-lora", ())
    write_lora(snapshot)
    lora = read_lora("someone/voxcpm2-lora", cache_dir=tmp_path / "cache", local_files_only=True)
    assert lora.folder == snapshot.resolve() and list(lora.pairs) == [Q]
    assert lora_label("someone/voxcpm2-lora") == "someone/voxcpm2-lora"
    with pytest.raises(LoRAError, match=r"cannot find the LoRA 'nobody/none': there is no folder .* and getting it "
                                        r"from the Hugging Face hub failed"):
        read_lora("nobody/none", cache_dir=tmp_path / "cache")


def test_a_folder_is_labelled_without_the_servers_path(tmp_path):
    assert lora_label(write_lora(tmp_path / "finetune_lora" / "step_0000500")) == "finetune_lora/step_0000500"


def test_startup_checks_the_folder_before_anything_loads(tmp_path):
    startup.check_lora(None)
    startup.check_lora(str(write_lora(tmp_path / "ok")))
    startup.check_lora("someone/voxcpm2-lora")  # a hub id is fetched with the model
    with pytest.raises(startup.StartupError) as info:
        startup.check_lora(str(write_lora(tmp_path / "no_config", config=None)))
    first, fix = str(info.value).split("\n")
    assert "no lora_config.json" in first and fix.startswith("To fix: pass --lora the folder of an official")
    said = str(startup.load_failure(LoRAError("x: the LoRA's update is [1, 1]")))
    assert said.startswith("cannot load the LoRA: x: the LoRA's update") and "leave --lora out" in said


def test_app_refuses_a_missing_lora_folder_at_once(tmp_path):
    code, said, stderr = run_app("--random-weights", "--lora", str(tmp_path / "step_1"), "--port", str(free_port()))
    assert_short_error(code, said, stderr, f"the LoRA folder {tmp_path / 'step_1'} does not exist",
                       "To fix: pass --lora the folder of an official")
    assert "loading" not in stderr


def test_app_names_the_layers_of_a_lora_that_does_not_fit(tmp_path):
    folder = write_lora(tmp_path / "step_2", pair("base_lm.layers.9.mlp.up_proj"))
    code, said, stderr = run_app("--random-weights", "--lora", str(folder), "--port", str(free_port()))
    assert_short_error(code, said, stderr, "cannot load the LoRA: layers of the LoRA",
                       "base_lm.layers.9.mlp.up_proj", "leave --lora out")
