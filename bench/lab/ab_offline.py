"""Stream vs offline render, per mode: the figures the page's A/B shows (max absolute difference,
SNR in dB), measured on the published architecture with random weights on a GPU.

Each mode streams one request through the engine (CUDA graphs, the streaming VAE decoder) and
decodes the same latents whole (inference/runtime/offline.decode_whole, as GET /voxcpm/jobs/ID/offline.wav does);
both are rounded to int16 as the stream route and the offline WAV round them.

    python -m bench.lab.ab_offline --out DIR            # GPU, published architecture, random weights
    python -m bench.lab.ab_offline --out DIR --tiny     # the tests' tiny model on the CPU (a smoke test)
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from inference import SynthesisRequest
from inference.runtime.offline import decode_whole

ROOT = Path(__file__).resolve().parents[2]
VOICE = ROOT / "assets" / "voices" / "guide_en.wav"
VOICE_TEXT = "Welcome to the museum. Please keep your ticket with you while you visit the galleries."
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home again."


def requests(patches: int) -> dict[str, SynthesisRequest]:
    common = dict(seed=7, min_len=patches, max_len=patches)
    return {"design": SynthesisRequest(TEXT, control="a calm voice", **common),
            "cloning": SynthesisRequest(TEXT, reference_audio=str(VOICE), **common),
            "ultimate": SynthesisRequest(TEXT, reference_audio=str(VOICE), prompt_audio=str(VOICE),
                                         prompt_text=VOICE_TEXT, **common)}


def int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(audio.astype(np.float64) * 32767.0), -32768, 32767)


def measure(engine, req: SynthesisRequest) -> dict:
    chunks = list(engine.stream(req))
    streamed = np.concatenate([c.audio for c in chunks])
    context = engine.preparer.plan(req).start.prompt.decode_context
    offline = decode_whole(engine.vae, np.stack([c.latents for c in chunks]), context, engine.runner.step.dtype,
                           engine.device)
    s, o = int16(streamed), int16(offline)
    noise = np.sum((s - o) ** 2)
    return {"patches": len(chunks), "max_abs_steps": int(np.max(np.abs(s - o))),
            "snr_db": float("inf") if noise == 0 else float(10 * np.log10(np.sum(o ** 2) / noise))}


def build(args):
    if args.tiny:
        from inference import Engine
        from inference.model.tiny_checkpoint import write_tiny_checkpoint

        return Engine.from_pretrained(write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm2-tiny-"), seed=0), device="cpu", dtype="float32", warmup=False)
    from bench import weights

    source = weights.prepare(args, Path(tempfile.mkdtemp(prefix="voxcpm_ab_")))
    return weights.our_engine(source, vae_dtype=args.vae_dtype, cuda_graphs=True, max_streams=4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for ab_offline.md")
    ap.add_argument("--checkpoint", help="a real checkpoint folder (default: random published weights)")
    ap.add_argument("--config", default=str(ROOT / "bench" / "voxcpm2_config.json"))
    ap.add_argument("--vae-dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--patches", type=int, default=50)
    ap.add_argument("--tiny", action="store_true", help="the tiny CPU model (a smoke test of this script)")
    args = ap.parse_args()
    engine = build(args)
    device = "CPU (tiny model)" if args.tiny else torch.cuda.get_device_name(0)
    lines = [f"Stream vs offline render, {device}, VAE {args.vae_dtype}, {args.patches} patches, int16 as served:", "",
             "| mode | patches | max abs diff (int16 steps) | SNR (dB) |", "|---|---|---|---|"]
    for mode, req in requests(args.patches).items():
        r = measure(engine, req)
        lines.append(f"| {mode} | {r['patches']} | {r['max_abs_steps']} | {r['snr_db']:.1f} |")
    table = "\n".join(lines) + "\n"
    print(table, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab_offline.md").write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
