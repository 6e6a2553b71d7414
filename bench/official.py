"""Bridge to the official `voxcpm` package, the reference our engine is compared against.

CI installs voxcpm with --no-deps and there is no CPU torchaudio, so its top-level import would
fail on modules that inference never touches. Those (and only those, and only while they are
missing) get a stand-in that raises a clear error when used. Nothing here changes the official
algorithm: the CFM noise is fed by swapping the one torch.randn call the sampler makes.
"""
from __future__ import annotations

import gc
import importlib
import json
import shutil
import sys
import tempfile
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

# Optional dependencies of the official package that synthesis itself never calls.
_STANDIN_ALLOWED = ("torchaudio", "torchcodec", "wetext", "modelscope", "funasr", "inflect")
# Real dependencies, imported before any stand-in exists: transformers probes for torchaudio
# while it initialises and must not find the placeholder. librosa must be the real one.
_REAL_FIRST = ("transformers", "librosa", "einops", "pydantic", "tqdm", "safetensors.torch")


class _StandIn(types.ModuleType):
    """Importable placeholder: any real use says which module is missing."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ModuleNotFoundError(
            f"{self.__name__} is not installed here; the official voxcpm package tried to use "
            f"{self.__name__}.{attr}, which the parity tests stub out (install {self.__name__} to use it)")


def _import_with_standins(name: str):
    """Import `name`, stubbing missing optional modules one by one; real dependencies still fail."""
    for dependency in _REAL_FIRST:
        importlib.import_module(dependency)
    from transformers import LlamaTokenizerFast  # noqa: F401  (resolves the lazy import eagerly)

    added = []
    try:
        for _ in range(len(_STANDIN_ALLOWED) + 1):
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError as exc:
                missing = (exc.name or "").split(".")[0]
                if missing not in _STANDIN_ALLOWED or missing in sys.modules:
                    raise
                # Drop half-imported official modules so the retry re-executes them.
                for mod in [m for m in sys.modules if m == "voxcpm" or m.startswith("voxcpm.")]:
                    del sys.modules[mod]
                sys.modules[missing] = _StandIn(missing)
                added.append(missing)
        raise ImportError(f"could not import {name} even with stand-ins for {added}")
    finally:
        # The official modules keep their own reference; removing the stand-ins from sys.modules
        # stops other libraries (transformers probes torchaudio) from mistaking them for the real thing.
        for missing in added:
            sys.modules.pop(missing, None)


def import_official() -> types.SimpleNamespace:
    """The official classes and helpers the tests use."""
    core = _import_with_standins("voxcpm.core")
    v2 = importlib.import_module("voxcpm.model.voxcpm2")
    cli = importlib.import_module("voxcpm.cli")
    vae = importlib.import_module("voxcpm.modules.audiovae")
    try:
        from importlib.metadata import version
        pkg_version = version("voxcpm")
    except Exception:  # pragma: no cover - an unpacked source tree has no metadata
        pkg_version = "unknown"
    return types.SimpleNamespace(
        VoxCPM=core.VoxCPM, VoxCPM2Model=v2.VoxCPM2Model, VoxCPMConfig=v2.VoxCPMConfig,
        AudioVAEV2=vae.AudioVAEV2, AudioVAEConfigV2=vae.AudioVAEConfigV2,
        build_final_text=cli.build_final_text, version=pkg_version,
        mask_multichar_chinese_tokens=importlib.import_module("voxcpm.model.utils").mask_multichar_chinese_tokens,
    )


def official_text_normalizer():
    """The official TextNormalizer (WeText and inflect must be installed: no stand-ins there)."""
    module = _import_with_standins("voxcpm.utils.text_normalize")
    return module.TextNormalizer()


def build_official_modules(ckpt_dir) -> torch.nn.Module:
    """An unloaded VoxCPM2Model built from the checkpoint's config (for key/shape checks)."""
    off = import_official()
    raw = Path(ckpt_dir, "config.json").read_text(encoding="utf-8")
    config = off.VoxCPMConfig.model_validate_json(raw)
    config.dtype = "float32"
    from transformers import LlamaTokenizerFast

    tokenizer = LlamaTokenizerFast.from_pretrained(str(ckpt_dir))
    return off.VoxCPM2Model(config, tokenizer, off.AudioVAEV2(config=config.audio_vae_config), device="cpu")


