"""The MiniCPM-4 transformer shared by every VoxCPM2 stage: base LM, residual LM, LocEnc, LocDiT.

Parameter names follow the checkpoint (`layers.N.self_attn.q_proj.weight`, ...). Two entry points:
`forward` runs a whole sequence (prefill, and the non-causal LocEnc / LocDiT), `step` runs one
token against a static KV cache written at a position tensor, so the same code can be captured
in a CUDA graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import RopeConfig, TransformerConfig


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # The variance is taken in float32 and the product rounded back before the weight, as the
    # official model does; doing it the other way round changes bf16 results.
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x * torch.rsqrt(variance + eps)).to(x.dtype) * weight


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


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


def attention_inputs(x, norm_weight, qkv_weight, cos, sin, eps: float, heads: tuple[int, int, int]):
    """Pre-norm, fused QKV projection and RoPE: x [B, T, H] -> q [B, Hq, T, D], k and v [B, Hkv, T, D]."""
    num_heads, num_kv, head_dim = heads
    b, t, _ = x.shape
    qkv = F.linear(rms_norm(x, norm_weight, eps), qkv_weight).view(b, t, num_heads + 2 * num_kv, head_dim)
    q, k, v = qkv.transpose(1, 2).split((num_heads, num_kv, num_kv), dim=1)
    if cos is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return q, k, v


def layer_output(x, attn, o_weight, norm_weight, gate_up_weight, down_weight, eps: float, residual_scale: float):
    """Output projection, residual, pre-norm and the SiLU-gated MLP, residual again."""
    b, h, t, d = attn.shape
    x = x + F.linear(attn.transpose(1, 2).reshape(b, t, h * d), o_weight) * residual_scale
    gate, up = F.linear(rms_norm(x, norm_weight, eps), gate_up_weight).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, down_weight) * residual_scale


def sequence_attention(q, k, v, causal: bool):
    """Attention over a whole sequence: prefill (causal), LocEnc and LocDiT (non-causal)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def decode_attention(q, keys, values, bias):
    """One query per head and row over `span` cached keys; bias [B, 1, 1, span] is 0 where valid,
    -inf after the row's position. With an additive mask and grouped heads SDPA picks one fused
    kernel on CUDA (the hand-written version took 7), which computes scores and softmax in float32."""
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=bias, enable_gqa=True)


@dataclass(frozen=True)
class LayerOps:
    """The small functions a layer is made of, passed into every call of a transformer. These
    plain ones are the default; the runtime builds compiled versions (fewer, fused kernels:
    inference/runtime/compiled.py), one bundle for the per-step calls and one for the prefill,
    whose batch and length are symbolic."""

    attention_inputs: Callable = attention_inputs
    layer_output: Callable = layer_output
    decode_attention: Callable = decode_attention
    norm: Callable = rms_norm
    sequence_attention: Callable = sequence_attention


PLAIN_OPS = LayerOps()


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.heads = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)


