"""The MiniCPM-4 transformer shared by every VoxCPM2 stage: base LM, residual LM, LocEnc, LocDiT.

Parameter names follow the checkpoint (`layers.N.self_attn.q_proj.weight`, ...). Two entry points:
`forward` runs a whole sequence (prefill, and the non-causal LocEnc / LocDiT), `step` runs one
token against a static KV cache written at a position tensor, so the same code can be captured
in a CUDA graph.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import RopeConfig, TransformerConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The variance is taken in float32 and the product rounded back before the weight, as the
        # official model does; doing it the other way round changes bf16 results.
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def rope_tables(rope: RopeConfig, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [max_positions, head_dim] in float32, LongRoPE factors and scale applied."""
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    positions = torch.arange(rope.max_positions, dtype=torch.float32)
    factors = torch.tensor(rope.factors, dtype=torch.float32)
    freqs = torch.outer(positions, 1.0 / factors) * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos() * rope.attention_scale, angles.sin() * rope.attention_scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, D]; cos/sin [T, D]. Rotation in float32, result in x's dtype."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def project(self, x: torch.Tensor, rope: tuple | None):
        """x [B, T, H] -> q [B, heads, T, D], k and v [B, kv_heads, T, D], RoPE applied."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return q, k, v

    def output(self, attn: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = attn.shape
        return self.o_proj(attn.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.residual_scale = cfg.residual_scale

    def add_residual(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        return x + branch if self.residual_scale == 1.0 else x + branch * self.residual_scale

    def finish(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        x = self.add_residual(x, attn_out)
        return self.add_residual(x, self.mlp(self.post_attention_layernorm(x)))


class KVCache:
    """Static per-model cache [layers, batch, kv_heads, capacity, head_dim], written in place."""

    def __init__(self, cfg: TransformerConfig, capacity: int, batch: int, device, dtype):
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, capacity, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.capacity = capacity

    def fill(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        self.k[layer, :, :, : k.shape[2]].copy_(k)
        self.v[layer, :, :, : v.shape[2]].copy_(v)


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.vocab_size > 0:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.init_rope()

    def init_rope(self):
        """(Re)computes the RoPE tables on the host in float32; they follow later .to() casts."""
        if self.cfg.rope is not None:
            cos, sin = rope_tables(self.cfg.rope, self.cfg.head_dim)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def rope(self, positions: torch.Tensor):
        if self.cfg.rope is None:
            return None
        return self.rope_cos[positions], self.rope_sin[positions]

    def forward(self, x: torch.Tensor, causal: bool, cache: KVCache | None = None) -> torch.Tensor:
        """x [B, T, H] -> normed hidden [B, T, H]; with a cache, its first T slots are filled."""
        rope = self.rope(torch.arange(x.shape[1], device=x.device))
        for i, layer in enumerate(self.layers):
            q, k, v = layer.self_attn.project(layer.input_layernorm(x), rope)
            if cache is not None:
                cache.fill(i, k, v)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            x = layer.finish(x, layer.self_attn.output(attn))
        return self.norm(x)

    def step(self, x: torch.Tensor, position: torch.Tensor, cache: KVCache, span: int) -> torch.Tensor:
        """One token x [B, H] at `position` (a 1-element long tensor on x's device).

        Attention reads the first `span` cache slots; slots after `position` are masked, so one
        captured graph serves every position below its span (length buckets).
        """
        rope = self.rope(position)
        valid = (torch.arange(span, device=x.device) <= position).view(1, 1, 1, span)
        h = x.unsqueeze(1)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.self_attn.project(layer.input_layernorm(h), rope)
            cache.k[i].index_copy_(2, position, k)
            cache.v[i].index_copy_(2, position, v)
            keys, values = cache.k[i, :, :, :span], cache.v[i, :, :, :span]
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=valid, enable_gqa=True)
            h = layer.finish(h, layer.self_attn.output(attn))
        return self.norm(h).squeeze(1)
