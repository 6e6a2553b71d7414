"""Attention for LocEnc's and LocDiT's short non-causal sequences on CUDA, in place of flash.

Why: at 64 rows a LocDiT call spent 29% of its time in the flash kernel (docs/benchmarks.md, H100,
2026-11-25), whose 128-position tiles hold 11 positions. Here one program takes one (sequence,
query head): q, k and v of at most 16 positions sit in registers, both products run on tensor cores
in the inputs' dtype with float32 accumulation and the softmax in float32, as flash does. The
output is written in [N, T, H, D] memory order and handed back as the [N, H, T, D] view, the
layout flash returns, so the output projection reads it without a copy. Given the RoPE tables it
rotates q and k while loading them, so the layer's projection leaves them as they are (4% of a
128-row LocDiT call was that pass, docs/benchmarks.md).

Imported lazily (runtime/compiled.py): a CPU-only install needs no Triton. Under
TRITON_INTERPRET=1 it runs on the CPU (tests/unit/test_short_attention.py).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .transformer import sequence_attention

POSITIONS = 16  # the longest sequence the kernel takes (tl.dot needs 16 rows and columns)


@triton.jit
def _load(at, d, valid, cos, sin, positions, D: tl.constexpr, ROPE: tl.constexpr):
    """[P, D] rows of one head from `at` (a [P, 1] row pointer); with ROPE, rotated as apply_rope
    does (rotate-half, in float32, rounded once) by the tables' rows at `positions`."""
    x = tl.load(at + d, mask=valid, other=0.0)
    if ROPE:
        half = D // 2
        partner = tl.load(at + (d + half) % D, mask=valid, other=0.0).to(tl.float32)
        rotated = tl.where(d < half, -partner, partner)
        c = tl.load(cos + positions * D + d, mask=valid, other=0.0)
        s = tl.load(sin + positions * D + d, mask=valid, other=0.0)
        x = (x.to(tl.float32) * c + rotated * s).to(x.dtype)
    return x


@triton.jit
def _short_attention_kernel(q, k, v, out, qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2, heads, groups, tq, tk,
                            scale, cos, sin, D: tl.constexpr, P: tl.constexpr, ROPE: tl.constexpr):
    n, h = tl.program_id(0) // heads, tl.program_id(0) % heads
    g = h // groups  # the key/value head this query head reads (grouped heads)
    rows, cols, d = tl.arange(0, P)[:, None], tl.arange(0, P)[None, :], tl.arange(0, D)[None, :]
    n = n.to(tl.int64)
    # The queries may be the last tq positions of the tk keys' (LocDiT's last layer).
    queries = _load(q + n * qs0 + h * qs1 + rows * qs2, d, rows < tq, cos, sin, rows + (tk - tq), D, ROPE)
    keys = _load(k + n * ks0 + g * ks1 + rows * ks2, d, rows < tk, cos, sin, rows, D, ROPE)
    values = tl.load(v + n * vs0 + g * vs1 + rows * vs2 + d, mask=rows < tk, other=0.0)
    scores = tl.dot(queries, tl.trans(keys)) * scale
    scores = tl.where(cols < tk, scores, float("-inf"))
    weights = tl.exp(scores - tl.max(scores, axis=1)[:, None])
    weights = weights / tl.sum(weights, axis=1)[:, None]
    result = tl.dot(weights.to(values.dtype), values)
    o_at = out + ((n * tq + rows) * heads + h).to(tl.int64) * D + d  # [N, T, H, D] memory order
    tl.store(o_at, result.to(out.dtype.element_ty), mask=rows < tq)


def short_attention(q, k, v, causal: bool, rope=None, fallback=sequence_attention):
    """sequence_attention's contract; non-causal sequences of at most POSITIONS keys take the
    kernel (q [N, Hq, Tq, D] may be the last positions only), the rest `fallback`. rope: (cos, sin)
    [Tk, D] float32 tables when q and k come unrotated."""
    n, heads, tq, dim = q.shape
    tk = k.shape[2]
    unit = all(t.stride(-1) == 1 for t in (q, k, v))
    if causal or tk > POSITIONS or tq > POSITIONS or dim != triton.next_power_of_2(dim) or not unit:
        return fallback(q, k, v, causal) if rope is None else fallback(q, k, v, causal, rope)
    out = torch.empty(n, tq, heads, dim, device=q.device, dtype=q.dtype)
    strides = [s for t in (q, k, v) for s in t.stride()[:3]]  # the last is 1: checked above
    cos, sin = (t.float().contiguous() for t in rope) if rope is not None else (out, out)
    _short_attention_kernel[(n * heads,)](q, k, v, out, *strides, heads, heads // k.shape[1], tq, tk,
                                          dim ** -0.5, cos, sin, D=dim, P=POSITIONS, ROPE=rope is not None)
    return out.transpose(1, 2)
