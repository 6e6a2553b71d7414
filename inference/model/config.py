"""Model configuration, read from a checkpoint's config.json into validated dataclasses.

The published config describes the base LM in full and the other transformers (residual LM,
LocEnc, LocDiT) as overrides of it; `ModelConfig.from_dict` spells every stage out so that no
module has to know how its numbers were derived.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import CheckpointError


class ConfigError(CheckpointError, ValueError):
    """The checkpoint's config.json is missing a field or holds a value we cannot run."""


@dataclass(frozen=True)
class RopeConfig:
    theta: float
    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_positions: int
    max_positions: int

    @property
    def factors(self) -> tuple[float, ...]:
        # LongRoPE switches to the long factors only when the table outgrows the trained length.
        return self.long_factor if self.max_positions > self.original_max_positions else self.short_factor

    @property
    def attention_scale(self) -> float:
        ratio = self.max_positions / self.original_max_positions
        return math.sqrt(1 + math.log(ratio) / math.log(self.original_max_positions))


@dataclass(frozen=True)
class TransformerConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig | None
    vocab_size: int = 0
    use_mup: bool = False
    scale_emb: float = 1.0
    scale_depth: float = 1.0

    def __post_init__(self):
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.rope is not None and len(self.rope.factors) != self.head_dim // 2:
            raise ConfigError(f"rope factors need head_dim/2 = {self.head_dim // 2} entries, got {len(self.rope.factors)}")

    @property
    def residual_scale(self) -> float:
        # muP scales each residual branch; the published checkpoint has use_mup false (scale 1).
        return self.scale_depth / math.sqrt(self.num_layers) if self.use_mup else 1.0

    @property
    def embed_scale(self) -> float:
        return self.scale_emb if self.use_mup else 1.0


@dataclass(frozen=True)
class VAEConfig:
    encoder_dim: int
    encoder_rates: tuple[int, ...]
    latent_dim: int
    decoder_dim: int
    decoder_rates: tuple[int, ...]
    depthwise: bool
    sample_rate: int
    out_sample_rate: int
    sr_bin_boundaries: tuple[int, ...] | None

    def __post_init__(self):
        if self.decoder_dim % 2 ** len(self.decoder_rates):
            raise ConfigError("decoder_dim must be divisible by 2 ** len(decoder_rates)")
        if any(r <= 0 for r in self.encoder_rates + self.decoder_rates):
            raise ConfigError("VAE rates must be positive")

    @property
    def encode_hop(self) -> int:
        """Input samples per latent frame (640 at 16 kHz)."""
        return math.prod(self.encoder_rates)

    @property
    def decode_hop(self) -> int:
        """Output samples per latent frame (1920 at 48 kHz)."""
        return math.prod(self.decoder_rates)


@dataclass(frozen=True)
class ModelConfig:
    base_lm: TransformerConfig
    residual_lm: TransformerConfig
    local_encoder: TransformerConfig
    local_dit: TransformerConfig
    vae: VAEConfig
    patch_size: int = 4
    feat_dim: int = 64
    fsq_latent_dim: int = 512
    fsq_scale: int = 9
    dit_mean_mode: bool = False
    max_length: int = 8192
    dtype: str = "bfloat16"

    def __post_init__(self):
        if self.feat_dim != self.vae.latent_dim:
            raise ConfigError(f"feat_dim ({self.feat_dim}) must equal the VAE latent_dim ({self.vae.latent_dim})")
        if self.base_lm.vocab_size <= 104:
            raise ConfigError("the base LM vocabulary must hold the audio special tokens 101-104")
        if self.residual_lm.hidden_size != self.base_lm.hidden_size:
            raise ConfigError("the residual LM must be as wide as the base LM")

    @property
    def patch_samples(self) -> int:
        """Output samples per generated patch (7680 for the published model)."""
        return self.patch_size * self.vae.decode_hop

    @property
    def prompt_pad_samples(self) -> int:
        """Input audio is padded to whole patches at the encoder rate (2560 samples at 16 kHz)."""
        return self.patch_size * self.vae.encode_hop

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        try:
            return cls.from_dict(raw)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from exc

    @classmethod
    def from_dict(cls, raw: dict) -> "ModelConfig":
        try:
            return _build(raw)
        except KeyError as exc:
            raise ConfigError(f"config.json lacks the field {exc.args[0]!r}") from exc


