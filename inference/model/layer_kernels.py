"""A transformer layer of a few tokens as four kernels: norm + QKV + RoPE, attention, output
projection + residual, norm + gate/up + SiLU, down projection + residual.

Why: at one stream a patch is bound by its kernel count, not by its arithmetic or its bytes (one
H100, 2026-11-26: the LM advance ran 664 kernels in 2.80 ms while its weights stream in about 1 ms;
an Euler step 159 kernels in 0.47 ms). With cuBLAS a layer is about ten kernels, because every
norm, rotation, activation and residual sits between two matrix products. Here each product
carries its neighbours: the norm is recomputed by every program from the row it reads (a few KB),
and the rotation, SiLU gate and residual are applied to the accumulator before it is stored.
A program owns a block of output columns for every token, so the weights are read once.

Each product is rounded where the official model rounds it (bf16 after the product, after the
norm's scaling and after its weight, after the gate's SiLU, after the residual's scale), so the
results differ from the reference layers by accumulation order only, as cuBLAS's kernels for
different batch sizes do. Meant for a few tokens (runtime/compiled.py routes up to
`FUSED_TOKENS`); larger batches are compute-bound and stay with cuBLAS. Under TRITON_INTERPRET=1
it runs on the CPU (tests/unit/test_layer_kernels.py).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

PLAIN, PAIRS_ROPE, PAIRS_GATED = 0, 1, 2
_PLAIN, _ROPE, _GATED = tl.constexpr(PLAIN), tl.constexpr(PAIRS_ROPE), tl.constexpr(PAIRS_GATED)  # as the kernels see them


def _configs(dot: bool):
    """Tile choices timed once per shape on the GPU (TRITON_CACHE_AUTOTUNING keeps them). Many
    narrow column blocks: with a few hundred programs the SMs share the weights evenly."""
    if dot:  # tensor-core products, 16 or 32 token rows per program
        shapes = [(16, 64, 4, 3), (16, 128, 4, 3), (32, 64, 4, 3), (32, 128, 4, 2), (64, 64, 4, 3)]
    else:  # up to 8 tokens: each weight tile multiplied with every token's row on the CUDA cores
        shapes = [(2, 1024, 4, 3), (2, 512, 4, 3), (4, 512, 4, 3), (4, 1024, 4, 2), (4, 256, 4, 3),
                  (8, 256, 4, 3), (8, 512, 4, 3), (8, 128, 4, 3), (16, 256, 4, 3)]
    return [triton.Config({"BN": bn, "BK": bk}, num_warps=w, num_stages=s) for bn, bk, w, s in shapes]


def _fit_registers(configs, named_args, **kwargs):
    """Without tensor cores a program holds a [tokens, BN, BK] product: at most 8K (16K for one
    token) values, 64 (128) per thread of four warps."""
    bm = kwargs.get("BM", named_args.get("BM", 1))
    room = 16384 if bm == 1 else 8192
    fit = [c for c in configs if bm * c.kwargs["BN"] * c.kwargs["BK"] <= room]
    return fit or configs[:1]


@triton.jit
def _rows(m, T, s0, s1):
    """Offset of token m of a [B, T, K] tensor with strides (s0, s1, 1)."""
    return (m // T).to(tl.int64) * s0 + (m % T).to(tl.int64) * s1


@triton.jit
def _product(acc, xv, wv, BM: tl.constexpr, UPCAST: tl.constexpr):
    """acc + xv @ wv.T. Up to 8 tokens on the CUDA cores (the weights' bytes bound it); more on
    tensor cores. UPCAST (the CPU's interpreter, whose bf16 products are wrong) multiplies the same
    values in float32, where products of bf16 numbers are exact."""
    if BM <= 8:
        return acc + tl.sum(xv.to(tl.float32)[:, None, :] * wv.to(tl.float32)[None, :, :], axis=2)
    if UPCAST:
        return tl.dot(xv.to(tl.float32), tl.trans(wv.to(tl.float32)), acc)
    return tl.dot(xv, tl.trans(wv), acc)


@triton.jit
def _inverse_rms(x, x_at, m_ok, K: tl.constexpr, eps, BM: tl.constexpr, BK: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) per token, the variance in float32 over the whole row as rms_norm takes it."""
    ks = tl.arange(0, BK)
    squares = tl.zeros([BM], dtype=tl.float32)
    for k0 in range(0, K, BK):
        xv = tl.load(x + x_at[:, None] + (k0 + ks)[None, :], mask=m_ok[:, None] & ((k0 + ks) < K)[None, :], other=0.0)
        xv = xv.to(tl.float32)
        squares += tl.sum(xv * xv, axis=1)
    return 1.0 / tl.sqrt(squares / K + eps)


@triton.jit
def _store_rotated(out, a, b, tokens, m_ok, a_cols, b_cols, in_head, rotate, cos, sin, cos_rows, N,
                   HALF: tl.constexpr):
    """Rotate-half RoPE of one head's column pairs: [a, b] -> [a cos - b sin, b cos + a sin], with
    the tables read per token (a row's position, or a sequence's), in float32 as apply_rope does."""
    t_at = (tokens % cos_rows).to(tl.int64)[:, None] * (2 * HALF)
    c_a = tl.load(cos + t_at + in_head[None, :], mask=m_ok[:, None], other=0.0)
    s_a = tl.load(sin + t_at + in_head[None, :], mask=m_ok[:, None], other=0.0)
    c_b = tl.load(cos + t_at + HALF + in_head[None, :], mask=m_ok[:, None], other=0.0)
    s_b = tl.load(sin + t_at + HALF + in_head[None, :], mask=m_ok[:, None], other=0.0)
    a_out = tl.where(rotate, a * c_a - b * s_a, a)
    b_out = tl.where(rotate, b * c_b + a * s_b, b)
    out_at = tokens.to(tl.int64)[:, None] * N
    ty = out.dtype.element_ty
    tl.store(out + out_at + a_cols[None, :], a_out.to(ty), mask=m_ok[:, None])
    tl.store(out + out_at + b_cols[None, :], b_out.to(ty), mask=m_ok[:, None])


@triton.jit
def _layer_product(x, xT, xs0, xs1, nw, w, out, res, rT, rs0, rs1, cos, sin, cos_rows, rope_heads,
                   M, N, eps, scale, K: tl.constexpr,
                   MODE: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, HALF: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr = False):
    """out[m, :] = f(norm(x[m]) @ w.T) for a block of tokens and columns.

    MODE PLAIN: columns n of w; PAIRS_ROPE: columns n and n + HALF of one head (w's rows are heads
    of 2*HALF), rotated when the head is below rope_heads; PAIRS_GATED: SiLU(gate n) * up n, with
    the up rows N below the gate rows (w is [2N, K]). RESIDUAL: res + (product * scale)."""
    pid_n, pid_m = tl.program_id(0), tl.program_id(1)
    tokens = pid_m * BM + tl.arange(0, BM)
    m_ok = tokens < M
    x_at = _rows(tokens, xT, xs0, xs1)
    ks, cols = tl.arange(0, BK), tl.arange(0, BN)
    if MODE == _ROPE:
        head = pid_n // (HALF // BN)
        in_head = (pid_n % (HALF // BN)) * BN + cols
        a_cols = head * (2 * HALF) + in_head
        b_cols = a_cols + HALF
    else:
        head, in_head = pid_n, cols
        a_cols = pid_n * BN + cols
        b_cols = a_cols + N  # PAIRS_GATED: the up rows
    a_ok = a_cols < N
    if NORM:
        inv = _inverse_rms(x, x_at, m_ok, K, eps, BM, BK)
    acc_a = tl.zeros([BM, BN], dtype=tl.float32)
    acc_b = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        k_ok = (k0 + ks) < K
        xv = tl.load(x + x_at[:, None] + (k0 + ks)[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if NORM:  # rounded after the scaling and after the weight, as rms_norm rounds
            scaled = (xv.to(tl.float32) * inv[:, None]).to(xv.dtype)
            gain = tl.load(nw + k0 + ks, mask=k_ok, other=0.0)
            xv = (scaled.to(tl.float32) * gain.to(tl.float32)[None, :]).to(xv.dtype)
        w_ok = a_ok[:, None] & k_ok[None, :]
        wa = tl.load(w + a_cols.to(tl.int64)[:, None] * K + (k0 + ks)[None, :], mask=w_ok, other=0.0)
        acc_a = _product(acc_a, xv, wa, BM, UPCAST)
        if MODE != _PLAIN:
            wb = tl.load(w + b_cols.to(tl.int64)[:, None] * K + (k0 + ks)[None, :], mask=w_ok, other=0.0)
            acc_b = _product(acc_b, xv, wb, BM, UPCAST)

    ty = out.dtype.element_ty
    a = acc_a.to(ty).to(tl.float32)  # each product rounded, as F.linear returns it
    if MODE == _ROPE:
        _store_rotated(out, a, acc_b.to(ty).to(tl.float32), tokens, m_ok, a_cols, b_cols, in_head,
                       head < rope_heads, cos, sin, cos_rows, N, HALF)
    else:
        if MODE == _GATED:  # SiLU of the rounded gate, rounded, times the rounded up
            gate = (a / (1.0 + tl.exp(-a))).to(ty).to(tl.float32)
            a = (gate * acc_b.to(ty).to(tl.float32)).to(ty).to(tl.float32)
        keep = m_ok[:, None] & a_ok[None, :]
        if RESIDUAL:  # res + product * scale, each rounded
            r_at = _rows(tokens, rT, rs0, rs1)
            rv = tl.load(res + r_at[:, None] + a_cols[None, :], mask=keep, other=0.0).to(tl.float32)
            a = rv + (a * scale).to(ty).to(tl.float32)
        tl.store(out + tokens.to(tl.int64)[:, None] * N + a_cols[None, :], a.to(ty), mask=keep)


_PARAMS = ["M", "N", "K", "MODE", "NORM", "RESIDUAL", "BM"]
_few_tokens = triton.autotune(_configs(dot=False), key=_PARAMS,
                              prune_configs_by={"early_config_prune": _fit_registers})(_layer_product)
_more_tokens = triton.autotune(_configs(dot=True), key=_PARAMS)(_layer_product)
_INTERPRETED = {"BN": 16, "BK": 64}  # the CPU's interpreter: one config, no timing


def _token_view(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """A [B, T, K] or [M, K] tensor as (tensor, T, stride of B, stride of T), last dim unit-strided."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    if t.dim() == 2:
        return t, 1, t.stride(0), 0
    return t, t.shape[1], t.stride(0), t.stride(1)


def launch(x, weight, n: int, mode: int, norm_weight=None, eps: float = 0.0, residual=None, scale: float = 1.0,
            rope=None, rope_heads: int = 0, half: int = 1) -> torch.Tensor:
    x, xT, xs0, xs1 = _token_view(x)
    m, k = x.numel() // x.shape[-1], x.shape[-1]
    out = torch.empty(m, n if mode != PAIRS_ROPE else weight.shape[0], device=x.device, dtype=x.dtype)
    res, rT, rs0, rs1 = _token_view(residual) if residual is not None else (out, 1, 0, 0)
    cos, sin = rope if rope is not None else (out, out)
    cos_rows = cos.numel() // cos.shape[-1] if rope is not None else 1
    bm = triton.next_power_of_2(m) if m <= 8 else 16 if m <= 16 else 32
    columns = n // 2 if mode == PAIRS_ROPE else n

    def grid(meta):
        return (triton.cdiv(columns, meta["BN"]), triton.cdiv(m, bm))
    args = (x, xT, xs0, xs1, norm_weight if norm_weight is not None else weight, weight, out, res, rT, rs0, rs1,
            cos, sin, cos_rows, rope_heads, m, out.shape[1] if mode == PAIRS_ROPE else n, eps, scale)
    flags = dict(K=k, MODE=mode, NORM=norm_weight is not None, RESIDUAL=residual is not None, HALF=half, BM=bm)
    if x.device.type != "cuda":
        _layer_product[grid(_INTERPRETED)](*args, **flags, **_INTERPRETED, UPCAST=True)
    else:
        (_few_tokens if bm <= 8 else _more_tokens)[grid](*args, **flags)
    return out


def attention_inputs(x, norm_weight, qkv_weight, cos, sin, eps: float, heads: tuple[int, int, int]):
    """transformer.attention_inputs's contract in one kernel (x [B, T, H]; cos/sin [T, D] or
    [B, 1, 1, D], or None). RoPE needs both halves of a head in one program: its blocks of columns
    are taken in pairs, so BN divides head_dim / 2."""
    num_heads, num_kv, head_dim = heads
    b, t, _ = x.shape
    rope = None if cos is None else (cos.reshape(-1, head_dim).contiguous(), sin.reshape(-1, head_dim).contiguous())
    qkv = launch(x, qkv_weight, qkv_weight.shape[0], PAIRS_ROPE, norm_weight, eps, rope=rope,
                  rope_heads=(num_heads + num_kv) if cos is not None else 0, half=head_dim // 2)
    q, k, v = qkv.view(b, t, num_heads + 2 * num_kv, head_dim).transpose(1, 2).split((num_heads, num_kv, num_kv), dim=1)
    return q, k, v


def layer_output(x, attn, o_weight, norm_weight, gate_up_weight, down_weight, eps: float, residual_scale: float):
    """transformer.layer_output's contract in three kernels: x [B, T, H] (any strides with a unit
    last one), attn [B, heads, T, D]."""
    b, h, t, d = attn.shape
    hidden = o_weight.shape[0]
    flat = attn.transpose(1, 2).reshape(b * t, h * d)
    x = launch(flat, o_weight, hidden, PLAIN, residual=x, scale=residual_scale)
    gated = launch(x, gate_up_weight, gate_up_weight.shape[0] // 2, PAIRS_GATED, norm_weight, eps)
    return launch(gated, down_weight, hidden, PLAIN, residual=x, scale=residual_scale).view(b, t, hidden)
