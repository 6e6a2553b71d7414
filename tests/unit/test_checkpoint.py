"""Checkpoint lookup and weight loading: local folders, the hub cache offline, strict key checks."""
import json
import socket
import time

import pytest
import torch
from safetensors.torch import save_file

from inference.model.checkpoint import (check_keys, fold_weight_norm, load_model_weights, load_vae_weights,
                                  resolve_checkpoint)
from inference.errors import CheckpointError
from inference.model.tiny_checkpoint import write_tiny_checkpoint


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Offline for real: the hub flag is read at import, so patch it too, and make any connect fail."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise OSError("network use in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def make_folder(path, files=("config.json",)):
    path.mkdir(parents=True, exist_ok=True)
    for name in files:
        (path / name).write_text(json.dumps({"architecture": "voxcpm2"}))
    return path


def test_local_folder_is_used_as_is(tmp_path):
    folder = make_folder(tmp_path / "VoxCPM2")
    assert resolve_checkpoint(folder) == folder.resolve()
    assert resolve_checkpoint(str(folder)) == folder.resolve()


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="has no config.json"):
        resolve_checkpoint(make_folder(tmp_path / "ckpt", files=("model.safetensors",)))


def test_file_instead_of_folder(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"is a file.*--model /path/to/VoxCPM2"):
        resolve_checkpoint(tmp_path / "model.safetensors")


def test_missing_local_path_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(CheckpointError, match=r"folder .*nowhere/VoxCPM2 does not exist"):
        resolve_checkpoint(str(tmp_path / "nowhere" / "VoxCPM2"))


