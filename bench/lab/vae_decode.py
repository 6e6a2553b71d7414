#!/usr/bin/env python3
"""The VAE decoder alone, streaming one patch per call (4 latent frames -> 7680 samples) for 1 to
128 rows: the reference layers ("old") against the channels-last formulation of
inference/model/vae_stream.py ("new"), eager and compiled, each call captured in a CUDA graph and
replayed (torch.cuda.Event timing); then each one's accuracy against the float32 whole-sequence
decode, and new against old.

    python -m bench.lab.vae_decode --config bench/voxcpm2_config.json [--rows 1 8 32 64 128]

Published architecture, random weights (scaled so that activations stay O(1) and the output is
not saturated). One CUDA GPU; TF32 as the engine runs it (cuDNN's default, which the new GEMMs follow).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import time
import traceback

import torch
from torch import nn

from bench.lab.kernel_times import by_kernel, in_order, print_top
from inference.model import audio_vae
from inference.model.audio_vae import AudioVAE
from inference.model.config import ModelConfig
from inference.model.vae_stream import compiled, snake

VARIANTS = {
    "old-eager": "reference layers, eager",
    "old-fused-snake": "reference layers, compiled Snake (the engine before vae_stream)",
    "new-eager": "vae_stream formulation, eager",
    "new-compiled": "vae_stream formulation, torch.compile (the engine before the kernels)",
    "kernels": "Triton kernels + cuBLAS GEMMs, the head's and first block's products split (the engine now)",
    "kernels-split2": "the same, the first two blocks split",
    "kernels-split-all": "the same, every product split into 3 TF32 products",
    "kernels-tf32": "the same with plain TF32 products (the engine before)",
    "kernels-fused128": "the default, its 128-channel residual units as one kernel each (the engine before)",
    "kernels-fp32": "the same with TF32 off (every product in plain float32)",
}
ACCURACY_ROWS, ACCURACY_PATCHES = 8, 6


def random_weights(vae: AudioVAE, seed: int = 0) -> AudioVAE:
    """Random weights that keep every layer's activations O(1): convolutions at 1/sqrt(fan-in),
    residual branches and the output convolution at 0.3 of that, Snake alphas and sample-rate
    scales in [0.5, 1.5]. (The default init lets the residual stream grow to a saturated tanh.)"""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, module in vae.named_modules():
            if isinstance(module, nn.ConvTranspose1d):  # each output frame sums two taps per input channel
                fan_in = 2 * module.in_channels
            elif isinstance(module, nn.Conv1d):
                fan_in = module.in_channels // module.groups * module.kernel_size[0]
            else:
                continue
            gain = 0.3 if name.endswith("block.3") or module.out_channels == 1 else 1.0
            module.weight.copy_(gain * torch.randn(module.weight.shape, generator=gen) / fan_in ** 0.5)
            module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))
        for name, p in vae.named_parameters():
            if name.endswith("alpha") or name.endswith("scale_embed.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("bias_embed.weight"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return vae


@contextlib.contextmanager
def fused_snake():
    """The reference layers with the engine's former compiled Snake swapped in."""
    # One graph per channel count, layout and batch of one or more (alpha is a parameter, so its
    # size is static): over dynamo's default limit of 8.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    original = audio_vae.snake
    audio_vae.snake = compiled(snake)
    try:
        yield
    finally:
        audio_vae.snake = original


@contextlib.contextmanager
def tf32_off():
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # the new GEMMs follow cuDNN's setting
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


