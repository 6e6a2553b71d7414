#!/usr/bin/env python3
"""The LocDiT's products on Hopper GEMMs with epilogues (QuACK, inference/runtime/hopper.py)
against cuBLAS plus compiled elementwise kernels (the engine), at 64, 128 and 256 rows.

    python -m bench.lab.hopper_kernels [--rows 64 128 256] [--table-rows 128]

1. Each product alone, CUDA-graph replay: cuBLAS F.linear against QuACK's plain GEMM; the gate/up
   product with its SiLU gate (cuBLAS + a compiled gate against one gated GEMM); the down product
   with its residual (cuBLAS + a compiled add against GEMM + residual in the epilogue).
2. The passes between the products: the pre-norm (a compiled kernel against QuACK's RMSNorm) and
   RoPE on q and k (compiled against QuACK's rotary, in place on the QKV product's output).
3. The whole DiT call (the guided pair, 2 x rows sequences of 11 positions) with the gate/up and
   down products on QuACK, and with RoPE on QuACK too (the engine's two Hopper choices), against
   the engine's cuBLAS path: its FLOP rate and its error against the same call in float32 (bf16
   both). The other sets of parts in docs/benchmarks.md (the output projection's residual too,
   each product alone) were measured with this script at commit 9df0a40.
Needs the optional kernels (requirements-gpu.txt); QuACK compiles and tunes on each first call.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import time
import traceback

import torch
import torch.nn.functional as F

from bench.lab.dit_rate import flops, gemm_rates, kernel_table, positions
from bench.lab.profile_step import capture, replay_ms
from inference.model.config import ModelConfig
from inference.model.locdit import LocDiT
from inference.model.transformer import apply_rope, rms_norm, rope_tables
from inference.runtime import hopper
from inference.runtime.compiled import compiled_ops, hopper_ops

def timed(fn, n=50) -> tuple[float, float]:
    """(first call's seconds, graph replay ms)."""
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    return first, replay_ms(capture(fn).replay, n)


def products(cfg: ModelConfig, rows: list[int]) -> None:
    from quack.gemm_interface import gemm, gemm_act, gemm_add

    h, f = cfg.local_dit.hidden_size, cfg.local_dit.intermediate_size
    qkv = (cfg.local_dit.num_heads + 2 * cfg.local_dit.num_kv_heads) * cfg.local_dit.head_dim
    bf = dict(device="cuda", dtype=torch.bfloat16)
    gate = torch.compile(lambda gu: F.silu(gu[:, :f]) * gu[:, f:], fullgraph=True)
    add = torch.compile(lambda x, y: x + y * 0.4, fullgraph=True)
    for b in rows:
        m = 2 * b * positions(cfg)
        for name, (k, n) in {"qkv": (h, qkv), "o": (cfg.local_dit.num_heads * cfg.local_dit.head_dim, h),
                             "gate_up": (h, 2 * f), "down": (f, h)}.items():
            x, w = torch.randn(m, k, **bf), torch.randn(n, k, **bf) / k ** 0.5
            _, cublas = timed(lambda: F.linear(x, w))
            first, mine = timed(lambda: gemm(x, w.T))
            err = ((gemm(x, w.T).float() - F.linear(x, w).float()).norm() / F.linear(x, w).float().norm()).item()
            print(f"  rows {b} {name} {m}x{k}->{n}: cuBLAS {cublas * 1e3:.1f} us ({2 * m * k * n / cublas / 1e9:.0f} "
                  f"TFLOP/s), QuACK {mine * 1e3:.1f} us ({2 * m * k * n / mine / 1e9:.0f}), first call {first:.1f} s, "
                  f"difference {err:.1e}")
        x, w = torch.randn(m, h, **bf), torch.randn(2 * f, h, **bf) / h ** 0.5
        _, plain = timed(lambda: gate(F.linear(x, w)))
        first, fused = timed(lambda: gemm_act(x, w.T, activation="swiglu", store_preact=False, concat_layout=("B",))[1])
        ref = gate(F.linear(x.float(), w.float()))
        errs = [((out.float() - ref).norm() / ref.norm()).item() for out in
                (gate(F.linear(x, w)), gemm_act(x, w.T, activation="swiglu", store_preact=False, concat_layout=("B",))[1])]
        print(f"  rows {b} gate/up + SiLU gate: cuBLAS + compiled {plain * 1e3:.1f} us, gated GEMM {fused * 1e3:.1f} us "
              f"(first {first:.1f} s); error against float32 {errs[0]:.2e} / {errs[1]:.2e}")
        x, w, r = torch.randn(m, f, **bf), torch.randn(h, f, **bf) / f ** 0.5, torch.randn(m, h, **bf)
        _, plain = timed(lambda: add(r, F.linear(x, w)))
        first, fused = timed(lambda: gemm_add(x, w.T, r, alpha=0.4))
        print(f"  rows {b} down + residual: cuBLAS + compiled {plain * 1e3:.1f} us, GEMM with residual {fused * 1e3:.1f} us "
              f"(first {first:.1f} s)")


def passes(cfg: ModelConfig, rows: list[int]) -> None:
    """The norm and RoPE passes, each as the engine runs it (inductor's kernel) and as QuACK's."""
    from quack.rmsnorm import rmsnorm_fwd
    from quack.rotary import apply_rotary_emb_qkv_

    dit = cfg.local_dit
    h, heads, kv, d = dit.hidden_size, dit.num_heads, dit.num_kv_heads, dit.head_dim
    bf = dict(device="cuda", dtype=torch.bfloat16)
    norm = torch.compile(rms_norm, fullgraph=True)

    @torch.compile(fullgraph=True)
    def rope(qkv, cos, sin):  # as attention_inputs does it: q and k out of the product's [B, T, heads, D]
        q, k, _ = qkv.transpose(1, 2).split((heads, kv, kv), dim=1)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    cos, sin = (t[:positions(cfg)].cuda() for t in rope_tables(dit.rope, d)) if dit.rope else (None, None)
    for b in rows:
        m = 2 * b * positions(cfg)
        x, w = torch.randn(m, h, **bf), 1 + 0.1 * torch.randn(h, **bf)
        want = rms_norm(x.float(), w.float(), 1e-5)
        _, plain = timed(lambda: norm(x, w, 1e-5))
        first, mine = timed(lambda: rmsnorm_fwd(x, w, eps=1e-5)[0])
        errs = [((out.float() - want).norm() / want.norm()).item() for out in (norm(x, w, 1e-5), rmsnorm_fwd(x, w, eps=1e-5)[0])]
        print(f"  rows {b} norm {m}x{h}: compiled {plain * 1e3:.1f} us, QuACK {mine * 1e3:.1f} us (first {first:.1f} s); "
              f"error against float32 {errs[0]:.2e} / {errs[1]:.2e}")
        if cos is None:
            continue
        qkv = torch.randn(2 * b, positions(cfg), heads + 2 * kv, d, **bf)
        half = d // 2  # the tables repeat each angle for both halves; QuACK takes one copy
        scratch = qkv.clone()
        _, plain = timed(lambda: rope(qkv, cos, sin))
        first, mine = timed(lambda: apply_rotary_emb_qkv_(scratch, cos[:, :half], sin[:, :half], num_heads_q=heads))
        fresh = qkv.clone()
        apply_rotary_emb_qkv_(fresh, cos[:, :half], sin[:, :half], num_heads_q=heads)
        ours = rope(qkv, cos, sin)
        theirs = fresh.transpose(1, 2).split((heads, kv, kv), dim=1)[:2]
        diff = max((a.float() - b_.float()).abs().max().item() for a, b_ in zip(ours, theirs))
        print(f"  rows {b} RoPE on q and k: compiled {plain * 1e3:.1f} us, QuACK in place {mine * 1e3:.1f} us "
              f"(first {first:.1f} s); largest difference {diff:.1e}")


def whole_call(dit: LocDiT, reference: LocDiT, cfg: ModelConfig, args) -> None:
    engine = compiled_ops()
    keep = cfg.patch_size
    for name, ops in (("engine (cuBLAS + compiled)", engine), ("QuACK gate/up and down", hopper_ops(engine)),
                      ("QuACK gate/up, down and RoPE", hopper_ops(engine, rope=True))):
        try:
            for b in args.rows:
                tokens = torch.randn(2 * b, positions(cfg), cfg.local_dit.hidden_size, device="cuda",
                                     dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(b))
                call = lambda: dit.decoder(tokens, causal=False, ops=ops, keep=keep)  # noqa: E731
                first, ms = timed(call)
                want = reference.decoder(tokens.float(), causal=False, keep=keep)
                error = ((call().float() - want).norm() / want.norm()).item()
                rate = flops(dit, tokens, keep) / (ms * 1e-3) / 1e12
                print(f"{name:32s} rows={b:4d}: {ms:.3f} ms per DiT call, {rate:6.1f} TFLOP/s, error against float32 "
                      f"{error:.3e} (first call {first:.1f} s)")
                if b == args.table_rows:
                    kernel_table(call, args.top)
        except Exception:  # one variant failing leaves the others' figures
            print(f"{name}: FAILED")
            traceback.print_exc()


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--table-rows", type=int, default=128)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--skip-products", action="store_true")
    ap.add_argument("--skip-whole", action="store_true", help="the products and passes only")
    args = ap.parse_args()
    print(f"Hopper kernels: {torch.cuda.get_device_name()}, torch {torch.__version__}, {datetime.date.today()}")
    reason = hopper.unavailable()
    if reason:
        raise SystemExit(f"QuACK cannot run here: {reason}")
    import quack
    import cutlass
    print(f"quack {quack.__version__}, cutlass-dsl {getattr(cutlass, '__version__', '?')}")
    cfg = ModelConfig.from_json("bench/voxcpm2_config.json")
    with torch.device("cuda"):
        dit = LocDiT(cfg.local_dit, cfg.feat_dim).to(torch.bfloat16).eval()
    reference = copy.deepcopy(dit).float()
    dit.decoder.fuse_projections()
    reference.decoder.fuse_projections()
    gemm_rates(cfg, args.rows)
    if not args.skip_products:
        try:
            products(cfg, args.rows)
        except Exception:
            traceback.print_exc()
    try:
        passes(cfg, args.rows)
    except Exception:
        traceback.print_exc()
    if not args.skip_whole:
        whole_call(dit, reference, cfg, args)


if __name__ == "__main__":
    main()
