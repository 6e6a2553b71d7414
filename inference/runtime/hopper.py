"""A transformer layer's products on Hopper's own GEMMs with their epilogues (QuACK, built on
CUTLASS's Python DSL: wgmma, TMA, warp-specialized), for the GPUs and installs that have them.

What it saves over cuBLAS plus compiled elementwise kernels is passes over memory between the
products: the SiLU gate is applied to the gate and up tiles in the gate/up product's epilogue (the
[tokens, 2 x ffn] product is never written), and the last residual is added in the down product's
epilogue. RoPE may run as QuACK's rotary kernel, in place on the QKV product's output (a choice of
its own: it measured faster than the compiled pass from 128 rows on, slower at 64). The norm
stays a compiled kernel: the official model rounds the normalized row before multiplying the
weight, which a GEMM prologue would not, and QuACK's RMSNorm kernel measured no faster.

Optional (requirements-gpu.txt); `unavailable()` says why it cannot be used here, and the engine
then keeps the plain path. QuACK compiles and tunes a kernel per shape family on its first call:
the engine's warm-up makes that call, outside any request and any graph capture.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F

from ..model.transformer import rms_norm


@functools.cache
def unavailable(device: torch.device | None = None) -> str | None:
    """None when the Hopper kernels can run on `device`, else the reason they cannot."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        return f"compute capability {major}.{minor}: the kernels are built for Hopper (9.0)"
    try:
        import quack.gemm_interface  # noqa: F401
    except Exception as exc:  # missing, or the DSL's compiled parts do not load on this install
        return f"QuACK not importable ({type(exc).__name__}: {exc}); see requirements-gpu.txt"
    return None


def _pre_norm(x, norm_weight, eps: float):  # its own code object: its own compiled graphs
    return rms_norm(x, norm_weight, eps)


@functools.cache
def attention_inputs_with(compiled: Callable):
    """`transformer.attention_inputs`' contract with RoPE applied by QuACK's rotary kernel in
    place on the QKV product's output; q, k and v are views of it, as v is on the other paths."""
    from quack.rotary import apply_rotary_emb_qkv_

    norm = compiled(_pre_norm, 0)

    def attention_inputs(x, norm_weight, qkv_weight, cos, sin, eps: float, heads: tuple[int, int, int]):
        num_heads, num_kv, head_dim = heads
        b, t, _ = x.shape
        qkv = F.linear(norm(x, norm_weight, eps), qkv_weight).view(b, t, num_heads + 2 * num_kv, head_dim)
        if cos is not None:
            half = head_dim // 2  # the tables hold each angle twice, once per half; the kernel takes one
            apply_rotary_emb_qkv_(qkv, cos[:, :half], sin[:, :half], num_heads_q=num_heads)
        return qkv.transpose(1, 2).split((num_heads, num_kv, num_kv), dim=1)

    return attention_inputs


def _residual_norm(x, update, residual_scale: float, norm_weight, eps: float):
    x = x + update * residual_scale
    return x, rms_norm(x, norm_weight, eps)


@functools.cache
def layer_output_with(compiled: Callable):
    """`transformer.layer_output`'s contract with the gate/up product (its SiLU gate in the
    epilogue) and the down product (its residual in the epilogue) on Hopper GEMMs; the output
    projection stays on cuBLAS beside the residual and norm, compiled by `compiled(fn, *batch_args)`
    (compiled.static_compiled, the one place that compiles). The output projection's residual in a
    Hopper epilogue was measured too and made the DiT call no faster at any size (H200, 2026-11-28,
    docs/benchmarks.md "The LocDiT on Hopper kernels"; the variants' code: commit 9df0a40)."""
    from quack.gemm_interface import gemm_act, gemm_add

    residual_norm = compiled(_residual_norm, 0, 1)

    def layer_output(x, attn, o_weight, norm_weight, gate_up_weight, down_weight, eps: float,
                     residual_scale: float):
        b, heads, t, d = attn.shape
        rows = b * t
        attended = attn.transpose(1, 2).reshape(rows, heads * d)  # free after the short kernel
        x, normed = residual_norm(x, F.linear(attended, o_weight).view(b, t, -1),
                                  residual_scale, norm_weight, eps)
        _, hidden = gemm_act(normed.view(rows, -1), gate_up_weight.T, activation="swiglu", store_preact=False,
                             concat_layout=("B",))
        return gemm_add(hidden, down_weight.T, x.reshape(rows, -1), alpha=residual_scale).view(b, t, -1)

    return layer_output
