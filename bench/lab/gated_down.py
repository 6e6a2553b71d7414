#!/usr/bin/env python3
"""The LocDiT MLP's second half as one Triton product, against what the engine runs now.

    python -m bench.lab.gated_down [--rows 1 64 128]

The engine's compiled layer_output makes three kernels of `x + down(silu(gate) * up) * scale`: a
pass that reads the gate/up product's output (tokens x 8192 bf16) and writes the gated half, the
down product (cuBLAS), and a residual pass. Here one kernel loads gate and up tiles, gates them in
registers as it feeds the product (as inductor's pass does: float32, rounded to bf16 once), and adds
the residual as it stores: the gated tensor never goes to memory. Graph replay per call (the same
inputs), and the relative error of each against the float32 result.
"""
from __future__ import annotations

import argparse
import datetime

import torch
import triton
import triton.language as tl

from bench.lab.profile_step import capture, replay_ms


def configs():
    out = []
    for bm, bn, bk, stages, warps in [(128, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 64, 64, 4, 4),
                                      (64, 128, 64, 4, 4), (128, 256, 64, 3, 8), (64, 64, 128, 3, 4),
                                      (128, 128, 128, 3, 8), (64, 128, 128, 3, 4), (128, 64, 128, 3, 8)]:
        out.append(triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=stages, num_warps=warps))
    return out


@triton.autotune(configs=configs(), key=["M", "N", "K"])
@triton.jit
def gated_down_kernel(gu, w, x, out, M, N, K, scale, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      GROUP: tl.constexpr):
    """out[M, N] = x + bf16(silu(g) * u @ w.T) * scale, with gu = [g | u] of [M, 2K] and w of [N, K]."""
    pid = tl.program_id(0)
    blocks_m, blocks_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * blocks_n)
    first_m = group * GROUP
    size = min(blocks_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * blocks_n)) % size
    pid_n = (pid % (GROUP * blocks_n)) // size
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    row_ok = rm[:, None] < M
    g_ptr = gu + rm[:, None].to(tl.int64) * (2 * K) + rk[None, :]
    w_ptr = w + rn[None, :].to(tl.int64) * K + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        g = tl.load(g_ptr, mask=row_ok, other=0.0).to(tl.float32)
        u = tl.load(g_ptr + K, mask=row_ok, other=0.0).to(tl.float32)
        a = (g * tl.sigmoid(g) * u).to(tl.bfloat16)
        acc = tl.dot(a, tl.load(w_ptr), acc)
        g_ptr += BK
        w_ptr += BK
    y = acc.to(tl.bfloat16).to(tl.float32)
    ok = row_ok & (rn[None, :] < N)
    where = rm[:, None].to(tl.int64) * N + rn[None, :]
    res = tl.load(x + where, mask=ok, other=0.0).to(tl.float32)
    tl.store(out + where, (res + y * scale).to(tl.bfloat16), mask=ok)


def gated_down(gu: torch.Tensor, w: torch.Tensor, x: torch.Tensor, scale: float) -> torch.Tensor:
    M, N, K = gu.shape[0], w.shape[0], w.shape[1]
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    gated_down_kernel[grid](gu, w, x, out, M, N, K, scale)
    return out


def reference(gu, w, x, scale):
    g, u = gu.chunk(2, dim=-1)
    return x + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, w) * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 32, 64, 128])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=4096)
    args = ap.parse_args()
    print(f"# gated down product, {torch.cuda.get_device_name()}, {datetime.date.today()}, torch {torch.__version__}, "
          f"triton {triton.__version__}")
    compiled = torch.compile(reference, fullgraph=True, dynamic=False)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    torch.manual_seed(0)
    w = torch.randn(args.hidden, args.ffn, **bf) / args.ffn ** 0.5
    for rows in args.rows:
        tokens = 2 * rows * 11
        gu, x = torch.randn(tokens, 2 * args.ffn, **bf), torch.randn(tokens, args.hidden, **bf)
        exact = reference(gu.float(), w.float(), x.float(), 0.5)
        results = {}
        for name, fn in (("engine now (compiled: pass, cuBLAS, pass)", compiled), ("one Triton kernel", gated_down)):
            out = fn(gu, w, x, 0.5)
            err = ((out.float() - exact).norm() / exact.norm()).item()
            results[name] = replay_ms(capture(lambda fn=fn: fn(gu, w, x, 0.5)).replay, 100)
            flop = 2 * tokens * args.ffn * args.hidden
            print(f"  rows {rows} ({tokens} tokens): {name}: {results[name] * 1e3:.1f} us, "
                  f"{flop / (results[name] * 1e-3) / 1e12:.0f} TFLOP/s of the product, rel. error {err:.2e}")
        if hasattr(gated_down_kernel, "best_config"):
            print(f"    chosen: {gated_down_kernel.best_config}")
        base, fused = results.values()
        print(f"    one kernel / engine now: {fused / base:.3f}")


if __name__ == "__main__":
    with torch.inference_mode():
        main()
