"""The official voxcpm 2.0.3 package on the same weights: eager, then with its optimize(); and its
latents in bf16 and float32 against ours (the exactness bound)."""
from __future__ import annotations

import contextlib
import time

import numpy as np
import torch

from bench.timing import first_chunk_seconds, median, p90, stream_timings
from inference import SynthesisRequest
from bench.official import build_official, run_official
from bench.weights import free_gpu

PARITY_PATCHES = 8


def official_stream(model, text: str, n: int, steps: int, reference: str | None = None):
    cache = model.build_prompt_cache(reference_wav_path=reference) if reference else None
    return model._generate_with_prompt_cache(target_text=text, prompt_cache=cache, min_len=n, max_len=n,
                                             inference_timesteps=steps, cfg_value=2.0, streaming=True)


def measure(model, args, text: str, reference: str, label: str) -> dict:
    ttfp_d = [first_chunk_seconds(lambda: official_stream(model, text, 3, args.timesteps)) for _ in range(3)]
    ttfp_c = [first_chunk_seconds(lambda: official_stream(model, text, 3, args.timesteps, reference))
              for _ in range(3)]
    gaps, rtf = [], []
    for _ in range(2):
        t = stream_timings(lambda: official_stream(model, text, args.patches, args.timesteps))
        gaps += t["gaps"]
        rtf.append(t["total"] / (t["chunks"] * 7680 / 48000))
    return {"label": label, "ttfp_design": median(ttfp_d), "ttfp_clone": median(ttfp_c),
            "patch_ms": median(gaps) * 1e3, "patch_p90_ms": p90(gaps) * 1e3, "rtf": median(rtf),
            "patches": len(gaps)}


def latents_for_parity(engine, text: str) -> dict:
    noise = torch.randn(PARITY_PATCHES, engine.cfg.feat_dim, engine.cfg.patch_size,
                        generator=torch.Generator().manual_seed(11)).numpy()
    req = SynthesisRequest(text=text, noise=noise, min_len=PARITY_PATCHES - 1, max_len=PARITY_PATCHES)
    ours = np.stack([c.latents for c in engine.stream(req)])
    return {"noise": noise, "ours": ours}


def relative_errors(ours: np.ndarray, reference: np.ndarray) -> list[float]:
    """Per patch, ||ours - reference|| / ||reference|| (as many patches as both made)."""
    return [float(np.linalg.norm(a - b) / np.linalg.norm(b)) for a, b in zip(ours, reference)]


def parity(model, text: str, mine: dict) -> dict:
    latents, _, n = run_official(model, text=text, noise=mine["noise"], min_len=PARITY_PATCHES - 1,
                                 max_len=PARITY_PATCHES)
    errors = relative_errors(mine["ours"], latents)
    return {"first": errors[0], "mean": float(np.mean(errors)), "n": min(n, len(mine["ours"]))}


@contextlib.contextmanager
def true_float32():
    """TF32 off for products and convolutions: float32 computed as float32 (the reference)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def computed_as(dtype: str):
    """Where each side runs in `dtype`: float32 with TF32 off, bf16 as served (TF32 left alone)."""
    return true_float32() if dtype == "float32" else contextlib.nullcontext()


def official_model(source, dtype: str = "bfloat16", device: str = "cuda"):
    """The official model on the benchmark's weights (a folder, or the shared random state)."""
    state = None
    if source.model_weights is not None:
        state = dict(source.model_weights)
        state.update({f"audio_vae.{k}": v for k, v in source.vae_weights.items()})
    return build_official(source.raw_config, source.tokenizer_dir, state, source.folder, dtype, device)


def official_latents(source, text: str, noise: np.ndarray, dtype: str, device: str = "cuda") -> np.ndarray:
    """The official package's latents in `dtype` for `noise` (the model is freed before returning)."""
    model = official_model(source, dtype, device)
    with computed_as(dtype):
        latents, _, _ = run_official(model, text=text, noise=noise, min_len=PARITY_PATCHES - 1, max_len=PARITY_PATCHES)
    del model
    free_gpu()
    return latents


def precision(source, text: str, ours: dict[str, dict], device: str = "cuda") -> dict[str, list[float]]:
    """Per-patch relative errors of each pair, given our latents in bf16 and float32 (`ours[dtype]`,
    from latents_for_parity: the same noise). The official package's own bf16 against its float32 is
    the bound ours in bf16 is held to; ours in float32 against it shows the implementations equal."""
    noise = ours["bfloat16"]["noise"]
    official = {dtype: official_latents(source, text, noise, dtype, device) for dtype in ("bfloat16", "float32")}
    return {"ours bf16 against official float32": relative_errors(ours["bfloat16"]["ours"], official["float32"]),
            "official bf16 against official float32 (the bound)": relative_errors(official["bfloat16"],
                                                                                  official["float32"]),
            "ours bf16 against official bf16": relative_errors(ours["bfloat16"]["ours"], official["bfloat16"]),
            "ours float32 against official float32": relative_errors(ours["float32"]["ours"], official["float32"])}


def bench(source, args, text: str, reference: str, mine: dict | None) -> list[dict]:
    model = official_model(source)
    for _ in official_stream(model, text, 3, args.timesteps):
        pass  # load kernels before timing
    rows = [measure(model, args, text, reference, "official eager")]
    if mine is not None:
        rows[0]["parity"] = parity(model, text, mine)
    start = time.perf_counter()
    model.optimize()
    for ref in (None, reference):  # compiles on first use: count it as its warm-up
        for _ in official_stream(model, text, 3, args.timesteps, ref):
            pass
    warm = time.perf_counter() - start
    rows.append(measure(model, args, text, reference, "official optimize()"))
    rows[-1]["warmup_s"] = warm
    return rows