def load_official_model(ckpt_dir, dtype: str = "float32", lora_config=None, device: str = "cpu"):
    """VoxCPM2Model on `device` through the official loader, in `dtype` (with LoRA layers where the
    official LoRAConfig `lora_config` puts them).

    from_local casts to config.json's dtype and sizes its KV caches with it, so it runs on a temp
    copy whose config names `dtype` instead.
    """
    off = import_official()
    with tempfile.TemporaryDirectory(prefix="voxcpm_official_") as tmp:
        for item in Path(ckpt_dir).iterdir():
            if item.is_file() and item.name != "config.json":
                shutil.copy2(item, Path(tmp, item.name))
        cfg = json.loads(Path(ckpt_dir, "config.json").read_text(encoding="utf-8"))
        cfg["dtype"] = dtype
        Path(tmp, "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        model = off.VoxCPM2Model.from_local(tmp, optimize=False, device=device, lora_config=lora_config)
    return model


@contextmanager
def fed_noise(model, noise, record: list):
    """Make patch i's CFM start from noise[i]; record every generated patch [feat_dim, patch]."""
    decoder = model.feat_decoder
    original_forward = decoder.forward
    real_randn = torch.randn

    def forward(*args, **kwargs):
        index = len(record)
        if index >= len(noise):
            raise IndexError(f"the official run asked for patch {index + 1} but only {len(noise)} noise patches were given")

        def randn(*size, **kw):
            shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
            want = torch.as_tensor(noise[index])
            if shape != (1,) + tuple(want.shape):
                raise AssertionError(f"unexpected noise draw of shape {shape}")
            return want.reshape(shape).to(device=kw.get("device"), dtype=kw.get("dtype") or torch.float32).clone()

        torch.randn = randn
        try:
            out = original_forward(*args, **kwargs)
        finally:
            torch.randn = real_randn
        record.append(out[0].detach().float().cpu().numpy().copy())
        return out

    decoder.forward = forward
    try:
        yield
    finally:
        decoder.forward = original_forward
        torch.randn = real_randn


def run_official(model, *, text, control=None, reference_wav=None, prompt_wav=None, prompt_text=None,
                 cfg_value=2.0, inference_timesteps=10, min_len=2, max_len=4096, noise):
    """Run the official non-streaming path; returns (latents [n, feat, patch], waveform, n).

    Goes through the official VoxCPM wrapper's generate (text clean-up, prompt cache, length cap)
    with retry_badcase off and no denoiser, and the CLI's way of writing a control prefix.
    """
    off = import_official()
    wrapper = off.VoxCPM.__new__(off.VoxCPM)  # skip __init__: it would load, compile and warm up
    wrapper.tts_model, wrapper.denoiser, wrapper.text_normalizer = model, None, None
    record: list = []
    with fed_noise(model, np.asarray(noise, dtype=np.float32), record):
        wav = wrapper.generate(
            text=off.build_final_text(text, control),
            prompt_wav_path=None if prompt_wav is None else str(prompt_wav), prompt_text=prompt_text,
            reference_wav_path=None if reference_wav is None else str(reference_wav),
            cfg_value=cfg_value, inference_timesteps=inference_timesteps, min_len=min_len,
            max_len=max_len, normalize=False, denoise=False, retry_badcase=False)
    latents = np.stack(record).astype(np.float32)
    return latents, np.asarray(wav, dtype=np.float32), len(record)


def build_official(raw: dict | None, tok_dir: str | None, state: dict | None = None, folder: str | None = None,
                   dtype: str = "bfloat16", device: str = "cuda"):
    """The official model in `dtype` on `device`, from a folder or from `raw` config and `state`."""
    off = import_official()
    if folder:
        if dtype != "bfloat16" or device != "cuda":  # from_local takes the dtype from config.json
            return load_official_model(folder, dtype, device=device).eval()
        return off.VoxCPM2Model.from_local(folder, optimize=False, device="cuda")
    from transformers import LlamaTokenizerFast

    config = off.VoxCPMConfig.model_validate(raw)
    config.dtype = dtype
    tokenizer = LlamaTokenizerFast.from_pretrained(tok_dir)
    with torch.device("cuda"):  # initialise on the GPU: minutes faster than 2.4 B parameters on the host
        model = off.VoxCPM2Model(config, tokenizer, off.AudioVAEV2(config=config.audio_vae_config), device="cuda")
    model = model.to(getattr(torch, dtype))
    model.audio_vae = model.audio_vae.float()  # as the official loader does
    if state is not None:
        model.load_state_dict(state, strict=True)
    return model.eval()


def random_official_state(raw: dict, tok_dir: str) -> tuple[dict, dict]:
    """Random weights of the published architecture as the official initialises them (host copies)."""
    model = build_official(raw, tok_dir)
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    del model
    gc.collect()  # the official model's GPU copy is gone before ours is built
    torch.cuda.empty_cache()
    vae = {k[len("audio_vae."):]: v for k, v in state.items() if k.startswith("audio_vae.")}
    lm = {k: v for k, v in state.items() if not k.startswith("audio_vae.")}
    return lm, vae