def _rope(lm: dict, head_dim: int) -> RopeConfig:
    scaling = lm.get("rope_scaling") or {}
    ones = [1.0] * (head_dim // 2)
    return RopeConfig(
        theta=float(lm["rope_theta"]),
        short_factor=tuple(float(f) for f in scaling.get("short_factor", ones)),
        long_factor=tuple(float(f) for f in scaling.get("long_factor", ones)),
        original_max_positions=int(scaling.get("original_max_position_embeddings", lm["max_position_embeddings"])),
        max_positions=int(lm["max_position_embeddings"]),
    )


def _base_lm(lm: dict) -> TransformerConfig:
    head_dim = lm.get("kv_channels") or lm["hidden_size"] // lm["num_attention_heads"]
    return TransformerConfig(
        hidden_size=lm["hidden_size"],
        intermediate_size=lm["intermediate_size"],
        num_layers=lm["num_hidden_layers"],
        num_heads=lm["num_attention_heads"],
        num_kv_heads=lm["num_key_value_heads"],
        head_dim=head_dim,
        rms_norm_eps=float(lm["rms_norm_eps"]),
        rope=_rope(lm, head_dim),
        vocab_size=lm["vocab_size"],
        use_mup=bool(lm.get("use_mup", True)),
        scale_emb=float(lm.get("scale_emb", 1.0)),
        scale_depth=float(lm.get("scale_depth", 1.0)),
    )


def _local(base: TransformerConfig, lm: dict, local: dict) -> TransformerConfig:
    """LocEnc and LocDiT reuse the base LM's settings with their own sizes (and RoPE table)."""
    head_dim = local.get("kv_channels") or local["hidden_dim"] // local["num_heads"]
    return replace(
        base,
        hidden_size=local["hidden_dim"],
        intermediate_size=local["ffn_dim"],
        num_layers=local["num_layers"],
        num_heads=local["num_heads"],
        head_dim=head_dim,
        rope=_rope(lm, head_dim),
        vocab_size=0,
    )


def _vae(raw: dict | None) -> VAEConfig:
    raw = raw or {}
    if raw.get("use_noise_block", False):
        raise ConfigError("AudioVAE with use_noise_block is not supported (it makes decoding random)")
    if raw.get("cond_type", "scale_bias") != "scale_bias" or raw.get("cond_out_layer", False):
        raise ConfigError("only the AudioVAE sample-rate conditioning 'scale_bias' without out layer is supported")
    boundaries = raw.get("sr_bin_boundaries", [20000, 30000, 40000])
    return VAEConfig(
        encoder_dim=raw.get("encoder_dim", 128),
        encoder_rates=tuple(raw.get("encoder_rates", (2, 5, 8, 8))),
        latent_dim=raw.get("latent_dim", 64),
        decoder_dim=raw.get("decoder_dim", 2048),
        decoder_rates=tuple(raw.get("decoder_rates", (8, 6, 5, 2, 2, 2))),
        depthwise=bool(raw.get("depthwise", True)),
        sample_rate=raw.get("sample_rate", 16000),
        out_sample_rate=raw.get("out_sample_rate", 48000),
        sr_bin_boundaries=None if boundaries is None else tuple(boundaries),
    )


def _build(raw: dict) -> ModelConfig:
    if raw.get("architecture", "voxcpm2").lower() != "voxcpm2":
        raise ConfigError(f"architecture {raw.get('architecture')!r} is not VoxCPM2")
    lm = raw["lm_config"]
    base = _base_lm(lm)
    residual = replace(
        base,
        num_layers=raw.get("residual_lm_num_layers", 8),
        vocab_size=0,
        rope=None if raw.get("residual_lm_no_rope", False) else base.rope,
    )
    dit = raw["dit_config"]
    return ModelConfig(
        base_lm=base,
        residual_lm=residual,
        local_encoder=_local(base, lm, raw["encoder_config"]),
        local_dit=_local(base, lm, dit),
        vae=_vae(raw.get("audio_vae_config")),
        patch_size=raw.get("patch_size", 4),
        feat_dim=raw.get("feat_dim", 64),
        fsq_latent_dim=raw.get("scalar_quantization_latent_dim", 512),
        fsq_scale=raw.get("scalar_quantization_scale", 9),
        dit_mean_mode=bool(dit.get("dit_mean_mode", False)),
        max_length=raw.get("max_length", 8192),
        dtype=raw.get("dtype", "bfloat16"),
    )
