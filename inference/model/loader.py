"""Builds the modules of a checkpoint and loads their weights, checking every key."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .audio_vae import AudioVAE
from .checkpoint import check_keys, load_model_weights, load_vae_weights, resolve_checkpoint
from ..errors import CheckpointError
from .config import ModelConfig
from .lora import LoRA, LoRAError, merge_lora, read_lora
from .voxcpm2 import VoxCPM2
from ..text.tokenizer import TextTokenizer

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}


@dataclass
class LoadedModel:
    cfg: ModelConfig
    model: VoxCPM2
    vae: AudioVAE
    tokenizer: TextTokenizer
    device: torch.device


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: use one of {sorted(DTYPES)}")
    return DTYPES[name]


def load_checkpoint(name_or_path: str, *, device: str, dtype: str, vae_dtype: str = "float32",
                    cache_dir: str | None = None, local_files_only: bool = False,
                    lora: str | None = None) -> LoadedModel:
    """lora: a folder (or hub id) of LoRA weights saved by the official fine-tuning, merged into
    the model's weights (inference/model/lora.py); read before the checkpoint's gigabytes."""
    folder = resolve_checkpoint(name_or_path, cache_dir=cache_dir, local_files_only=local_files_only)
    cfg = ModelConfig.from_json(folder / "config.json")
    adapter = None if lora is None else read_lora(lora, cache_dir=cache_dir, local_files_only=local_files_only)
    try:
        return build_model(cfg, load_model_weights(folder), load_vae_weights(folder), TextTokenizer.from_dir(folder),
                           device=device, dtype=dtype, vae_dtype=vae_dtype, lora=adapter)
    except LoRAError:
        raise  # it names the LoRA's folder, which is the one to fix
    except CheckpointError as exc:
        if str(folder) in str(exc):
            raise
        raise CheckpointError(f"{folder}: {exc}") from exc  # which checkpoint, when several are around


def build_model(cfg: ModelConfig, model_weights: dict, vae_weights: dict, tokenizer: TextTokenizer, *,
                device: str, dtype: str, vae_dtype: str = "float32", lora: LoRA | None = None) -> LoadedModel:
    """Modules from weights already in memory (folded VAE weights); every key is checked."""
    device = torch.device(device)
    model = load_lm(cfg, model_weights, lora).to(device, torch_dtype(dtype))
    vae = AudioVAE(cfg.vae)
    check_keys(expected_keys(vae), vae_weights, "AudioVAE weights")
    vae.load_state_dict(vae_weights, strict=True)
    vae = vae.to(device, torch_dtype(vae_dtype))
    return LoadedModel(cfg, model.eval(), vae.eval(), tokenizer, device)


def expected_keys(module: torch.nn.Module) -> dict[str, torch.Size]:
    return {name: tensor.shape for name, tensor in module.state_dict().items()}


def load_lm(cfg: ModelConfig, weights: dict[str, torch.Tensor], lora: LoRA | None = None) -> VoxCPM2:
    """Built on the meta device so 2 B parameters are not initialised only to be overwritten. A
    LoRA is merged before q/k/v (and gate/up) are fused, into the weights as the file holds them."""
    with torch.device("meta"):
        model = VoxCPM2(cfg)
    check_keys(expected_keys(model), weights, "model weights")
    model.load_state_dict(weights, strict=True, assign=True)
    for module in model.transformers():
        module.init_rope()  # non-persistent tables were left on the meta device
    if lora is not None:
        merge_lora(model, lora)
    model.fuse_projections()
    return model
