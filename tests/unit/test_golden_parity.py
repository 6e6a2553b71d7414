"""Parity with the official voxcpm package on the tiny checkpoint in tests/golden.

The golden outputs were produced by the official package (tests/golden/make_golden.py) with the
CFM noise of every patch fixed, so our engine, fed the same noise, must reproduce them: the same
number of patches (same stop decisions and length cap), the same latents and the same waveform.
The checkpoint tests check that the tiny checkpoint is laid out exactly like the official model.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from inference.model.tiny_checkpoint import write_tiny_checkpoint
from bench.official import build_official_modules, import_official, load_official_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CKPT = GOLDEN / "ckpt"
CASES = sorted(GOLDEN.glob("*.npz"))
TOLERANCE = 1e-3


def load_case(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _text(case: dict, key: str) -> str | None:
    return str(case[key]) or None


def _request(case: dict):
    from inference import SynthesisRequest

    audio = lambda key: None if not _text(case, key) else str(GOLDEN / _text(case, key))  # noqa: E731
    return SynthesisRequest(
        text=str(case["text"]), control=_text(case, "control"), reference_audio=audio("reference"),
        prompt_audio=audio("prompt"), prompt_text=_text(case, "prompt_text"),
        cfg_value=float(case["cfg_value"]), inference_timesteps=int(case["inference_timesteps"]),
        min_len=int(case["min_len"]), max_len=int(case["max_len"]), seed=None, noise=case["noise"])


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def engine():
    from inference import Engine

    return Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32")


def test_golden_cases_exist():
    assert len(CASES) >= 7, f"golden cases missing in {GOLDEN}: run python -m tests.golden.make_golden"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_engine_matches_official(engine, path):
    case = load_case(path)
    request = _request(case)
    chunks = list(engine.stream(request))
    n = int(case["n_patches"])
    assert len(chunks) == n, f"{path.stem}: {len(chunks)} patches, the official package made {n}"
    latents = np.stack([np.asarray(c.latents, dtype=np.float32) for c in chunks])
    streamed = np.concatenate([np.asarray(c.audio, dtype=np.float32).reshape(-1) for c in chunks])
    ref_wav = case["waveform"]
    assert latents.shape == case["latents"].shape, f"{path.stem}: latents {latents.shape} vs {case['latents'].shape}"
    assert streamed.shape == ref_wav.shape, f"{path.stem}: {streamed.size} samples, official {ref_wav.size}"
    lat_err, wav_err = rel_err(latents, case["latents"]), rel_err(streamed, ref_wav)
    message = f"{path.stem}: {n} patches, latent rel err {lat_err:.2e}, waveform rel err {wav_err:.2e}"
    print(message)
    assert lat_err < TOLERANCE and wav_err < TOLERANCE, message

    whole = np.asarray(engine.synthesize(request), dtype=np.float32).reshape(-1)
    assert whole.shape == streamed.shape, f"{path.stem}: synthesize() gave {whole.size} samples, stream {streamed.size}"
    # Same computation, so only float rounding may separate the two paths.
    assert rel_err(streamed, whole) < 1e-5, f"{path.stem}: stream != synthesize ({rel_err(streamed, whole):.2e})"


def test_golden_made_by_installed_official_version():
    version = import_official().version
    made_by = {str(load_case(p)["official_version"]) for p in CASES}
    assert made_by == {version}, f"golden data from voxcpm {made_by}, installed {version}: regenerate it"


def _checkpoint_tensors(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").exists():
        tensors = load_file(str(directory / "model.safetensors"))
    else:
        tensors = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    if (directory / "audiovae.safetensors").exists():
        vae = load_file(str(directory / "audiovae.safetensors"))
    else:
        vae = torch.load(directory / "audiovae.pth", map_location="cpu", weights_only=True)
        vae = vae.get("state_dict", vae)
    tensors.update({f"audio_vae.{k}": v for k, v in vae.items()})
    return tensors


@pytest.mark.parametrize("directory", ["committed", "fresh"])
def test_checkpoint_layout_equals_official_modules(directory, tmp_path):
    ckpt = CKPT if directory == "committed" else write_tiny_checkpoint(tmp_path / "ckpt", seed=3)
    official = build_official_modules(ckpt).state_dict()
    ours = _checkpoint_tensors(ckpt)
    assert sorted(set(official) - set(ours)) == [], "missing from the tiny checkpoint"
    assert sorted(set(ours) - set(official)) == [], "not in the official modules"
    shapes = {k: (tuple(ours[k].shape), tuple(v.shape)) for k, v in official.items() if ours[k].shape != v.shape}
    assert shapes == {}, f"shape mismatches (ours, official): {shapes}"
    integer = {k for k, v in official.items() if not v.is_floating_point()}
    assert integer == {"audio_vae.decoder.sr_bin_boundaries"}
    assert all(ours[k].dtype == official[k].dtype for k in integer)


@pytest.mark.parametrize("model_format,vae_format", [("safetensors", "pth"), ("bin", "pth-plain"),
                                                     ("safetensors", "safetensors")])
def test_official_loader_takes_every_tensor(model_format, vae_format, tmp_path):
    # The official loader uses strict=False, so compare values: a misnamed tensor would stay random.
    ckpt = write_tiny_checkpoint(tmp_path / "ckpt", seed=1, model_format=model_format, vae_format=vae_format)
    model = load_official_model(ckpt, dtype="float32")
    ours = _checkpoint_tensors(ckpt)
    loaded = model.state_dict()
    differ = [k for k, v in ours.items() if not torch.equal(loaded[k].to(v.dtype), v)]
    assert differ == [], f"not loaded by the official loader: {differ[:5]}"


def test_committed_checkpoint_is_reproducible(tmp_path):
    fresh = write_tiny_checkpoint(tmp_path / "ckpt", seed=0, dtype=torch.bfloat16)
    read = lambda folder, name: json.loads((folder / name).read_text(encoding="utf-8"))  # noqa: E731
    for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert read(fresh, name) == read(CKPT, name), name
    # Compare the vocabulary, not the bytes: the serialisation varies across tokenizers releases.
    for part in ("vocab", "merges"):
        assert read(fresh, "tokenizer.json")["model"][part] == read(CKPT, "tokenizer.json")["model"][part]
    ours, committed = _checkpoint_tensors(fresh), _checkpoint_tensors(CKPT)
    assert set(ours) == set(committed)
    assert all(torch.equal(ours[k], committed[k]) for k in ours), "inference/model/tiny_checkpoint.py no longer writes the golden weights"


def test_tokenizer_splits_multichar_chinese_like_official():
    from transformers import LlamaTokenizerFast

    raw = LlamaTokenizerFast.from_pretrained(str(CKPT))
    wrapped = import_official().mask_multichar_chinese_tokens(raw)
    text = "你好世界，我们今天很好。"
    assert raw.tokenize(text) == ["▁你好", "世界", "，", "我们", "今天", "很", "好", "。"]
    # Multi-character Han tokens become characters, and the word marker glued to one is dropped.
    assert wrapped.tokenize(text) == list("你好世界，我们今天很好。")
    # Only tokens whose Han text is itself a vocabulary entry are split: "欢迎" is not one.
    assert wrapped.tokenize("欢迎大家") == ["▁欢迎", "大", "家"]
    assert wrapped.tokenize("我们是") == ["▁", "我", "们", "是"]
    ids = wrapped("(A calm voice)Hello 你好, 语音合成 test.")
    assert raw.unk_token_id not in ids and raw.bos_token_id not in ids
    assert raw.convert_ids_to_tokens([101, 102, 103, 104]) == [
        "<|audio_start|>", "<|audio_end|>", "<|ref_audio_start|>", "<|ref_audio_end|>"]
    config = json.loads((CKPT / "config.json").read_text(encoding="utf-8"))
    assert config["lm_config"]["vocab_size"] == len(raw)