def variant(vae: AudioVAE, name: str):
    """(decode(z [B, D, F], state) -> [B, samples], the context it runs in) for one variant."""
    if name.startswith("old"):
        context = fused_snake() if name == "old-fused-snake" else contextlib.nullcontext()
        return (lambda z, state: vae.decoder(z, state).squeeze(1)), context
    split = {"kernels-split2": 2, "kernels-split-all": 99, "kernels-tf32": 0}.get(name)  # None: the default
    from inference.model import vae_kernel_stream  # Triton: imported where a GPU runs this, not by CPU tests

    # Read when a decode is traced: each variant sets it before its graphs are captured.
    vae_kernel_stream.FUSED_CHANNELS = 128 if name == "kernels-fused128" else 64
    vae.decoder.compile_stream(name != "new-eager", kernels=name.startswith("kernels"), split_blocks=split)
    return vae.decode_chunk, tf32_off() if name == "kernels-fp32" else contextlib.nullcontext()


def captured(decode, z, state) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """decode(z, state) captured in a CUDA graph (after two calls outside it: compile, cuBLAS)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            decode(z, state)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode(z, state)
    return graph, out


def replay_ms(graph: torch.cuda.CUDAGraph, iters: int) -> float:
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def kernel_count(decode, z, state) -> int:
    """CUDA kernels one call launches (a graph replays the same ones)."""
    return sum(calls for calls, _ in by_kernel(lambda: decode(z, state)).values())


def kernel_times(vae: AudioVAE, name: str, rows: int, frames: int, top: int, launches: bool) -> None:
    """The `top` kernels of one call at `rows` rows by GPU time (summed over their calls); with
    `launches`, every launch in order too."""
    decode, context = variant(vae, name)
    state = vae.new_decoder_state(rows)
    z = torch.randn(rows, vae.cfg.latent_dim, frames, device="cuda")
    with context, torch.inference_mode():
        decode(z, state)
        torch.cuda.synchronize()
        spent = by_kernel(lambda: decode(z, state), width=80)
    total = sum(ms for _, ms in spent.values())
    print(f"\n{name} at {rows} rows: kernels by GPU time (eager call, {total:.3f} ms in kernels)")
    print_top(spent, top, indent="  ")
    if launches:
        with context, torch.inference_mode():
            order = in_order(lambda: decode(z, state))
        print(f"  every launch in order ({len(order)}):")
        for i, (kernel, ms) in enumerate(order):
            print(f"  {i:4d} {ms:7.3f} ms  {kernel}")


def timings(vae: AudioVAE, name: str, rows: list[int], frames: int, iters: int) -> tuple[list[float], float, int]:
    """ms per patch at each row count, the seconds the first call of each size took (compilation),
    and the kernels of one call at the last size."""
    decode, context = variant(vae, name)
    state = vae.new_decoder_state(max(rows))
    out, first_calls = [], 0.0
    with context, torch.inference_mode():
        for b in rows:
            z = torch.randn(b, vae.cfg.latent_dim, frames, device="cuda")
            torch.cuda.synchronize()
            t = time.perf_counter()
            decode(z, state.rows(b))
            torch.cuda.synchronize()
            first_calls += time.perf_counter() - t
            graph, _ = captured(decode, z, state.rows(b))
            out.append(replay_ms(graph, iters))
            del graph
            torch.cuda.empty_cache()
        kernels = kernel_count(decode, z, state.rows(b))
    return out, first_calls, kernels


def streamed(vae: AudioVAE, name: str, z: torch.Tensor, frames: int) -> torch.Tensor:
    """z [B, D, F] decoded patch by patch through one captured graph, from a fresh state."""
    decode, context = variant(vae, name)
    state = vae.new_decoder_state(z.shape[0])
    with context, torch.inference_mode():
        static = z[..., :frames].clone()
        graph, out = captured(decode, static, state)
        state.reset()
        pieces = []
        for start in range(0, z.shape[-1], frames):
            static.copy_(z[..., start: start + frames])
            graph.replay()
            pieces.append(out.clone())
        del graph
    return torch.cat(pieces, dim=-1)


def compare(ref: torch.Tensor, x: torch.Tensor) -> str:
    ref, x = ref.double(), x.double()
    error = (ref - x).square().sum()
    if error == 0:
        return "identical"
    snr = 10 * torch.log10(ref.square().sum() / error)
    return f"SNR {snr.item():6.1f} dB, max abs {(ref - x).abs().max().item():.2e}"


def timing_table(vae: AudioVAE, names: list[str], rows: list[int], frames: int, iters: int) -> None:
    print(f"\nms per patch (CUDA graph replay, mean of {iters}); 'first calls': seconds of the first "
          f"call at each size (compilation); kernels of one call at {rows[-1]} rows")
    print(f"{'variant':18s}" + "".join(f"{'rows=' + str(b):>10s}" for b in rows) + f"{'first calls':>13s}{'kernels':>9s}")
    for name in names:
        try:
            ms, first, kernels = timings(vae, name, rows, frames, iters)
        except Exception:  # one variant failing leaves the others' figures
            print(f"{name:18s} FAILED:")
            traceback.print_exc()
            continue
        print(f"{name:18s}" + "".join(f"{m:10.3f}" for m in ms) + f"{first:12.1f}s{kernels:9d}", flush=True)


def accuracy_table(vae: AudioVAE, names: list[str], frames: int) -> None:
    rows, patches = ACCURACY_ROWS, ACCURACY_PATCHES
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(rows, vae.cfg.latent_dim, patches * frames, generator=gen).cuda()
    with tf32_off(), torch.inference_mode():
        whole = vae.decode(z)
    print(f"\naccuracy: {rows} rows x {patches} patches streamed through each variant's graph, against the "
          f"float32 whole-sequence decode with TF32 off (output std {whole.std().item():.3f}, "
          f"{(whole.abs() > 0.99).float().mean().item():.1%} of samples beyond 0.99)")
    outs = {}
    for name in names:
        try:
            outs[name] = streamed(vae, name, z, frames)
        except Exception:
            print(f"{name:18s} FAILED:")
            traceback.print_exc()
            continue
        print(f"{name:18s} {compare(whole, outs[name])}", flush=True)
    for new in [name for name in outs if not name.startswith("old")]:
        if "old-eager" in outs:
            print(f"{new + ' vs old-eager':32s} {compare(outs['old-eager'], outs[new])}")
    with tf32_off():
        old, new = streamed(vae, "old-eager", z, frames), streamed(vae, "new-eager", z, frames)
    print(f"{'new vs old, TF32 off (eager)':32s} {compare(old, new)}   <- the formulations agree to float32")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="bench/voxcpm2_config.json", help="model config.json (its audio_vae_config)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    ap.add_argument("--iters", type=int, default=30, help="graph replays timed per figure")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--profile", type=int, default=64, help="rows of the per-kernel table (0: none)")
    ap.add_argument("--top", type=int, default=12, help="kernels listed per variant")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the accuracy table")
    ap.add_argument("--launches", action="store_true", help="with --profile: also list every launch in order")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/vae_decode.py needs a CUDA GPU")
    cfg = ModelConfig.from_json(args.config)
    vae = random_weights(AudioVAE(cfg.vae)).cuda().eval()
    start = time.perf_counter()
    print(f"VAE decoder alone: {torch.cuda.get_device_name()}, torch {torch.__version__}, {datetime.date.today()}; "
          f"decoder_dim {cfg.vae.decoder_dim}, rates {cfg.vae.decoder_rates}; one patch = {cfg.patch_size} "
          f"latent frames -> {cfg.patch_samples} samples; float32, cuDNN TF32 {torch.backends.cudnn.allow_tf32}")
    for name in args.variants:
        print(f"  {name:18s} {VARIANTS[name]}")
    timing_table(vae, args.variants, sorted(args.rows), cfg.patch_size, args.iters)
    for name in args.variants if args.profile else []:
        kernel_times(vae, name, args.profile, cfg.patch_size, args.top, args.launches)
    if not args.no_accuracy:
        accuracy_table(vae, args.variants, cfg.patch_size)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
