#!/usr/bin/env python3
"""The fused layer kernels (model/layer_kernels.py) against the compiled cuBLAS layers, at small
batch buckets: the LM advance and one guided Euler step as CUDA graphs (kernels, replay ms,
relative error against the plain functions), each fused product's achieved bandwidth at one token
against F.linear's, and where one call's GPU time goes.

    python -m bench.lab.fused_layers [--buckets 1 2 4 8 16 32] [--limits 0 32 64] [--top 12]

Published architecture, random bf16 weights; limit 0 is the engine without the fused kernels.
"""
from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.nn.functional as F

from bench.lab.kernel_times import by_kernel, print_top
from bench.lab.profile_step import capture, replay_ms
from inference.model import layer_kernels
from inference.model.config import ModelConfig
from inference.model.locdit import euler_update
from inference.model.transformer import PLAIN_OPS
from inference.model.voxcpm2 import VoxCPM2
from inference.runtime.compiled import compiled_ops, step_functions

SPAN = 256


def inputs(model: VoxCPM2, rows: int, seed: int = 0):
    cfg, gen = model.cfg, torch.Generator("cuda").manual_seed(seed)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    p, d, h = cfg.patch_size, cfg.feat_dim, cfg.local_dit.hidden_size
    return dict(patch=torch.randn(rows, p, d, generator=gen, **bf),
                position=torch.randint(20, SPAN - 1, (rows,), device="cuda", generator=gen),
                x=torch.randn(rows, p, d, generator=gen, **bf), mu=torch.randn(2 * rows, 2 * h, generator=gen, **bf),
                cond=torch.randn(2 * rows, p, d, generator=gen, **bf), time=torch.randn(rows, h, generator=gen, **bf),
                dt=torch.full((rows,), 0.1, **bf), cfg=torch.full((rows,), 2.0, device="cuda"))


def parts(model: VoxCPM2, fns, ops, v: dict, b: int):
    def advance():
        with fns.scope:
            return model.advance(v["patch"][:b], v["position"][:b], SPAN, ops).residual_hidden

    def euler():
        with fns.scope:
            return euler_update(model.dit, v["x"][:b], v["mu"][: 2 * b], v["cond"][: 2 * b], v["time"][:b],
                                v["dt"][:b], v["cfg"][:b], ops, fns.guided_euler)
    return {"lm_advance": advance, "euler_step": euler}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bandwidth(model: VoxCPM2) -> None:
    """Each fused product of one LM layer at one token against F.linear alone (same weights)."""
    layer = model.base_lm.layers[0]
    x = torch.randn(1, 1, model.cfg.base_lm.hidden_size, device="cuda", dtype=torch.bfloat16)
    gate = torch.randn(1, model.cfg.base_lm.intermediate_size, device="cuda", dtype=torch.bfloat16)
    attn = torch.randn(1, model.cfg.base_lm.num_heads * model.cfg.base_lm.head_dim, device="cuda", dtype=torch.bfloat16)
    lk, n = layer_kernels, layer.input_layernorm.weight
    cases = [
        ("norm + QKV + RoPE", layer.qkv_weight,
         lambda: lk.launch(x, layer.qkv_weight, layer.qkv_weight.shape[0], lk.PAIRS_ROPE, n, 1e-5,
                            rope=(torch.ones(1, 128, device="cuda"), torch.zeros(1, 128, device="cuda")),
                            rope_heads=18, half=64), lambda: F.linear(x, layer.qkv_weight)),
        ("o + residual", layer.self_attn.o_proj.weight,
         lambda: lk.launch(attn, layer.self_attn.o_proj.weight, x.shape[-1], lk.PLAIN, residual=x, scale=0.3),
         lambda: F.linear(attn, layer.self_attn.o_proj.weight)),
        ("norm + gate/up + SiLU", layer.gate_up_weight,
         lambda: lk.launch(x, layer.gate_up_weight, layer.gate_up_weight.shape[0] // 2, lk.PAIRS_GATED, n, 1e-5),
         lambda: F.linear(x, layer.gate_up_weight)),
        ("down + residual", layer.mlp.down_proj.weight,
         lambda: lk.launch(gate, layer.mlp.down_proj.weight, x.shape[-1], lk.PLAIN, residual=x, scale=0.3),
         lambda: F.linear(gate, layer.mlp.down_proj.weight)),
    ]
    for name, weight, fused, linear in cases:
        fused(), linear()
        mb = weight.numel() * weight.element_size() / 1e6
        tf, tl = replay_ms(capture(fused).replay, 200), replay_ms(capture(linear).replay, 200)
        print(f"  {name:24s} {mb:5.1f} MB: fused {tf * 1e3:6.1f} us ({mb / tf / 1e3:5.2f} TB/s), "
              f"F.linear alone {tl * 1e3:6.1f} us ({mb / tl / 1e3:5.2f} TB/s)")


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buckets", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--limits", type=int, nargs="+", default=[0, 32, 64])
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    cfg = ModelConfig.from_json("bench/voxcpm2_config.json")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = VoxCPM2(cfg).to(torch.bfloat16).eval()
    model.fuse_projections()
    model.allocate_caches(SPAN, max(args.buckets))
    print(f"fused layers: {torch.cuda.get_device_name()}, torch {torch.__version__}, {datetime.date.today()}")
    print("one LM layer's products at one token:")
    bandwidth(model)
    fns = step_functions(True)
    plain = PLAIN_OPS
    v = inputs(model, max(args.buckets))
    results = {}
    for limit in args.limits:
        ops = compiled_ops(fused_tokens=limit)
        for b in args.buckets:
            for name, fn in parts(model, fns, ops, v, b).items():
                t = time.perf_counter()
                out = fn()
                first = time.perf_counter() - t
                want = parts(model, fns, plain, v, b)[name]()
                graph = capture(fn)
                ms = replay_ms(graph.replay, 50)
                spent = by_kernel(fn)  # eager: the same kernels the graph holds
                kernels = sum(c for c, _ in spent.values())
                results[(limit, b, name)] = ms
                base = results.get((args.limits[0], b, name))
                print(f"limit {limit:3d} rows {b:3d} {name:10s}: {kernels:4d} kernels, {ms:.3f} ms"
                      + (f" ({base / ms:.2f}x limit {args.limits[0]})" if base and limit != args.limits[0] else "")
                      + f", relative error {relative(out, want):.1e} vs plain (first call {first:.1f} s)")
                if b == 1 and args.top:
                    print_top(spent, args.top, indent="      ")


if __name__ == "__main__":
    main()
