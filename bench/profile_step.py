#!/usr/bin/env python3
"""Where a patch's time goes: kernel counts and replay times of the two graphs, eager vs compiled.

    python bench/profile_step.py [--compile]
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from inference import Engine, SynthesisRequest  # noqa: E402
from inference.audio_vae import AudioVAE  # noqa: E402
from inference.config import ModelConfig  # noqa: E402
from inference.loader import LoadedModel  # noqa: E402
from inference.model import VoxCPM2  # noqa: E402
from inference.text import TextTokenizer  # noqa: E402
from inference.tiny import write_tokenizer  # noqa: E402


def random_engine(vae_dtype=torch.float32) -> Engine:
    cfg = ModelConfig.from_json(ROOT / "bench" / "voxcpm2_config.json")
    tok = Path("/tmp/profile_tok")
    tok.mkdir(exist_ok=True)
    write_tokenizer(tok)
    with torch.device("cuda"):
        model = VoxCPM2(cfg).to(torch.bfloat16).eval()
        model.fuse_projections()
        vae = AudioVAE(cfg.vae).to(vae_dtype).eval()
    model.allocate_caches(cfg.max_length)
    return Engine(LoadedModel(cfg, model, vae, TextTokenizer.from_dir(tok), torch.device("cuda")))


def replay_ms(fn, n=50) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def kernels(fn, top: int = 0) -> int:
    """Kernels one call launches; with `top`, also prints the most frequent kernel names."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    for name, count in collections.Counter(name[:90] for name in names).most_common(top):
        print(f"    {count:5d}  {name}")
    return len(names)


def capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def attention_variants():
    """Decode attention over a 512-slot bucket: our compiled function against SDPA variants."""
    import torch.nn.functional as F

    from inference.runner import compiled_ops

    q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    bias = torch.zeros(512, device="cuda").masked_fill(torch.arange(512, device="cuda") > 300, float("-inf"))
    mask = bias.to(torch.bfloat16).view(1, 1, 1, -1)
    ops = compiled_ops()
    variants = {
        "compiled decode_attention": lambda: ops.decode_attention(q, k, v, bias),
        "sdpa mask gqa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
        "sdpa mask expanded": lambda: F.scaled_dot_product_attention(
            q, k.repeat_interleave(8, 1), v.repeat_interleave(8, 1), attn_mask=mask),
    }
    ref = variants["compiled decode_attention"]()
    for name, fn in variants.items():
        fn()
        err = ((fn().float() - ref.float()).norm() / ref.float().norm()).item()
        print(f"{name}: {kernels(fn)} kernels, {replay_ms(fn, 100) * 1e3:.1f} us eager, err {err:.1e}")


def sequence_backends(r, parts, top: int):
    """LocDiT and LocEnc attention (11 and 5 tokens, non-causal) through each SDPA backend."""
    import dataclasses

    from torch.nn.attention import SDPBackend

    from inference.runner import pinned_attention

    stages = (r.model.dit.decoder, r.model.feat_encoder.encoder)
    default = [stage.ops for stage in stages]
    for backend in (None, SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        for stage, ops in zip(stages, default):
            stage.ops = dataclasses.replace(ops, sequence_attention=pinned_attention(backend and [backend]))
        try:
            for name in ("dit_body", "locenc"):
                r.k.copy_(r.k_start)
                count = kernels(parts[name], top=top)
                g = capture(parts[name])
                print(f"{name}, sequence attention {backend}: {count} kernels, graph replay {replay_ms(g.replay, 20):.4f} ms")
        except RuntimeError as exc:
            print(f"sequence attention {backend}: {str(exc).splitlines()[0]}")
    for stage, ops in zip(stages, default):
        stage.ops = ops


def fused_snake(r, span: int, parts):
    """The VAE's Snake activation (5 kernels eager) as one compiled kernel: the VAE runs on its own
    stream beside the LM step, so this shows whether its kernel count slows the step graph."""
    import inference.audio_vae as vae_module

    plain = vae_module.snake
    before = replay_ms(capture(lambda: r.step_body(span)).replay, 20)
    torch._dynamo.config.recompile_limit = 64  # one compile per activation shape and stride
    vae_module.snake = torch.compile(plain, dynamic=False, fullgraph=True)
    try:
        parts["vae_chunk"]()  # compile first, so the count below is of the fused kernels alone
        count = kernels(parts["vae_chunk"])
        after = replay_ms(capture(lambda: r.step_body(span)).replay, 20)
        vae = replay_ms(capture(parts["vae_chunk"]).replay, 20)
        print(f"step graph with eager snake {before:.3f} ms, compiled snake {after:.3f} ms; "
              f"VAE chunk alone {vae:.3f} ms, {count} kernels")
    finally:
        vae_module.snake = plain


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true", help="also compile each body whole and time it")
    ap.add_argument("--autotune", action="store_true", help="with --compile: also max-autotune")
    ap.add_argument("--skip-backends", action="store_true", help="skip the LocEnc/LocDiT attention comparison")
    ap.add_argument("--top", type=int, default=0, help="print the N most frequent kernels of each part")
    args = ap.parse_args()
    attention_variants()
    engine = random_engine(torch.float32)
    r = engine.runner
    t = time.perf_counter()
    r.capture()
    print(f"capture {time.perf_counter() - t:.1f} s")
    prompt = engine.prepare(SynthesisRequest(text="Hello world, profiling the step.", seed=0))
    r.start(prompt, torch.randn(200, 4, 64), 2.0, 10)
    span = r.span(len(prompt))
    parts = {"dit_body": r.dit_body, "step_body": lambda: r.step_body(span),
             "lm_advance": lambda: r.model.advance(r.x, r.position, span),
             "vae_chunk": lambda: r.vae.decode_chunk(torch.zeros(1, 64, 4, device="cuda", dtype=r.vae_dtype), r.decoder),
             "locenc": lambda: r.model.embed_patches(r.x.unsqueeze(1))}
    for name, fn in parts.items():
        print(f"{name}: {kernels(fn, top=args.top)} kernels, eager {replay_ms(fn, 10):.3f} ms")
    print(f"graph dit replay {replay_ms(r.dit_graph.replay):.3f} ms, step graph {replay_ms(r.step_graphs[span].replay, 20):.3f} ms")

    def patch():
        for _ in range(9):
            r.dit_graph.replay()
        r.step_graphs[span].replay()

    print(f"one patch (9 DiT replays + step graph): {replay_ms(patch, 20):.3f} ms")
    if not args.skip_backends:
        sequence_backends(r, parts, top=args.top)
    fused_snake(r, span, parts)
    if args.compile:  # the whole DiT call and the whole LM advance as one compiled function each
        modes = [None] + (["max-autotune-no-cudagraphs"] if args.autotune else [])
        for mode in modes:
            for name in ("dit_body", "lm_advance"):
                r.k.copy_(r.k_start)  # each DiT call advances k; keep it inside the time table
                fn = torch.compile(parts[name], fullgraph=True, dynamic=False, mode=mode)
                t = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                label = f"compiled {name} ({mode or 'default'})"
                print(f"{label}: compile {time.perf_counter() - t:.1f} s, {kernels(fn, top=args.top)} kernels")
                g = capture(fn)
                print(f"{label}: graph replay {replay_ms(g.replay, 20):.3f} ms")


if __name__ == "__main__":
    main()
