"""Derived figures (weight-streaming floor, VAE precision) and the markdown table."""
from __future__ import annotations

import copy
import datetime

import numpy as np
import torch

from inference import SynthesisRequest
from inference.model.locdit import zero_velocity_steps
from inference.runtime.decode_step import patches_to_frames


def nbytes(module: torch.nn.Module) -> int:
    """Weight bytes: parameters plus the fused projection matrices (buffers named *_weight)."""
    tensors = list(module.parameters()) + [b for name, b in module.named_buffers() if name.endswith("_weight")]
    return sum(t.numel() * t.element_size() for t in tensors)


def copy_bandwidth(gib: int = 2) -> float:
    """Device-to-device copy rate in bytes/s, counting bytes read plus written (median of 20)."""
    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for i in range(23):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * (gib << 30) / float(np.median(times))


def weight_floor(engine, steps: int) -> dict:
    """Bytes of weights one patch must read (embedding rows aside) over the measured bandwidth."""
    m = engine.model
    per_patch = (nbytes(m.base_lm) - nbytes(m.base_lm.embed_tokens) + nbytes(m.residual_lm)
                 + nbytes(m.feat_encoder) + nbytes(m.dit) * (steps - zero_velocity_steps(steps))
                 + sum(nbytes(getattr(m, n)) for n in ("fsq_layer", "enc_to_lm_proj", "lm_to_dit_proj",
                                                        "res_to_dit_proj", "fusion_concat_proj", "stop_proj",
                                                        "stop_head"))
                 + nbytes(engine.vae.decoder))
    bandwidth = copy_bandwidth()
    return {"bytes": per_patch, "bandwidth": bandwidth, "floor_ms": per_patch / bandwidth * 1e3}


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - x) ** 2), 1e-30)))


def graph_ms(vae, frames: torch.Tensor) -> float:
    """Median time of one captured 4-frame decode_chunk."""
    state = vae.new_decoder_state()
    z = frames[..., :4].clone()
    for _ in range(2):
        vae.decode_chunk(z, state)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        vae.decode_chunk(z, state)
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


@torch.inference_mode()
def vae_precision(engine, vae_fp32, patches: int) -> list[dict]:
    """Streamed decode in each dtype against the float32 whole-sequence decode (TF32 off)."""
    req = SynthesisRequest(text="Streaming precision check of the audio decoder.", min_len=patches,
                           max_len=patches, seed=5)
    latents = np.stack([c.latents for c in engine.stream(req)])  # [n, D, P]
    frames = patches_to_frames(torch.from_numpy(latents).transpose(1, 2).unsqueeze(0)).cuda()
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    ref = vae_fp32.decode(frames)[0].cpu().numpy()
    torch.backends.cudnn.allow_tf32 = tf32
    rows = []
    for label, dtype, kernels, split in VAE_VARIANTS:
        vae = copy.deepcopy(vae_fp32).to(dtype)
        if kernels:
            vae.decoder.compile_stream(split_blocks=split)
        state, z = vae.new_decoder_state(), frames.to(dtype)
        out = torch.cat([vae.decode_chunk(z[..., i:i + 4], state) for i in range(0, z.shape[-1], 4)], -1)
        rows.append({"dtype": label, "snr": snr_db(ref, out[0].float().cpu().numpy()), "ms": graph_ms(vae, z)})
    return rows


# (label, dtype, the kernel path or the reference layers, its split_blocks: None the engine's default)
VAE_VARIANTS = [("float32, reference layers (as the official)", torch.float32, False, None),
                ("float32, the engine's kernels", torch.float32, True, None),
                ("float32, kernels, every product split", torch.float32, True, 99),
                ("float32, kernels, plain TF32 products", torch.float32, True, 0),
                ("bfloat16, reference layers", torch.bfloat16, False, None),
                ("float16, reference layers", torch.float16, False, None)]


def vae_table(vae_rows: list[dict]) -> str:
    lines = ["Streaming VAE decode of one patch (captured graph) against the float32 whole-sequence decode:", "",
             "| VAE decode | SNR (dB) | ms per patch |", "|---|---|---|"]
    return "\n".join(lines + [f"| {v['dtype']} | {v['snr']:.1f} | {v['ms']:.3f} |" for v in vae_rows]) + "\n"


def precision_table(pairs: dict[str, list[float]]) -> str:
    """bench.py --precision: each pair's relative error per patch (same weights and noise)."""
    gpu = torch.cuda.get_device_name()
    n = min(len(e) for e in pairs.values())
    lines = [f"Latents, same weights and noise, {gpu}, {datetime.date.today()}: relative error "
             f"||a - b|| / ||b|| of each patch (a patch feeds the next, so errors grow)", "",
             "| a against b | first patch | mean | largest | " + " | ".join(f"p{i + 1}" for i in range(n)) + " |",
             "|---|---|---|---|" + "---|" * n]
    for label, errors in pairs.items():
        lines.append(f"| {label} | {errors[0]:.2e} | {np.mean(errors):.2e} | {max(errors):.2e} | "
                     + " | ".join(f"{e:.1e}" for e in errors[:n]) + " |")
    return "\n".join(lines) + "\n"


def fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(rows: list[dict], floor: dict, vae_rows: list[dict], args) -> str:
    gpu = torch.cuda.get_device_name()
    lines = [f"# Benchmark: {gpu}, {datetime.date.today()}", "",
             f"torch {torch.__version__}; {'checkpoint ' + args.checkpoint if args.checkpoint else 'published architecture, random weights'}; "
             f"batch 1, {args.timesteps} timesteps, CFG 2; {args.patches} patches per timed request; medians.", "",
             "| runtime | TTFP design (ms) | TTFP cloning, 10 s ref (ms) | ms/patch median | ms/patch p90 | RTF | warm-up (s) | peak GPU mem (GB) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['ttfp_design'] * 1e3:.1f} | {r['ttfp_clone'] * 1e3:.1f} | {r['patch_ms']:.2f} | "
                     f"{r['patch_p90_ms']:.2f} | {r['rtf']:.4f} | {fmt(r.get('warmup_s'), '.1f')} | {fmt(r.get('peak_gb'), '.2f')} |")
    ours = rows[0]
    if "first_design" in ours:
        lines += ["", f"First requests after warm-up (ours): TTFP design {ours['first_design'] * 1e3:.1f} ms, "
                      f"cloning {ours['first_clone'] * 1e3:.1f} ms."]
    lines += ["", "Speed-up of ours (CUDA graphs), RTF ratio / TTFP-design ratio:"]
    for r in rows[1:]:
        lines.append(f"- vs {r['label']}: {r['rtf'] / ours['rtf']:.1f}x / {r['ttfp_design'] / ours['ttfp_design']:.1f}x")
    lines += ["", f"Weight-streaming floor: {floor['bytes'] / 1e9:.2f} GB read per patch / {floor['bandwidth'] / 1e12:.2f} TB/s "
              f"measured copy bandwidth = {floor['floor_ms']:.2f} ms per patch (RTF {floor['floor_ms'] / 160:.4f}); "
              f"ours: {ours['patch_ms'] / floor['floor_ms']:.2f}x the floor.", "", vae_table(vae_rows)]
    par = next((r["parity"] for r in rows if "parity" in r), None)
    if par:
        lines += ["", f"Same weights and noise, bf16: our latents vs the official's, relative error "
                      f"{par['first']:.2e} on the first patch, {par['mean']:.2e} mean over {par['n']} patches."]
    return "\n".join(lines) + "\n"
