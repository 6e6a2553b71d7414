"""LoRA weights from the official VoxCPM fine-tuning, merged into the base weights at load.

The official training script saves a LoRA run as a folder (e.g. checkpoints/step_0001000):

- `lora_weights.safetensors` (or `lora_weights.ckpt`, a torch pickle of {"state_dict": ...}):
  for each adapted linear layer `<layer>.lora_A` [r, in] and `<layer>.lora_B` [out, r], under
  the model's own layer names (`base_lm.layers.0.self_attn.q_proj.lora_A`);
- `lora_config.json`: {"base_model": ..., "lora_config": {"r", "alpha", "enable_lm", "enable_dit",
  "enable_proj", "target_modules_lm", "target_modules_dit", "target_proj_modules", ...}}.

The official model adds (alpha / r) * B(A(x)) to such a layer's output: the same as the layer with
its weight replaced by W + (alpha / r) * B @ A. That sum is formed once, in float32, before the
model is cast to the run's dtype, so the model, its compiled functions and its CUDA graphs are the
same with a LoRA as without one.
"""
from __future__ import annotations

import json
import logging
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import CheckpointError
from .checkpoint import first_line, looks_like_path, name_list, read_state_dict

log = logging.getLogger("voxcpm.lora")

WEIGHT_FILES = ("lora_weights.safetensors", "lora_weights.ckpt")  # in the official loader's order
CONFIG_FILE = "lora_config.json"
HALVES = ("lora_A", "lora_B")
# The official LoRAConfig's defaults, for a lora_config.json that leaves a field out.
_ATTENTION = ["q_proj", "v_proj", "k_proj", "o_proj"]
DEFAULTS = dict(r=8, alpha=16, enable_lm=False, enable_dit=False, enable_proj=False,
                target_modules_lm=_ATTENTION, target_modules_dit=_ATTENTION,
                target_proj_modules=["enc_to_lm_proj", "lm_to_dit_proj", "res_to_dit_proj", "fusion_concat_proj"])
FIX = ("pass the folder the official VoxCPM training saved (e.g. checkpoints/step_0001000, holding "
       f"{WEIGHT_FILES[0]} and {CONFIG_FILE})")
LAYER_EXAMPLES = ("base_lm.layers.0.self_attn.q_proj, feat_decoder.estimator.decoder.layers.0.mlp.up_proj, "
                  "enc_to_lm_proj")


class LoRAError(CheckpointError):
    """LoRA weights that cannot be found or read, or that do not fit this model."""


@dataclass(frozen=True)
class LoRATargets:
    """lora_config.json: the rank, alpha, and which linear layers the official model adapts."""

    r: int
    alpha: float
    lm: tuple[str, ...]  # layer names adapted in base_lm and residual_lm (empty: none)
    dit: tuple[str, ...]  # ... in the LocDiT (feat_decoder.estimator)
    proj: tuple[str, ...]  # the model's own projections (enc_to_lm_proj...)

    def adapts(self, layer: str) -> bool:
        short = layer.rsplit(".", 1)[-1]
        if layer.startswith(("base_lm.", "residual_lm.")):
            return short in self.lm
        if layer.startswith("feat_decoder.estimator."):
            return short in self.dit
        return "." not in layer and layer in self.proj


@dataclass(frozen=True)
class LoRA:
    name: str  # as the user gave it
    folder: Path
    targets: LoRATargets
    base_model: str | None  # what lora_config.json says it was trained on
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]  # layer -> (A [r, in], B [out, r])

    @property
    def scale(self) -> float:
        return self.targets.alpha / self.targets.r


def read_lora(name_or_path, *, cache_dir=None, local_files_only: bool = False) -> LoRA:
    """The LoRA in a local folder, or in a hub repository (fetched into the hub cache)."""
    folder = resolve_lora(name_or_path, cache_dir=cache_dir, local_files_only=local_files_only)
    weights_file, config_file = lora_files(folder)
    targets, base_model = read_config(config_file)
    try:
        state = read_state_dict(weights_file, "LoRA weights")
    except CheckpointError as exc:
        raise LoRAError(str(exc)) from exc
    return LoRA(str(name_or_path), folder, targets, base_model, pair_up(state, weights_file))


