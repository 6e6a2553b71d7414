#!/usr/bin/env python3
"""Where a patch's time goes: kernel counts and replay times of the three graphs of a patch
(prologue, one Euler step, finish) at each batch bucket, and decode-attention variants.

    python -m bench.lab.profile_step [--buckets 1 8 64] [--top N]
    python -m bench.lab.profile_step --admission 64 [--prefill] [--buckets ...]   # a burst's way to its first chunks

(Earlier one-off experiments, whole-body compiles, SDPA backends for LocEnc/LocDiT and a fused
Snake, are recorded in docs/benchmarks.md; git history has their code.)
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from inference import Engine, SynthesisRequest  # noqa: E402
from inference.model.audio_vae import AudioVAE  # noqa: E402
from inference.model.config import ModelConfig  # noqa: E402
from inference.model.loader import LoadedModel  # noqa: E402
from inference.model.voxcpm2 import VoxCPM2  # noqa: E402
from inference.text.tokenizer import TextTokenizer  # noqa: E402
from inference.model.tiny_checkpoint import write_tokenizer  # noqa: E402


def random_engine(vae_dtype=torch.float32, max_streams: int = 64, hopper: bool = True) -> Engine:
    cfg = ModelConfig.from_json(ROOT / "bench" / "voxcpm2_config.json")
    tok = Path("/tmp/profile_tok")
    tok.mkdir(exist_ok=True)
    write_tokenizer(tok)
    with torch.device("cuda"):
        model = VoxCPM2(cfg).to(torch.bfloat16).eval()
        model.fuse_projections()
        vae = AudioVAE(cfg.vae).to(vae_dtype).eval()
    return Engine(LoadedModel(cfg, model, vae, TextTokenizer.from_dir(tok), torch.device("cuda")), max_streams=max_streams,
                  hopper=hopper)


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


def dit_flops(step, b: int) -> float:
    """FLOPs of one guided Euler step of b rows (the DiT on 2b sequences), counted on the plain
    functions (the counter does not see inside compiled code; the arithmetic is the same). The
    math attention backend, because the counter's formula for the fused kernels rejects GQA shapes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from inference.model.locdit import euler_update

    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        euler_update(step.model.dit, step.x[:b], step.mu_pair[: 2 * b], step.cond_pair[: 2 * b],
                     step.time_rows[:b, 0], step.dt_rows[:b, 0], step.cfg_value[:b])
    return float(counter.get_total_flops())


def advance(step, b: int, span: int):
    with step.fns.scope:  # where compiled functions may compile (the raised recompile limit)
        return step.model.advance(step.patch[:b], step.position[:b], span, step.fns.ops)