class DecoderLayer(nn.Module):
    """Holds the checkpoint's per-layer weights; `fuse_projections` then concatenates q/k/v and
    gate/up so that each is one matrix product (fewer kernels per token)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eps, self.residual_scale = cfg.rms_norm_eps, cfg.residual_scale
        # Non-persistent buffers: they follow .to() but stay out of the checkpoint's key set.
        self.register_buffer("qkv_weight", None, persistent=False)
        self.register_buffer("gate_up_weight", None, persistent=False)

    def fuse_projections(self):
        a, m = self.self_attn, self.mlp
        self.qkv_weight = torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)).detach()
        self.gate_up_weight = torch.cat((m.gate_proj.weight, m.up_proj.weight)).detach()
        del a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj  # the fused copies replace them

    def inputs(self, ops: LayerOps, x, rope):
        if self.qkv_weight is None:
            raise RuntimeError("call fuse_projections() after loading the weights")
        cos, sin = rope if rope is not None else (None, None)
        return ops.attention_inputs(x, self.input_layernorm.weight, self.qkv_weight, cos, sin, self.eps,
                                    self.self_attn.heads)

    def output(self, ops: LayerOps, x, attn):
        return ops.layer_output(x, attn, self.self_attn.o_proj.weight, self.post_attention_layernorm.weight,
                                self.gate_up_weight, self.mlp.down_proj.weight, self.eps, self.residual_scale)


class KVCache:
    """Static cache [layers, rows, kv_heads, capacity, head_dim], written in place: one row per
    stream, so streams of different lengths share every kernel of a step."""

    def __init__(self, cfg: TransformerConfig, capacity: int, rows: int, device, dtype):
        shape = (cfg.num_layers, rows, cfg.num_kv_heads, capacity, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.capacity, self.rows = capacity, rows

    @staticmethod
    def bytes_per_row(cfg: TransformerConfig, capacity: int, dtype: torch.dtype) -> int:
        return 2 * cfg.num_layers * cfg.num_kv_heads * capacity * cfg.head_dim * dtype.itemsize

    def fill(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor):
        """Prefill: the first T slots of `rows` ([B] long) from k and v [B, kv_heads, T, head_dim]."""
        t = k.shape[2]
        self.k[layer, :, :, :t].index_copy_(0, rows, k)
        self.v[layer, :, :, :t].index_copy_(0, rows, v)


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

    def fuse_projections(self):
        for layer in self.layers:
            layer.fuse_projections()

    def rope(self, positions: torch.Tensor):
        if self.cfg.rope is None:
            return None
        return self.rope_cos[positions], self.rope_sin[positions]

    def forward(self, x: torch.Tensor, causal: bool, cache: KVCache | None = None,
                rows: torch.Tensor | None = None, ops: LayerOps = PLAIN_OPS, keep: int | None = None):
        """x [B, T, H] -> normed hidden [B, T, H]; with a cache, the first T slots of its `rows`
        ([B] long) are filled. keep=n (non-causal only): the last n positions [B, n, H] alone."""
        if keep is not None and causal:
            raise ValueError("keep= is for non-causal sequences")
        rope = self.rope(torch.arange(x.shape[1], device=x.device))
        for i, layer in enumerate(self.layers):
            q, k, v = layer.inputs(ops, x, rope)
            if cache is not None:
                cache.fill(i, k, v, rows)
            if keep is not None and i == len(self.layers) - 1:
                # Every key still counts, but the other positions' queries, output projection and
                # MLP would only be thrown away (LocDiT reads the noisy patch's positions alone).
                q, x = q[:, :, -keep:], x[:, -keep:]
            attn = ops.sequence_attention(q, k, v, causal)
            x = layer.output(ops, x, attn)
        return ops.norm(x, self.norm.weight, self.norm.eps)

    def step(self, x: torch.Tensor, position: torch.Tensor, cache: KVCache, span: int,
             ops: LayerOps = PLAIN_OPS) -> torch.Tensor:
        """One token per row: x [B, H] for cache rows 0..B-1, row b at position[b] ([B] long, on
        x's device).

        Attention reads the first `span` cache slots; each row masks the slots after its own
        position, so one captured graph serves every mix of positions below its span.
        """
        b = x.shape[0]
        rope = self.rope(position)
        if rope is not None:  # [B, D] -> [B, 1, 1, D]: one angle per row, broadcast over heads
            rope = tuple(t.view(b, 1, 1, -1) for t in rope)
        after = torch.arange(span, device=x.device).unsqueeze(0) > position.unsqueeze(1)
        bias = torch.zeros(b, 1, 1, span, device=x.device, dtype=x.dtype).masked_fill(after.view(b, 1, 1, span),
                                                                                      float("-inf"))
        rows = torch.arange(b, device=x.device)
        h = x.unsqueeze(1)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.inputs(ops, h, rope)
            keys, values = cache.k[i, :b], cache.v[i, :b]
            keys[rows, :, position] = k[:, :, 0]
            values[rows, :, position] = v[:, :, 0]
            attn = ops.decode_attention(q, keys[:, :, :span], values[:, :, :span], bias)
            h = layer.output(ops, h, attn)
        return ops.norm(h, self.norm.weight, self.norm.eps).squeeze(1)
