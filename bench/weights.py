"""Where the benchmarked weights come from: random ones of the published architecture, shared
by both implementations, or a checkpoint folder."""
from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from inference import Engine
from inference.model.checkpoint import fold_weight_norm
from inference.model.config import ModelConfig
from inference.model.loader import build_model
from inference.text.tokenizer import TextTokenizer
from inference.model.tiny_checkpoint import write_tokenizer


@dataclass
class Source:
    folder: str | None = None
    raw_config: dict | None = None
    model_weights: dict | None = None  # host copies, bf16
    vae_weights: dict | None = None  # host copies with weight_g / weight_v, as the official holds them
    tokenizer_dir: str | None = None


def prepare(args, work: Path) -> Source:
    if args.checkpoint:
        return Source(folder=args.checkpoint, raw_config=json.loads(Path(args.checkpoint, "config.json").read_text()))
    raw = json.loads(Path(args.config).read_text())
    tok_dir = work / "tokenizer"
    tok_dir.mkdir()
    write_tokenizer(tok_dir)  # a small tokenizer: its ids are valid rows of the big embedding
    from bench.official import random_official_state

    model_weights, vae_weights = random_official_state(raw, str(tok_dir))
    return Source(None, raw, model_weights, vae_weights, str(tok_dir))


def our_engine(source: Source, *, vae_dtype: str, cuda_graphs: bool, max_streams: int = 64, device: str = "cuda",
               warmup: bool = True, dtype: str = "bfloat16", compile: bool = True) -> Engine:
    """warmup=False leaves it to the caller, e.g. a worker thread that will replay the graphs."""
    if source.folder:
        return Engine.from_pretrained(source.folder, device=device, dtype=dtype, vae_dtype=vae_dtype,
                                      cuda_graphs=cuda_graphs, compile=compile, max_streams=max_streams,
                                      warmup=warmup)
    cfg = ModelConfig.from_dict(source.raw_config)
    loaded = build_model(cfg, dict(source.model_weights), fold_weight_norm(source.vae_weights),
                         TextTokenizer.from_dir(source.tokenizer_dir), device=device, dtype=dtype,
                         vae_dtype=vae_dtype)
    engine = Engine(loaded, cuda_graphs=cuda_graphs, compile=compile, max_streams=max_streams)
    if warmup:
        engine.warmup()
    return engine


def vae_fp32(source: Source):
    """The VAE in float32 on the GPU: the reference the streamed decode is measured against."""
    from inference.model.audio_vae import AudioVAE
    from inference.model.checkpoint import load_vae_weights

    cfg = ModelConfig.from_dict(source.raw_config)
    vae = AudioVAE(cfg.vae)
    vae.load_state_dict(load_vae_weights(source.folder) if source.folder else fold_weight_norm(source.vae_weights))
    return vae.cuda().eval()


def free_gpu():
    gc.collect()
    torch.cuda.empty_cache()