def test_unknown_hub_id_fails_fast_with_the_hints(tmp_path):
    start = time.monotonic()
    with pytest.raises(CheckpointError) as info:
        resolve_checkpoint("nobody-here/NoSuchVoice", cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert time.monotonic() - start < 10
    assert "'nobody-here/NoSuchVoice'" in message
    assert "there is no folder" in message and "hub cache" in message and "offline mode" in message
    assert "--model /path/to/VoxCPM2" in message and "Engine.from_pretrained(" in message


def fake_hub_cache(cache, repo_id, files):
    """The hub cache layout: a ref naming a commit, and a snapshot folder for that commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return make_folder(repo / "snapshots" / commit, files)


def test_hub_id_found_in_the_cache_offline(tmp_path):
    snapshot = fake_hub_cache(tmp_path / "cache", "openbmb/VoxCPM2", ("config.json", "model.safetensors"))
    found = resolve_checkpoint("openbmb/VoxCPM2", cache_dir=tmp_path / "cache", local_files_only=True)
    assert found == snapshot


def test_missing_weight_files_are_named(tmp_path):
    folder = make_folder(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="looked for model.safetensors and pytorch_model.bin"):
        load_model_weights(folder)
    with pytest.raises(CheckpointError, match="looked for audiovae.safetensors and audiovae.pth"):
        load_vae_weights(folder)


def test_corrupt_weights_are_refused(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot read the model weights"):
        load_model_weights(tmp_path)


def test_safetensors_preferred_over_bin(tmp_path):
    save_file({"a": torch.ones(2)}, str(tmp_path / "model.safetensors"))
    torch.save({"a": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    assert torch.equal(load_model_weights(tmp_path)["a"], torch.ones(2))
    (tmp_path / "model.safetensors").unlink()
    assert torch.equal(load_model_weights(tmp_path)["a"], torch.zeros(2))


@pytest.mark.parametrize("wrapped", [True, False])
def test_bin_and_pth_with_or_without_state_dict_wrapper(tmp_path, wrapped):
    state = {"layer.weight": torch.randn(3, 2), "layer.bias": torch.randn(3)}
    payload = {"state_dict": state, "epoch": 3} if wrapped else state
    torch.save(payload, tmp_path / "pytorch_model.bin")
    torch.save(payload, tmp_path / "audiovae.pth")
    for loaded in (load_model_weights(tmp_path), load_vae_weights(tmp_path)):
        assert loaded.keys() == state.keys()
        assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_vae_safetensors_preferred_over_pth(tmp_path):
    save_file({"x": torch.ones(1)}, str(tmp_path / "audiovae.safetensors"))
    torch.save({"state_dict": {"x": torch.zeros(1)}}, tmp_path / "audiovae.pth")
    assert torch.equal(load_vae_weights(tmp_path)["x"], torch.ones(1))


def weight_normed_convs():
    torch.manual_seed(0)
    norm = torch.nn.utils.weight_norm  # the old-style hook the official VAE uses
    return torch.nn.ModuleDict({
        "conv": norm(torch.nn.Conv1d(6, 8, 7)),
        "up": norm(torch.nn.ConvTranspose1d(8, 4, 4, stride=2)),
        "depthwise": norm(torch.nn.Conv1d(8, 8, 7, groups=8)),
    })


def test_weight_norm_folding_equals_torch(tmp_path):
    convs = weight_normed_convs()
    with torch.no_grad():  # scale g so that the fold is not the identity of a fresh init
        for m in convs.values():
            m.weight_g.mul_(torch.rand_like(m.weight_g) + 0.5)
    state = convs.state_dict()
    assert "conv.weight_g" in state and "conv.weight" not in state
    torch.save({"state_dict": state}, tmp_path / "audiovae.pth")
    folded = load_vae_weights(tmp_path)
    assert not any(k.endswith(("weight_g", "weight_v")) for k in folded)
    for name, module in convs.items():
        module(torch.randn(1, module.in_channels, 16))  # the hook recomputes .weight on each call
        assert torch.equal(folded[f"{name}.weight"], module.weight), name
        assert torch.equal(folded[f"{name}.bias"], module.bias)


def test_weight_norm_folds_in_float32_from_bf16():
    conv = weight_normed_convs()["conv"]
    state = {k: v.to(torch.bfloat16) for k, v in conv.state_dict().items()}
    folded = fold_weight_norm(state)
    expected = torch._weight_norm(state["weight_v"].float(), state["weight_g"].float(), 0)
    assert folded["weight"].dtype == torch.float32 and torch.equal(folded["weight"], expected)


def test_parametrization_style_weight_norm_is_folded():
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(3, 5, 3))
    folded = fold_weight_norm(conv.state_dict())
    assert set(folded) == {"weight", "bias"}
    assert torch.equal(folded["weight"], conv.weight)


def test_weight_norm_half_pair_is_refused():
    with pytest.raises(CheckpointError, match="dec.weight_g has no direction dec.weight_v"):
        fold_weight_norm({"dec.weight_g": torch.ones(2, 1, 1)})
    with pytest.raises(CheckpointError, match="without a magnitude: dec.weight_v"):
        fold_weight_norm({"dec.weight_v": torch.ones(2, 1, 1)})


def test_check_keys_accepts_an_exact_match():
    check_keys({"a": torch.Size([2])}, {"a": torch.zeros(2)}, "model weights")


def test_check_keys_names_a_renamed_key():
    expected = {"base_lm.norm.weight": torch.Size([4]), "stop_head.weight": torch.Size([2, 4])}
    found = {"base_lm.norm.weight": torch.zeros(4), "stop_head_renamed.weight": torch.zeros(2, 4)}
    with pytest.raises(CheckpointError) as info:
        check_keys(expected, found, "model weights")
    message = str(info.value)
    assert "model weights do not match" in message
    assert "1 missing keys: stop_head.weight" in message
    assert "1 unexpected keys: stop_head_renamed.weight" in message


def test_check_keys_names_shape_mismatches_and_counts_the_rest():
    expected = {f"k{i}": torch.Size([i + 1]) for i in range(9)}
    expected["w"] = torch.Size([3, 4])
    found = {"w": torch.zeros(4, 3)}
    with pytest.raises(CheckpointError) as info:
        check_keys(expected, found, "AudioVAE weights")
    message = str(info.value)
    assert "1 shape mismatches: w (checkpoint [4, 3], model [3, 4])" in message
    assert "9 missing keys: k0, k1, k2, k3, k4 and 4 more" in message


def _rename_in_file(path, old: str, new: str):
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file, save_file

        state = load_file(str(path))
        state[new] = state.pop(old)
        save_file(state, str(path))
    else:
        blob = torch.load(str(path), weights_only=True)
        state = blob["state_dict"] if "state_dict" in blob else blob
        state[new] = state.pop(old)
        torch.save(blob, str(path))


@pytest.mark.parametrize("file, old, new", [
    ("model.safetensors", "base_lm.layers.0.mlp.down_proj.weight", "base_lm.layers.0.mlp.down.weight"),
    ("audiovae.pth", "encoder.block.0.bias", "encoder.block.0.bias_renamed"),
    ("audiovae.pth", "decoder.model.0.weight_g", "decoder.model.0.weight_magnitude"),
], ids=["model key", "VAE key", "VAE weight-norm magnitude"])
def test_a_checkpoint_on_disk_with_a_renamed_key_fails_naming_it(tmp_path, file, old, new):
    from inference import Engine

    folder = write_tiny_checkpoint(tmp_path / "ckpt")
    _rename_in_file(folder / file, old, new)
    with pytest.raises(CheckpointError) as info:
        Engine.from_pretrained(str(folder), device="cpu", warmup=False)
    message = str(info.value)
    assert new in message and str(folder) in message
    assert old in message or old.replace("weight_g", "weight_v") in message


def test_a_config_without_a_field_names_the_file_and_field(tmp_path):
    from inference import Engine

    folder = write_tiny_checkpoint(tmp_path / "ckpt")
    raw = json.loads((folder / "config.json").read_text())
    del raw["lm_config"]
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"config\.json.*lacks the field 'lm_config'") as info:
        Engine.from_pretrained(str(folder), device="cpu", warmup=False)
    assert str(folder) in str(info.value)
