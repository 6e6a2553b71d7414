"""Triton kernels for the streaming decoder's chunk on CUDA (vae_kernel_stream.py runs them).

torch.compile fused vae_stream.py's formulation into 132 kernels that took 8.5 ms at 64 rows on an
H200, where the decoder moves a few hundred MB: with symbolic sizes, its generated index
arithmetic (divisions by runtime strides, a concatenation folded into every shifted read) cost
more than the reads. These kernels do the pointwise and stencil work with the layout's arithmetic
written out, over [rows, frames, channels] tiles; the wider channel-mixing products stay cuBLAS GEMMs.

- `snake_context`: one convolution's input, `full` [rows, context + T, C]: the row's context,
  read from the state root through the row index, then the chunk's frames, each one optionally
  shifted by up to three per-channel biases (the residual 1x1 convolutions' biases, which the
  GEMMs leave out: `torch.addmm` adds the residual instead), scaled and shifted (the sample-rate
  condition) and passed through the Snake.
- `depthwise`: the dilated depthwise convolution of `full` (seven shifted reads of a tile the
  cache holds), then optionally the Snake.
- `residual`: a whole narrow residual unit in one kernel (depthwise convolution,
  Snake, the 1x1 product on tensor cores, added to x in place).
- `overlap_add`: the transposed convolution's output from its GEMM's per-frame products.
- `output_conv`: the last convolution (C channels to 1, kernel 7) and the tanh.

Imported lazily: a CPU-only install needs no Triton. Under TRITON_INTERPRET=1 they run on the CPU
(the tests). Tiles hold TILE elements; every kernel computes in float32.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TILE = 2048  # the output conv's tile; the others are tuned (`tuned`)
# (frames, channels, warps) per tile: tall tiles for few channels, wide ones for many. Each
# kernel takes the fastest for its frames, channels and row count (rounded up to a power of
# two) on its first call, i.e. during the engine's warm-up, before any graph is captured.
SHAPES = [(16, 128, 4), (32, 128, 8), (32, 64, 4), (64, 64, 8), (64, 32, 4), (128, 32, 8), (256, 32, 8), (128, 16, 4)]


def _time(call, quantiles=None) -> list[float]:
    """ms per call, over 10 calls after 2 (the autotuner's benchmark; its default takes 100 ms)."""
    if INTERPRETED:  # one shape fits (_fitting): nothing to compare
        return [0.0] * 3
    for _ in range(2):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        call()
    end.record()
    end.synchronize()  # deliberate: the tuning runs once per shape, in warm-up
    ms = start.elapsed_time(end) / 10
    return [ms, ms, ms]


def _fitting(configs, named_args, **kwargs):
    """Tiles no wider than the channels (rounded up to a power of two, at least 16). In the
    interpreter, whose cost is per program, the one tile of TILE elements as wide as that."""
    if INTERPRETED:
        return [c for c in configs if c.kwargs["BC"] == min(triton.next_power_of_2(named_args["C"]), 128)]
    widest = max(16, triton.next_power_of_2(named_args["C"]))
    return [c for c in configs if c.kwargs["BC"] <= widest]


def tuned(fn):
    """fn autotuned over SHAPES, keyed by frames, channels and row class."""
    shapes = [(TILE // 2**i, 2**i, 4) for i in range(8)] if INTERPRETED else SHAPES
    configs = [triton.Config({"BT": bt, "BC": bc}, num_warps=w) for bt, bc, w in shapes]
    return triton.autotune(configs, key=["T", "C", "ROW_CLASS"], prune_configs_by={"early_config_prune": _fitting},
                           do_bench=_time)(fn)


def grid(frames: int, channels: int, rows: int):
    return lambda meta: (triton.cdiv(frames, meta["BT"]), triton.cdiv(channels, meta["BC"]), rows)


def row_class(rows: int) -> int:
    return triton.next_power_of_2(rows)


@triton.jit
def _snake(v, alpha):
    s = tl.sin(alpha * v)
    return v + (1.0 / (alpha + 1e-9)) * (s * s)


@triton.jit
def _tile(T, C, BT: tl.constexpr, BC: tl.constexpr):
    """This program's frames [BT, 1] and channels [1, BC], their mask, and its row."""
    t = tl.program_id(0) * BT + tl.arange(0, BT)[:, None]
    c = tl.program_id(1) * BC + tl.arange(0, BC)[None, :]
    return t, c, (t < T) & (c < C), tl.program_id(2)


@triton.jit
def _depthwise(full, weight, bias, t, c, mask, r, T, C, CTX: tl.constexpr, K: tl.constexpr, DILATION: tl.constexpr,
               BT: tl.constexpr, BC: tl.constexpr):
    """The dilated depthwise convolution of `full` at a [BT, BC] tile of frames t and channels c,
    accumulated in float32 from the bias."""
    cmask = c < C
    base = full + (r * (CTX + T)).to(tl.int64) * C
    acc = tl.load(bias + c, mask=cmask, other=0.0).to(tl.float32) + tl.zeros((BT, BC), tl.float32)
    for k in tl.static_range(K):
        w = tl.load(weight + c * K + k, mask=cmask, other=0.0)
        acc += w * tl.load(base + (t + k * DILATION) * C + c, mask=mask, other=0.0)
    return acc


@tuned
@triton.jit(do_not_specialize=["ROW_CLASS"])
def snake_context_kernel(x, full, root, rows, offset, root_stride, shift1, shift2, shift3, scale, bias, alpha,
                         T, C, ROW_CLASS, CTX: tl.constexpr, SHIFTS: tl.constexpr, AFFINE: tl.constexpr,
                         SNAKE: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    q, c, mask, r = _tile(CTX + T, C, BT, BC)
    cmask = c < C
    from_state = q < CTX
    row = tl.load(rows + r).to(tl.int64)
    past = tl.load(root + row * root_stride + offset + q * C + c, mask=mask & from_state, other=0.0)
    v = tl.load(x + (r * T + q - CTX).to(tl.int64) * C + c, mask=mask & ~from_state, other=0.0).to(tl.float32)
    if SHIFTS >= 1:
        v += tl.load(shift1 + c, mask=cmask, other=0.0)
    if SHIFTS >= 2:
        v += tl.load(shift2 + c, mask=cmask, other=0.0)
    if SHIFTS >= 3:
        v += tl.load(shift3 + c, mask=cmask, other=0.0)
    if AFFINE:
        v = v * tl.load(scale + c, mask=cmask, other=1.0) + tl.load(bias + c, mask=cmask, other=0.0)
    if SNAKE:
        v = _snake(v, tl.load(alpha + c, mask=cmask, other=1.0))
    out = tl.where(from_state, past.to(tl.float32), v)
    tl.store(full + (r * (CTX + T) + q).to(tl.int64) * C + c, out, mask=mask)


@tuned
@triton.jit(do_not_specialize=["ROW_CLASS"])
def depthwise_kernel(full, weight, bias, alpha, out, T, C, ROW_CLASS, CTX: tl.constexpr, K: tl.constexpr,
                     DILATION: tl.constexpr, SNAKE: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    t, c, mask, r = _tile(T, C, BT, BC)
    cmask = c < C
    acc = _depthwise(full, weight, bias, t, c, mask, r, T, C, CTX, K, DILATION, BT, BC)
    if SNAKE:
        acc = _snake(acc, tl.load(alpha + c, mask=cmask, other=1.0))
    tl.store(out + (r * T + t).to(tl.int64) * C + c, acc, mask=mask)


def _fitting_rows(configs, named_args, **kwargs):
    """In the interpreter, whose cost is per program, one tile of 8 TILE elements."""
    return [c for c in configs if c.kwargs["BT"] == max(16, 8 * TILE // kwargs["CP"])] if INTERPRETED else configs


@triton.autotune([triton.Config({"BT": bt}, num_warps=w) for bt, w in
                  ([(2**i, 4) for i in range(4, 15)] if INTERPRETED else ((32, 4), (64, 4), (64, 8), (128, 8)))],
                 key=["T", "C", "ROW_CLASS"], prune_configs_by={"early_config_prune": _fitting_rows}, do_bench=_time,
                 restore_value=["x"])  # it adds to x in place: each timed run must start from the same x
@triton.jit(do_not_specialize=["ROW_CLASS"])
def residual_kernel(full, weight, bias, alpha, pointwise, x, T, C, ROW_CLASS, CTX: tl.constexpr, K: tl.constexpr,
                    DILATION: tl.constexpr, CP: tl.constexpr, PRECISION: tl.constexpr, BT: tl.constexpr):
    """x += snake(depthwise(full)) @ pointwise^T in place, for C <= CP channels in one tile: the
    unit's hidden activation never leaves the SM."""
    t, c, mask, r = _tile(T, C, BT, CP)
    cmask = c < C
    acc = _depthwise(full, weight, bias, t, c, mask, r, T, C, CTX, K, DILATION, BT, CP)
    h = tl.where(mask, _snake(acc, tl.load(alpha + c, mask=cmask, other=1.0)), 0.0)
    cin = tl.arange(0, CP)[:, None]
    # pointwise [Cout, Cin, 1]: the [Cin, Cout] operand is its transpose.
    w = tl.load(pointwise + c * C + cin, mask=(cin < C) & cmask, other=0.0)
    y = tl.dot(h, w, input_precision=PRECISION)
    at = x + (r * T + t).to(tl.int64) * C + c
    tl.store(at, tl.load(at, mask=mask, other=0.0) + y, mask=mask)


@tuned
@triton.jit(do_not_specialize=["ROW_CLASS"])
def overlap_add_kernel(products, bias, out, T, C, ROW_CLASS, STRIDE: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    f, c, mask, r = _tile(T * STRIDE, C, BT, BC)
    j, m = f // STRIDE, f % STRIDE
    # products [rows, 1 + T, C, 2 STRIDE]: frame j's output mixes input j (first half of its taps)
    # and input j - 1 (second half); input 0 of a chunk is the context frame.
    frame = (r * (1 + T) + j).to(tl.int64) * C + c
    current = tl.load(products + (frame + C) * (2 * STRIDE) + m, mask=mask, other=0.0)
    previous = tl.load(products + frame * (2 * STRIDE) + STRIDE + m, mask=mask, other=0.0)
    value = current + previous + tl.load(bias + c, mask=c < C, other=0.0)
    tl.store(out + (r * T * STRIDE + f).to(tl.int64) * C + c, value, mask=mask)


@triton.jit
def output_conv_kernel(full, weight, bias, out, T, C, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    t, c, mask, r = _tile(T, C, BT, BC)
    base = full + (r * (K - 1 + T)).to(tl.int64) * C
    acc = tl.zeros((BT, BC), tl.float32)
    for k in tl.static_range(K):
        w = tl.load(weight + c * K + k, mask=c < C, other=0.0)
        acc += w * tl.load(base + (t + k) * C + c, mask=mask, other=0.0)
    y = tl.sum(acc, axis=1) + tl.load(bias)
    # tanh(y) = 1 - 2 / (exp(2y) + 1): exact at both saturations, no overflow to NaN.
    y = 1.0 - 2.0 / (tl.exp(2.0 * y) + 1.0)
    frames = tl.program_id(0) * BT + tl.arange(0, BT)
    tl.store(out + r * T + frames, y, mask=frames < T)
