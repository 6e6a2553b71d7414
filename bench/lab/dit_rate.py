#!/usr/bin/env python3
"""The LocDiT alone at 32 to 128 rows (2 x rows sequences of 11 tokens: the guided pair): graph
replay time and achieved TFLOP/s of one call per variant, and where one call's GPU time goes.

    python -m bench.lab.dit_rate [--rows 32 64 128] [--autotune] [--table-rows 128] [--only-engine]

Variants: the engine's compiled layer functions with flash attention over every position (the
engine before), the same with the last layer on the patch's positions only (Transformer.forward's
keep=), the same with model/short_attention.py's kernel in place of flash (the engine now), and
with --autotune that one compiled with inductor's max-autotune (Triton GEMM templates tried
against cuBLAS per shape). Published architecture, random bf16 weights; each variant's first row
also gives its relative error against the plain functions.
(Tried and dropped: LocDiT's 11-position attention as compiled plain float32 products instead of
the flash kernel: 23% slower at 64 rows on an H100, figures in docs/benchmarks.md.)
"""
from __future__ import annotations

import argparse
import datetime
import time
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from bench.lab.kernel_times import by_kernel, print_top
from bench.lab.profile_step import capture, replay_ms
from inference.model import transformer as T
from inference.model.config import ModelConfig
from inference.model.locdit import LocDiT
from inference.runtime.compiled import batch_dynamic, compiled_ops


def autotuned_ops() -> T.LayerOps:
    tuned = dict(fullgraph=True, dynamic=False, mode="max-autotune-no-cudagraphs")
    return T.LayerOps(batch_dynamic(torch.compile(T.attention_inputs, **tuned), 0, 3, 4),
                      batch_dynamic(torch.compile(T.layer_output, **tuned), 0, 1),
                      T.decode_attention, batch_dynamic(torch.compile(T.rms_norm, **tuned), 0),
                      compiled_ops().sequence_attention)


def positions(cfg: ModelConfig) -> int:
    """Positions of one LocDiT sequence: 2 condition tokens, the time token, the previous patch, the noisy one."""
    return 3 + 2 * cfg.patch_size


def flops(dit: LocDiT, tokens: torch.Tensor, keep) -> float:
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        dit.decoder(tokens, causal=False, keep=keep)
    return float(counter.get_total_flops())


def kernel_table(fn, top: int) -> None:
    spent = by_kernel(fn)
    total = sum(ms for _, ms in spent.values())
    gemm = sum(ms for name, (_, ms) in spent.items() if "gemm" in name.lower() or "nvjet" in name or "mm" in name[:12])
    print(f"    kernels {sum(c for c, _ in spent.values())}, {total:.3f} ms of GPU time, of which GEMM-like {gemm:.3f} ms")
    print_top(spent, top)


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--autotune", action="store_true")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--table-rows", type=int, default=64, help="the bucket whose kernels are listed")
    ap.add_argument("--only-engine", action="store_true", help="the engine's variant alone, and the GEMMs")
    args = ap.parse_args()
    cfg = ModelConfig.from_json("bench/voxcpm2_config.json")
    with torch.device("cuda"):
        dit = LocDiT(cfg.local_dit, cfg.feat_dim).to(torch.bfloat16).eval()
    dit.decoder.fuse_projections()
    print(f"LocDiT alone: {torch.cuda.get_device_name()}, torch {torch.__version__}, {datetime.date.today()}")
    flash = compiled_ops(short_kernel=False)
    variants = [("flash, all positions", flash, None), ("flash, keep patch", flash, cfg.patch_size),
                ("short kernel, keep patch", compiled_ops(), cfg.patch_size)]
    if args.autotune:
        variants.append(("keep patch, max-autotune", autotuned_ops(), cfg.patch_size))
    if args.only_engine:
        variants = variants[2:3]
        gemm_rates(cfg, args.rows)
    for name, ops, keep in variants:
        try:
            time_variant(dit, cfg, name, ops, keep, args)
        except Exception:  # one variant failing leaves the others' figures
            print(f"{name}: FAILED")
            traceback.print_exc()


def gemm_rates(cfg: ModelConfig, rows: list[int]) -> None:
    """Each of a DiT layer's four products alone (F.linear, cuBLAS) at each bucket's token count
    (2 x rows sequences of 11 positions), and a large square product for the card's own rate."""
    h, f = cfg.local_dit.hidden_size, cfg.local_dit.intermediate_size
    qkv = (cfg.local_dit.num_heads + 2 * cfg.local_dit.num_kv_heads) * cfg.local_dit.head_dim
    shapes = {"qkv": (h, qkv), "o": (cfg.local_dit.num_heads * cfg.local_dit.head_dim, h), "gate_up": (h, 2 * f),
              "down": (f, h)}
    bf = dict(device="cuda", dtype=torch.bfloat16)
    big = torch.randn(8192, 8192, **bf)
    ms = replay_ms(capture(lambda: big @ big).replay, 20)
    print(f"  8192^3 product: {2 * 8192 ** 3 / (ms * 1e-3) / 1e12:.0f} TFLOP/s")
    for b in rows:
        tokens = 2 * b * positions(cfg)
        line = []
        for name, (k, n) in shapes.items():
            x, w = torch.randn(tokens, k, **bf), torch.randn(n, k, **bf)
            ms = replay_ms(capture(lambda x=x, w=w: F.linear(x, w)).replay, 50)
            line.append(f"{name} {tokens}x{k}->{n} {ms * 1e3:.0f} us {2 * tokens * k * n / (ms * 1e-3) / 1e12:.0f} TFLOP/s")
        print(f"  rows {b}: " + "; ".join(line))


def time_variant(dit: LocDiT, cfg: ModelConfig, name: str, ops: T.LayerOps, keep, args) -> None:
    reference = None
    for b in args.rows:
        tokens = torch.randn(2 * b, positions(cfg), cfg.local_dit.hidden_size, device="cuda",
                             dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(b))
        call = lambda: dit.decoder(tokens, causal=False, ops=ops, keep=keep)  # noqa: E731
        t = time.perf_counter()
        out = call()
        first = time.perf_counter() - t
        if reference is None:  # against the plain functions (SDPA's own choice of kernel), last positions
            reference = dit.decoder(tokens, causal=False)[:, -cfg.patch_size:].float()
            error = ((out[:, -cfg.patch_size:].float() - reference).norm() / reference.norm()).item()
        ms = replay_ms(capture(call).replay, 50)
        rate = flops(dit, tokens, keep) / (ms * 1e-3) / 1e12
        print(f"{name:26s} rows={b:4d}: {ms:.3f} ms per DiT call, {rate:6.1f} TFLOP/s (first call {first:.1f} s)"
              + (f", relative error {error:.1e} against the plain functions" if b == args.rows[0] else ""))
        if b == args.table_rows:
            kernel_table(call, args.top)


if __name__ == "__main__":
    main()
