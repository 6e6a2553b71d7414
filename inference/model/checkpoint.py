"""Finding a checkpoint and reading its weights, with errors that say what was looked for.

The official loader reads weights with strict=False, so a renamed key in a checkpoint silently
leaves a layer at its random initialisation; `check_keys` makes that a load-time error instead.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import CheckpointError

MODEL_FILES = ("model.safetensors", "pytorch_model.bin")  # in order of preference
VAE_FILES = ("audiovae.safetensors", "audiovae.pth")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
LOCAL_HINT = ("pass a local checkpoint folder instead (--model /path/to/VoxCPM2, or "
              "Engine.from_pretrained('/path/to/VoxCPM2'))")
OFFLINE_HINT = "or set HF_HUB_OFFLINE=1 to use a copy already in the Hugging Face cache without network"
ONLINE_HINT = "or download it once with network access (HF_HUB_OFFLINE unset)"
SHOWN = 5  # names listed per kind of key problem; the rest are counted


def resolve_checkpoint(name_or_path, *, cache_dir=None, local_files_only: bool = False) -> Path:
    """A local folder as is, else a Hugging Face hub id fetched into (or found in) the hub cache."""
    name = str(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        return _checked_folder(path.resolve())
    if path.exists():
        raise CheckpointError(f"{path} is a file; a checkpoint is a folder holding config.json and "
                              f"the weight files: {LOCAL_HINT}")
    if looks_like_path(name):
        raise CheckpointError(f"the checkpoint folder {path.resolve()} does not exist: pass an existing "
                              "folder holding config.json, or a hub id such as 'openbmb/VoxCPM2'")
    try:
        folder = _download(name, cache_dir, local_files_only)
    except Exception as exc:  # the hub raises many types: validation, HTTP, offline, cache misses
        raise CheckpointError(_hub_failure(name, path, exc, cache_dir, local_files_only)) from exc
    return _checked_folder(folder)


def looks_like_path(name: str) -> bool:
    # Hub ids are "name" or "owner/name"; anything else is a folder the user expected to exist.
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or name[1:2] == ":"


def _hub_failure(name: str, path: Path, exc: Exception, cache_dir, local_files_only: bool) -> str:
    from huggingface_hub import constants

    offline = local_files_only or constants.HF_HUB_OFFLINE
    where = (f"looking in the hub cache {cache_dir or constants.HF_HUB_CACHE} (offline mode)" if offline
             else "downloading it from the Hugging Face hub")
    return (f"cannot find the checkpoint {name!r}: there is no folder {path.resolve()}, and {where} failed "
            f"({type(exc).__name__}: {first_line(exc)}). To fix: {LOCAL_HINT}, "
            f"{ONLINE_HINT if offline else OFFLINE_HINT}.")


def _download(repo_id: str, cache_dir, local_files_only: bool) -> Path:
    from huggingface_hub import snapshot_download

    common = dict(cache_dir=cache_dir, local_files_only=local_files_only)
    # Weights are gigabytes: ask for the preferred file and fall back only when the repo lacks it.
    wanted = ["config.json", MODEL_FILES[0], *VAE_FILES, *TOKENIZER_FILES]
    folder = Path(snapshot_download(repo_id, allow_patterns=wanted, **common))
    if not (folder / MODEL_FILES[0]).is_file():
        folder = Path(snapshot_download(repo_id, allow_patterns=[MODEL_FILES[1]], **common))
    return folder


def _checked_folder(folder: Path) -> Path:
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} is not a VoxCPM2 checkpoint: it has no config.json "
                              f"(a checkpoint folder holds config.json, {MODEL_FILES[0]}, "
                              f"{VAE_FILES[1]} and tokenizer.json)")
    return folder


def load_model_weights(folder) -> dict[str, torch.Tensor]:
    """The LM's state dict: model.safetensors, else pytorch_model.bin."""
    return _load_first(Path(folder), MODEL_FILES, "model weights")


def load_vae_weights(folder) -> dict[str, torch.Tensor]:
    """The AudioVAE's state dict with weight norm folded into plain weights."""
    return fold_weight_norm(_load_first(Path(folder), VAE_FILES, "AudioVAE weights"))


def _load_first(folder: Path, names: tuple[str, ...], what: str) -> dict[str, torch.Tensor]:
    for name in names:
        path = folder / name
        if path.is_file():
            return read_state_dict(path, what)
    raise CheckpointError(f"no {what} in {folder}: looked for {' and '.join(names)}")


def read_state_dict(path: Path, what: str) -> dict[str, torch.Tensor]:
    """A state dict of tensors from a .safetensors file or a torch pickle (read as data only)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            # weights_only: a checkpoint is data, and must not run code when it is read.
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # safetensors and pickle report corruption with many types
        raise CheckpointError(f"cannot read the {what} in {path}: {first_line(exc)}") from exc
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors (found {type(state).__name__})")
    return dict(state)


# Weight-norm parameter pairs (magnitude, direction): the old hook names and the parametrization names.
_NORM_PAIRS = (("weight_g", "weight_v"), ("parametrizations.weight.original0", "parametrizations.weight.original1"))


def _has_suffix(key: str, suffix: str) -> bool:
    return key == suffix or key.endswith("." + suffix)


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace each (g, v) pair by `weight = g * v / ||v||`, the norm over all dims but 0, in float32.

    Done once at load so the streaming decoder runs plain convolutions (no per-call norm).
    """
    out = dict(state)
    for g_suffix, v_suffix in _NORM_PAIRS:
        for g_key in [k for k in state if _has_suffix(k, g_suffix)]:
            prefix = g_key[: -len(g_suffix)]  # "" or "module.path."
            v_key = prefix + v_suffix
            if v_key not in state:
                raise CheckpointError(f"weight-norm magnitude {g_key} has no direction {v_key} beside it")
            g, v = out.pop(g_key).float(), out.pop(v_key).float()
            # torch's own kernel, so the folded weight equals what the weight-norm hook computes.
            out[prefix + "weight"] = torch._weight_norm(v, g, 0)
    orphans = sorted(k for k in out for _, v_suffix in _NORM_PAIRS if _has_suffix(k, v_suffix))
    if orphans:
        # Name what does sit beside each direction: usually the magnitude under a changed name.
        strays = sorted({k for o in orphans for k in out if k != o and k.rsplit(".", 1)[0] == o.rsplit(".", 1)[0]
                         and not k.endswith((".bias", ".alpha"))})
        beside = f"; beside them: {name_list(strays)}" if strays else ""
        raise CheckpointError(f"weight-norm directions without a magnitude: {name_list(orphans)}{beside}")
    return out


def check_keys(expected: dict[str, torch.Size], found: dict[str, torch.Tensor], what: str):
    """Refuse a state dict unless it has exactly the expected keys with the expected shapes."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    mismatched = sorted(
        f"{k} (checkpoint {list(found[k].shape)}, model {list(expected[k])})"
        for k in set(expected) & set(found)
        if tuple(found[k].shape) != tuple(expected[k])
    )
    problems = [f"{len(keys)} {label}: {name_list(keys)}" for label, keys in
                (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", mismatched))
                if keys]
    if problems:
        raise CheckpointError(f"the {what} do not match the model: " + "; ".join(problems)
                              + ". Is this a VoxCPM2 checkpoint, with a config.json that matches its weights?")


def name_list(keys: list[str]) -> str:
    shown = ", ".join(keys[:SHOWN])
    return shown if len(keys) <= SHOWN else f"{shown} and {len(keys) - SHOWN} more"


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