def capture(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def attention_variants():
    """Decode attention of 8 rows over a 512-slot bucket: our function against SDPA variants."""
    import torch.nn.functional as F

    from inference.runtime.compiled import compiled_ops

    q = torch.randn(8, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(8, 2, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    after = torch.arange(512, device="cuda").unsqueeze(0) > torch.arange(100, 500, 50, device="cuda").unsqueeze(1)
    bias = torch.zeros(8, 1, 1, 512, device="cuda", dtype=torch.bfloat16).masked_fill(after.view(8, 1, 1, 512),
                                                                                     float("-inf"))
    ops = compiled_ops()
    variants = {
        "decode_attention": lambda: ops.decode_attention(q, k, v, bias),
        "sdpa mask expanded": lambda: F.scaled_dot_product_attention(
            q, k.repeat_interleave(8, 1), v.repeat_interleave(8, 1), attn_mask=bias),
    }
    ref = variants["decode_attention"]()
    for name, fn in variants.items():
        fn()
        err = ((fn().float() - ref.float()).norm() / ref.float().norm()).item()
        print(f"{name}: {kernels(fn)} kernels, {replay_ms(fn, 100) * 1e3:.1f} us eager, err {err:.1e}")


class HostTimes:
    """Host time spent in some public methods of the engine's parts (instance attributes shadow
    them while it is entered), to split a burst's host work: preparation, the rest of start(),
    admission (its inputs, pinned uploads, prefill launch and row loads), the patch launch."""

    def __init__(self, engine):
        r = engine.runner
        self.parts = [("prepare", engine, "prepare"), ("plan", engine.preparer, "plan"), ("admission", r, "admit"),
                      ("of which pinned uploads", r.step, "upload"), ("prefill launch", r, "padded_prefill"),
                      ("row loads", r.step, "load_rows"), ("patch launch", r, "launch")]
        self.spent = collections.Counter()
        self.calls = collections.Counter()

    def __enter__(self):
        self.shadowed = [(owner, attr, vars(owner).get(attr)) for _, owner, attr in self.parts]
        for name, owner, attr in self.parts:
            setattr(owner, attr, self.timed(name, getattr(owner, attr)))
        return self

    def __exit__(self, *exc):
        for owner, attr, own in self.shadowed:
            if own is None:
                delattr(owner, attr)  # the class's method shows through again
            else:
                setattr(owner, attr, own)  # an instance attribute (the runner's CUDAGraphed prefill)

    def timed(self, name, fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] += time.perf_counter() - start
                self.calls[name] += 1
        return call

    def line(self) -> str:
        return ", ".join(f"{name} {1e3 * self.spent[name]:.1f} ms/{self.calls[name]}" for name, *_ in self.parts)


def admission(engine, k: int):
    """Where a batch of k requests arriving together spends its time before its first chunks,
    with admission ahead (Scheduler.admit_ahead) off and on; then where the host's time went."""
    sync = torch.cuda.synchronize
    reqs = [SynthesisRequest(text="The quick brown fox jumps over the lazy dog while the morning sun rises.",
                             seed=i, min_len=80, max_len=80) for i in range(k)]
    key = engine.runner.prefill_key(k, len(engine.preparer.plan(reqs[0]).start.prompt))
    ahead = engine.scheduler.admit_ahead
    for mode in (0, ahead, 0, ahead):
        engine.scheduler.admit_ahead = mode
        sync()
        with HostTimes(engine) as host:
            t0 = time.perf_counter()
            streams = [engine.start(r) for r in reqs]
            t1 = time.perf_counter()
            engine.step()  # admit and launch the first patch
            t2 = time.perf_counter()
        sync()
        t3 = time.perf_counter()
        engine.step()  # launch the second, collect the first
        t4 = time.perf_counter()
        for s in streams:
            engine.stop(s)
        engine.step()
        print(f"k={k}, admission ahead {mode}: starts {1e3 * (t1 - t0):.1f} ms, admit+launch on the host "
              f"{1e3 * (t2 - t1):.1f} ms, GPU done {1e3 * (t3 - t0):.1f} ms, first chunks {1e3 * (t4 - t0):.1f} ms "
              f"after arrival\n    host, calls: {host.line()}")
    prefill = replay_ms(lambda: engine.runner.padded_prefill(*key), 5)
    print(f"k={k}: prefill graph {key} {prefill:.2f} ms")


def prefill_rates(engine, keys):
    """Each prefill key's graph with the plain functions and with the compiled ones the engine
    uses (StepFunctions.prefill), with the FLOP rate of the matrix products (2 x weights x positions)."""
    from inference.model.transformer import PLAIN_OPS

    r, step = engine.runner, engine.runner.step
    # The matrices: fuse_projections keeps the fused q/k/v and gate/up weights as buffers.
    weights = sum(t.numel() for lm in (step.model.base_lm, step.model.residual_lm)
                  for t in (*lm.layers.parameters(), *lm.layers.buffers()) if t.dim() == 2)
    for key in keys:
        if key not in r.prompt_in:
            continue
        inputs = r.prompt_in[key]
        inputs[-1].fill_(r.scratch_row)  # every entry writes the scratch row's cache
        inputs[-2].fill_(key[1] - 1)  # each prompt's last position: within this key's length
        times = {}
        for name, ops in (("plain", PLAIN_OPS), ("compiled", step.fns.prefill)):
            def run(ops=ops):
                with step.fns.scope:
                    step.model.prefill(*inputs, ops)
            times[name] = replay_ms(capture(run).replay, 10)
        tflops = 2 * weights * key[0] * key[1] / (times["compiled"] * 1e-3) / 1e12
        print(f"prefill {key}: plain {times['plain']:.2f} ms, compiled {times['compiled']:.2f} ms "
              f"({times['plain'] / times['compiled']:.2f}x), {tflops:.0f} TFLOP/s in the products")


def profile_bucket(engine, b: int, span: int, top: int, whole: bool = True):
    """Kernels and replay times of each part of a patch at bucket b, and the DiT's FLOP rate (and,
    `whole`, the engine's own graphs and one whole patch). The step's own methods enter its compile
    scope (fns.scope), which is not re-entrant."""
    r, step = engine.runner, engine.runner.step
    frames = torch.zeros(b, 64, 4, device="cuda", dtype=step.vae_dtype)
    parts = {"prologue": lambda: step.prologue(b), "euler": lambda: step.euler(b),
             "finish": lambda: step.finish(b, span),
             "vae": lambda: step.vae.decode_chunk(frames, step.decoder.rows(b)),
             "lm_advance": lambda: advance(step, b, span)}
    for name, fn in parts.items():
        graph = capture(fn)
        print(f"b={b} {name}: {kernels(fn, top=top)} kernels, as a graph {replay_ms(graph.replay, 20):.3f} ms")
    if not whole:
        return
    times = {name: replay_ms(lambda g=g: g(*key), 20) for name, g, key in
             (("prologue", r.prologue, (b,)), ("euler", r.euler, (b,)), ("finish", r.finish, (b, span)))}
    patch = replay_ms(lambda: r.launch(b, span - 1, 9) or r.collect(), 20)
    tflops = dit_flops(step, b) / (times["euler"] * 1e-3) / 1e12
    print(f"b={b} euler (the DiT, 2b sequences): {tflops:.1f} TFLOP/s achieved")
    print(f"b={b} graphs: prologue {times['prologue']:.3f} ms, euler {times['euler']:.3f} ms, finish "
          f"{times['finish']:.3f} ms; one patch with its copy to the host {patch:.3f} ms ({patch / b:.3f} ms per stream)")


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--buckets", type=int, nargs="*", default=None,
                    help="buckets to profile (default 1 8 32 64; none when --admission is given alone)")
    ap.add_argument("--top", type=int, default=0, help="print the N most frequent kernels of each part")
    ap.add_argument("--admission", type=int, nargs="*", default=[], help="time batches of K arrivals (admission ahead off and on)")
    ap.add_argument("--prefill", action="store_true", help="with --admission: also each prefill key, plain and compiled")
    ap.add_argument("--no-hopper", action="store_true", help="the DiT on cuBLAS only, even where the Hopper kernels run")
    ap.add_argument("--parts-only", action="store_true",
                    help="only each bucket's parts, each captured alone (any batch size, not only the engine's "
                         "buckets): no attention variants, and no capture of the engine's own graphs")
    args = ap.parse_args()
    if args.buckets is None:
        args.buckets = [] if args.admission else [1, 8, 32, 64]
    if not args.parts_only:
        attention_variants()
    engine = random_engine(torch.float32, max_streams=max(args.buckets + args.admission), hopper=not args.no_hopper)
    r = engine.runner
    t = time.perf_counter()
    if not args.parts_only:
        r.capture()
        print(f"capture {time.perf_counter() - t:.1f} s, {r.graphs} graphs")
    for b, times in sorted(r.dit_choice.items()):  # the warm-up's choice of the DiT's kernels per bucket
        print(f"b={b} DiT kernels: " + ", ".join(f"{name} {ms:.3f} ms" for name, ms in times.items())
              + f" (9 Euler steps) -> {r.dit_chosen[b]}")
    for k in args.admission:
        admission(engine, k)
    if args.prefill:
        prefill_rates(engine, [(1, 32), (1, 128), (16, 96), (64, 64), (64, 96), (64, 128), (128, 64)])
    if not args.buckets:
        return
    streams = [engine.start(SynthesisRequest(text="Hello world, profiling the step.", seed=i, min_len=300, max_len=300))
               for i in range(max(args.buckets))]
    engine.step()  # admits every stream into its row
    span = r.span(max(s.position for s in streams))
    for b in args.buckets:
        profile_bucket(engine, b, span, args.top, whole=not args.parts_only)


if __name__ == "__main__":
    main()
