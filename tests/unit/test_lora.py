"""--lora (inference/model/lora.py): LoRA weights in the official fine-tuning's format, merged into
the base weights at load.

Parity: a random LoRA of the tiny golden checkpoint, saved as the official training saves one (the
official model's own LoRA parameters, get_lora_state_dict, and lora_config.json), is loaded by the
official package through its own load_lora_weights, and merged by ours; fed the same CFM noise in
float32, both make the same patches within the golden tolerance.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bench.official import import_official, load_official_model, run_official
from inference import Engine, SynthesisRequest
from inference.model.loader import load_checkpoint

from ..golden.make_golden import MIN_FSQ_MARGIN, PROMPT_TEXT, margins
from .test_golden_parity import TOLERANCE, rel_err

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CKPT = GOLDEN / "ckpt"
CLIP = GOLDEN / "clip_16k_mono.wav"
EVERY_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Every group the official LoRAConfig can adapt, the MLPs too (ours fuses q/k/v and gate/up after
# the merge), and alpha / r = 2, so that a scale left out shows.
SETTINGS = dict(enable_lm=True, enable_dit=True, enable_proj=True, r=4, alpha=8, target_modules_lm=EVERY_LINEAR)
CASES = {
    "design": dict(text="Hello, this is a test.", control="A warm voice", min_len=6, max_len=6, noise_seed=21),
    "ultimate": dict(text="We speak slowly today.", prompt_wav=CLIP, prompt_text=PROMPT_TEXT, reference_wav=CLIP,
                     min_len=5, max_len=5, noise_seed=22),
}


def official_lora_config(**changes):
    import_official()  # the official modules, with stand-ins for what synthesis never uses
    return importlib.import_module("voxcpm.model.voxcpm2").LoRAConfig(**{**SETTINGS, **changes})


def save_official_lora(folder: Path, *, random: bool = True, seed: int = 5, ckpt_file: bool = False,
                       **changes) -> Path:
    """A LoRA of the tiny model as the official training saves it: the official model's LoRA
    parameters in lora_weights.safetensors (or .ckpt) and {"base_model", "lora_config"} beside them.
    Without `random` the parameters stay as the official model starts them: B = 0."""
    config = official_lora_config(**changes)
    model = load_official_model(CKPT, "float32", lora_config=config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if random and "lora_" in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    state = model.get_lora_state_dict()
    folder.mkdir(parents=True, exist_ok=True)
    if ckpt_file:
        torch.save({"state_dict": state}, folder / "lora_weights.ckpt")
    else:
        save_file(state, str(folder / "lora_weights.safetensors"))
    info = {"base_model": str(CKPT), "lora_config": config.model_dump()}
    (folder / "lora_config.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def lora_dir(tmp_path_factory) -> Path:
    return save_official_lora(tmp_path_factory.mktemp("lora") / "step_0000100")


@pytest.fixture(scope="module")
def official(lora_dir):
    model = load_official_model(CKPT, "float32", lora_config=official_lora_config())
    loaded, skipped = model.load_lora_weights(str(lora_dir))
    assert skipped == [] and len(loaded) == len(load_file(str(lora_dir / "lora_weights.safetensors")))
    return model


@pytest.fixture(scope="module")
def engines(lora_dir):
    def engine(lora):
        return Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=1, lora=lora)
    return engine(str(lora_dir)), engine(None)


def _ours(engine: Engine, request: SynthesisRequest) -> tuple[np.ndarray, np.ndarray]:
    chunks = list(engine.stream(request))
    latents = np.stack([np.asarray(c.latents, dtype=np.float32) for c in chunks])
    return latents, np.concatenate([np.asarray(c.audio, dtype=np.float32).reshape(-1) for c in chunks])


@pytest.mark.parametrize("name", CASES)
def test_merged_lora_equals_the_official_package_with_it(official, engines, name):
    case = dict(CASES[name])
    noise = torch.randn(case["max_len"], 64, 4, generator=torch.Generator().manual_seed(case.pop("noise_seed")))
    record = {"stop": [], "fsq": 1.0}
    with margins(official, record):
        want_latents, want_wav, n = run_official(official, noise=noise.numpy(), **case)
    # Else a rounding at 1e-7 could flip an FSQ level and the comparison would say nothing.
    assert record["fsq"] > MIN_FSQ_MARGIN, f"an FSQ value lies on a rounding boundary: change {name}'s noise seed"
    request = SynthesisRequest(text=case["text"], control=case.get("control"), prompt_text=case.get("prompt_text"),
                               prompt_audio=case.get("prompt_wav") and str(case["prompt_wav"]),
                               reference_audio=case.get("reference_wav") and str(case["reference_wav"]),
                               min_len=case["min_len"], max_len=case["max_len"], seed=None, noise=noise.numpy())
    with_lora, without = engines
    latents, wav = _ours(with_lora, request)
    assert latents.shape == want_latents.shape and wav.shape == want_wav.shape, f"{len(latents)} patches, official {n}"
    errors = rel_err(latents, want_latents), rel_err(wav, want_wav)
    message = f"{name}: {n} patches, latent rel err {errors[0]:.2e}, waveform rel err {errors[1]:.2e}"
    print(message)
    assert max(errors) < TOLERANCE, message
    # The LoRA matters: without it the same noise gives other latents.
    assert rel_err(_ours(without, request)[0], want_latents) > 100 * TOLERANCE


def _weights(lora: str | None, dtype: str = "float32") -> dict[str, torch.Tensor]:
    """Every weight as the engine runs it: the fused q/k/v and gate/up matrices are buffers."""
    model = load_checkpoint(str(CKPT), device="cpu", dtype=dtype, lora=lora).model
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_lora_whose_b_is_zero_leaves_every_weight_as_it_was(tmp_path, dtype):
    folder = save_official_lora(tmp_path / "fresh", random=False)
    saved = load_file(str(folder / "lora_weights.safetensors"))
    assert all(not t.any() for k, t in saved.items() if k.endswith("lora_B")) and len(saved) == 80
    base, merged = _weights(None, dtype), _weights(str(folder), dtype)
    assert base.keys() == merged.keys() and "base_lm.layers.0.qkv_weight" in base
    assert [k for k in base if not torch.equal(base[k], merged[k])] == []


def test_the_merge_is_w_plus_alpha_over_r_times_b_a(lora_dir):
    base, merged = _weights(None), _weights(str(lora_dir))
    lora = load_file(str(lora_dir / "lora_weights.safetensors"))

    def delta(layer: str) -> torch.Tensor:
        return 2.0 * lora[layer + ".lora_B"] @ lora[layer + ".lora_A"]  # alpha / r = 8 / 4

    for layer in ("base_lm.layers.1.self_attn.o_proj", "residual_lm.layers.0.mlp.down_proj",
                  "feat_decoder.estimator.decoder.layers.0.self_attn.o_proj", "enc_to_lm_proj", "fusion_concat_proj"):
        torch.testing.assert_close(merged[layer + ".weight"], base[layer + ".weight"] + delta(layer))
    # q/k/v and gate/up are merged before each group is fused into one matrix.
    for fused, parts in (("feat_decoder.estimator.decoder.layers.1.qkv_weight", ("q_proj", "k_proj", "v_proj")),
                         ("base_lm.layers.1.gate_up_weight", ("gate_proj", "up_proj"))):
        owner = fused.rsplit(".", 1)[0] + (".self_attn." if "qkv" in fused else ".mlp.")
        want = torch.cat([delta(owner + part) for part in parts])
        torch.testing.assert_close(merged[fused], base[fused] + want)


def test_the_ckpt_file_is_read_as_the_safetensors_one(tmp_path, lora_dir):
    again = save_official_lora(tmp_path / "ckpt_format", ckpt_file=True)
    assert not (again / "lora_weights.safetensors").exists()
    first, second = _weights(str(lora_dir)), _weights(str(again))
    assert all(torch.equal(first[k], second[k]) for k in first)
