"""Attention for LocEnc's and LocDiT's short non-causal sequences on CUDA, in place of flash.

Why: at 64 rows a LocDiT call spent 29% of its time in the flash kernel (docs/benchmarks.md, H100,
2026-11-25), whose 128-position tiles hold 11 positions. Here one program takes one (sequence,
query head): q, k and v of at most 16 positions sit in registers, both products run on tensor cores
in the inputs' dtype with float32 accumulation and the softmax in float32, as flash does. The
output is written in [N, T, H, D] memory order and handed back as the [N, H, T, D] view, the
layout flash returns, so the output projection reads it without a copy.

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
def _short_attention_kernel(q, k, v, out, qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2, heads, groups, tq, tk,
                            scale, D: tl.constexpr, P: tl.constexpr):
    n, h = tl.program_id(0) // heads, tl.program_id(0) % heads
    g = h // groups  # the key/value head this query head reads (grouped heads)
    rows, cols, d = tl.arange(0, P)[:, None], tl.arange(0, P)[None, :], tl.arange(0, D)[None, :]
    n = n.to(tl.int64)
    queries = tl.load(q + n * qs0 + h * qs1 + rows * qs2 + d, mask=rows < tq, other=0.0)
    keys = tl.load(k + n * ks0 + g * ks1 + rows * ks2 + d, mask=rows < tk, other=0.0)
    values = tl.load(v + n * vs0 + g * vs1 + rows * vs2 + d, mask=rows < tk, other=0.0)
    scores = tl.dot(queries, tl.trans(keys)) * scale
    scores = tl.where(cols < tk, scores, float("-inf"))
    weights = tl.exp(scores - tl.max(scores, axis=1)[:, None])
    weights = weights / tl.sum(weights, axis=1)[:, None]
    result = tl.dot(weights.to(values.dtype), values)
    o_at = out + ((n * tq + rows) * heads + h).to(tl.int64) * D + d  # [N, T, H, D] memory order
    tl.store(o_at, result.to(out.dtype.element_ty), mask=rows < tq)


def short_attention(q, k, v, causal: bool, fallback=sequence_attention):
    """sequence_attention's contract; non-causal sequences of at most POSITIONS keys take the
    kernel (q [N, Hq, Tq, D] may be the last positions only), the rest `fallback`."""
    n, heads, tq, dim = q.shape
    tk = k.shape[2]
    unit = all(t.stride(-1) == 1 for t in (q, k, v))
    if causal or tk > POSITIONS or tq > POSITIONS or dim != triton.next_power_of_2(dim) or not unit:
        return fallback(q, k, v, causal)
    out = torch.empty(n, tq, heads, dim, device=q.device, dtype=q.dtype)
    strides = [s for t in (q, k, v) for s in t.stride()[:3]]  # the last is 1: checked above
    _short_attention_kernel[(n * heads,)](q, k, v, out, *strides, heads, heads // k.shape[1], tq, tk,
                                          dim ** -0.5, D=dim, P=POSITIONS)
    return out.transpose(1, 2)