def resolve_lora(name_or_path, *, cache_dir=None, local_files_only: bool = False) -> Path:
    name = str(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise LoRAError(f"the LoRA {path.resolve()} is a file; --lora takes the folder holding it: {FIX}")
    if looks_like_path(name):
        raise LoRAError(f"the LoRA folder {path.resolve()} does not exist: {FIX}, or a hub id")
    try:
        return _download(name, cache_dir, local_files_only)
    except Exception as exc:  # the hub raises many types: validation, HTTP, offline, cache misses
        raise LoRAError(f"cannot find the LoRA {name!r}: there is no folder {path.resolve()}, and getting it from "
                        f"the Hugging Face hub failed ({type(exc).__name__}: {first_line(exc)}): {FIX}, or the "
                        "hub id of a repository holding those files") from exc


def _download(repo_id: str, cache_dir, local_files_only: bool) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, allow_patterns=[CONFIG_FILE, *WEIGHT_FILES], cache_dir=cache_dir,
                                  local_files_only=local_files_only))


def lora_files(folder: Path) -> tuple[Path, Path]:
    """(weights, config) as the official training saves them in `folder`."""
    weights = next((folder / n for n in WEIGHT_FILES if (folder / n).is_file()), None)
    if weights is None:
        raise LoRAError(f"{folder} holds no LoRA weights: looked for {' and '.join(WEIGHT_FILES)}"
                        f"{_found(folder)}: {FIX}")
    config = folder / CONFIG_FILE
    if not config.is_file():
        raise LoRAError(f"{folder} has {weights.name} but no {CONFIG_FILE}, which gives the LoRA's rank r and alpha "
                        f"(its scale is alpha / r) and the layers it adapts: copy it from the training's checkpoint "
                        "folder, where the official training writes both")
    return weights, config


def _found(folder: Path) -> str:
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if "model.safetensors" in names or "pytorch_model.bin" in names:
        return " (it holds model weights: a full fine-tune is a checkpoint of its own, to pass as --model)"
    runs = [n for n in names if n == "latest" or n.startswith("step_")]
    if runs:  # the training's save_path: the LoRA is in one of its checkpoint folders
        return f" (it holds the training's checkpoint folders: pass one of them, such as {folder / runs[-1]})"
    return f" (it holds {name_list(names)})" if names else " (it is empty)"


def read_config(path: Path) -> tuple[LoRATargets, str | None]:
    """lora_config.json; fields it leaves out take the official LoRAConfig's defaults."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoRAError(f"cannot read {path}: {first_line(exc)}") from exc
    body = info.get("lora_config") if isinstance(info, dict) else None
    if not isinstance(body, dict):
        raise LoRAError(f'{path} has no "lora_config" object: the official training writes {{"base_model": ..., '
                        '"lora_config": {"r": ..., "alpha": ..., "enable_lm": ..., "enable_dit": ..., ...}}')
    cfg = {**DEFAULTS, **body}
    r, alpha = cfg["r"], cfg["alpha"]
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise LoRAError(f"{path}: r is {r!r}; the rank must be a whole number, 1 or more")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (math.isfinite(alpha) and alpha > 0):
        raise LoRAError(f"{path}: alpha is {alpha!r}; it must be a number above 0")
    groups = [_layername_list(cfg, flag, key, path) for flag, key in
              (("enable_lm", "target_modules_lm"), ("enable_dit", "target_modules_dit"),
               ("enable_proj", "target_proj_modules"))]
    base = info.get("base_model")
    return LoRATargets(r, float(alpha), *groups), base if isinstance(base, str) else None


def _layername_list(cfg: dict, flag: str, key: str, path: Path) -> tuple[str, ...]:
    if not isinstance(cfg[flag], bool):
        raise LoRAError(f"{path}: {flag} is {cfg[flag]!r}; it must be true or false")
    names = cfg[key]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise LoRAError(f"{path}: {key} is {names!r}; it must be a list of layer names such as {_ATTENTION}")
    return tuple(names) if cfg[flag] else ()


def pair_up(state: dict[str, torch.Tensor], source: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """layer -> (lora_A, lora_B). Names of a torch.compile'd model (`_orig_mod.`) count as the plain ones."""
    halves: dict[str, dict[str, torch.Tensor]] = {half: {} for half in HALVES}
    stray = []
    for key, tensor in state.items():
        layer, _, half = key.replace("_orig_mod.", "").rpartition(".")
        if half in halves and layer:
            halves[half][layer] = tensor
        else:
            stray.append(key)
    if stray:
        raise LoRAError(f"{source} holds keys that are not LoRA matrices (<layer>.lora_A, "
                        f"<layer>.lora_B): {name_list(sorted(stray))}")
    a, b = halves["lora_A"], halves["lora_B"]
    lone = sorted(f"{k}.lora_A without {k}.lora_B" for k in a.keys() - b.keys())
    lone += sorted(f"{k}.lora_B without {k}.lora_A" for k in b.keys() - a.keys())
    if lone:
        raise LoRAError(f"{source} is incomplete: {name_list(lone)}")
    if not a:
        raise LoRAError(f"{source} holds no LoRA matrices: {FIX}")
    return {layer: (a[layer], b[layer]) for layer in sorted(a)}


def merge_lora(model: nn.Module, lora: LoRA) -> int:
    """W += (alpha / r) * B @ A in every layer the LoRA adapts, in float32 (the model's weights as
    read, before the cast to the run's dtype); returns how many layers. Checks everything first."""
    linears = {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    check_layers(lora, linears)
    for layer, (a, b) in lora.pairs.items():
        weight = linears[layer].weight
        update = b.to(weight.device, torch.float32) @ a.to(weight.device, torch.float32)
        merged = weight.detach().float() + lora.scale * update
        linears[layer].weight = nn.Parameter(merged, requires_grad=weight.requires_grad)
    groups = Counter(layer.split(".", 1)[0] for layer in lora.pairs)
    log.info("LoRA %s merged into %d linear layers (%s): r=%d, alpha=%g, scale %g%s", lora.name, len(lora.pairs),
             ", ".join(f"{k} {n}" for k, n in sorted(groups.items())), lora.targets.r, lora.targets.alpha,
             lora.scale, f"; trained on {lora.base_model}" if lora.base_model else "")
    return len(lora.pairs)


def check_layers(lora: LoRA, linears: dict[str, nn.Linear]):
    """Every LoRA layer is a linear layer of the model that lora_config.json adapts, with fitting shapes."""
    unknown = [layer for layer in lora.pairs if layer not in linears]
    if unknown:
        raise LoRAError(f"layers of the LoRA {lora.folder} that match no linear layer of the model: "
                        f"{name_list(unknown)} (the model's are named like {LAYER_EXAMPLES}): is it a LoRA of "
                        f"VoxCPM2{_trained_on(lora)}?")
    ignored = [layer for layer in lora.pairs if not lora.targets.adapts(layer)]
    if ignored:
        raise LoRAError(f"{lora.folder / CONFIG_FILE} does not adapt {name_list(ignored)} (see its enable_lm, "
                        "enable_dit, enable_proj and target lists), so the official package would leave them out: "
                        f"the config and {', '.join(WEIGHT_FILES)} do not belong together")
    for layer, (a, b) in lora.pairs.items():
        _check_shapes(lora, layer, a, b, linears[layer].weight)


def _check_shapes(lora: LoRA, layer: str, a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor):
    r = lora.targets.r
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
        raise LoRAError(f"{layer}: lora_A is {list(a.shape)} and lora_B {list(b.shape)}, but {CONFIG_FILE} says "
                        f"r = {r}: expected lora_A [{r}, in features] and lora_B [out features, {r}]")
    if (b.shape[0], a.shape[1]) != tuple(weight.shape):
        raise LoRAError(f"{layer}: the LoRA's update is [{b.shape[0]}, {a.shape[1]}] but the layer's weight is "
                        f"{list(weight.shape)}: the LoRA was trained on another model{_trained_on(lora)}")


def _trained_on(lora: LoRA) -> str:
    return f" ({CONFIG_FILE} names {lora.base_model!r} as its base)" if lora.base_model else ""


def lora_label(name_or_path) -> str:
    """How the page and the API name a LoRA: a hub id as given, a folder by its own and its parent's
    name (finetune_lora/step_0001000), so that the server's paths are not shown."""
    name = str(name_or_path)
    path = Path(name).expanduser()
    if not (path.exists() or looks_like_path(name)):
        return name
    path = path.resolve()
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name
