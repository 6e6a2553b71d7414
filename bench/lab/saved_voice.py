#!/usr/bin/env python3
"""TTFP of a saved voice (patches encoded once) against voice design and against clips encoded on
every request, for clips of 5, 20 and 50 s, in controllable and ultimate cloning.

    python -m bench.lab.saved_voice --out DIR            # published architecture, random weights, GPU
    python -m bench.lab.saved_voice --out DIR --tiny     # the tiny test checkpoint on the CPU (a smoke run)

Writes DIR/saved_voice.json and DIR/saved_voice.md (medians and p90 over --runs). "saved - design"
is what is left once encoding is gone: the prefill of the reference positions, i.e. the most a
cache of the reference prefix's KV could still save. No Gradio, no ui/ imports.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from bench.timing import first_chunk_seconds, median, p90, synthetic_voice  # noqa: E402
from inference import Engine, ReferenceClip, SynthesisRequest  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog while the morning sun rises slowly "
        "above the quiet green hills today.")
TRANSCRIPT = "A voice reading a passage of ordinary text at an even pace."


def request(reference=None, prompt=None) -> SynthesisRequest:
    return SynthesisRequest(text=TEXT, reference_audio=reference, prompt_audio=prompt,
                            prompt_text=TRANSCRIPT if prompt is not None else None, min_len=2, max_len=3, seed=2)


def ttfp(engine: Engine, make_request, runs: int) -> dict:
    times = [first_chunk_seconds(lambda: engine.stream(make_request())) for _ in range(runs)]
    return {"median_ms": median(times) * 1e3, "p90_ms": p90(times) * 1e3}


def clip_rows(engine: Engine, seconds: float, runs: int, work: Path) -> list[dict]:
    audio, rate = sf.read(synthetic_voice(work / f"voice_{seconds:g}s.wav", seconds), dtype="float32")
    raw = (rate, audio)
    saved = ReferenceClip(rate, audio)
    engine.synthesize(request(saved, saved))  # saving encodes both sides once (ui/voice_routes.encode_once)
    rows = []
    for mode, uploaded, kept in (("cloning", lambda: request(raw), lambda: request(saved)),
                                 ("ultimate", lambda: request(raw, raw), lambda: request(saved, saved))):
        for how, make in (("encoded per request", uploaded), ("saved voice", kept)):
            rows.append({"clip_s": seconds, "mode": mode, "how": how, **ttfp(engine, make, runs)})
    return rows


def load(args) -> Engine:
    if args.tiny:
        from inference.model.tiny_checkpoint import write_tiny_checkpoint

        folder = tempfile.mkdtemp(prefix="voxcpm2-tiny-bench-")
        write_tiny_checkpoint(folder, seed=0)
        return Engine.from_pretrained(folder, device="cpu", dtype="float32", max_streams=2)
    from bench import weights

    source = weights.prepare(argparse.Namespace(checkpoint=args.checkpoint, config=args.config),
                             Path(tempfile.mkdtemp(prefix="voxcpm2-bench-")))
    return weights.our_engine(source, vae_dtype="float32", cuda_graphs=True, max_streams=8)


def markdown(design: dict, rows: list[dict], device: str) -> str:
    lines = [f"TTFP on {device} (median / p90 ms over the runs); voice design: "
             f"{design['median_ms']:.1f} / {design['p90_ms']:.1f} ms", "",
             "| clip | mode | reference | TTFP median | p90 | minus design |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['clip_s']:g} s | {r['mode']} | {r['how']} | {r['median_ms']:.1f} ms | "
                     f"{r['p90_ms']:.1f} ms | {r['median_ms'] - design['median_ms']:+.1f} ms |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for saved_voice.json and saved_voice.md")
    ap.add_argument("--tiny", action="store_true", help="the tiny random checkpoint on the CPU (smoke run)")
    ap.add_argument("--checkpoint", help="a real checkpoint folder (default: random published weights)")
    ap.add_argument("--config", default=str(ROOT / "bench" / "voxcpm2_config.json"))
    ap.add_argument("--seconds", type=float, nargs="*", default=None,
                    help="clip lengths (default: 5 20 50; with --tiny 1 2 4, as its cache holds 512 positions)")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    args.seconds = args.seconds or ([1, 2, 4] if args.tiny else [5, 20, 50])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = load(args)
    device = torch.cuda.get_device_name() if engine.device.type == "cuda" else "cpu (tiny model)"
    design = ttfp(engine, request, args.runs)
    with tempfile.TemporaryDirectory() as work:
        rows = [row for s in args.seconds for row in clip_rows(engine, s, args.runs, Path(work))]
    (out / "saved_voice.json").write_text(json.dumps({"device": device, "design": design, "rows": rows}, indent=1))
    table = markdown(design, rows, device)
    (out / "saved_voice.md").write_text(table)
    print(table, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")
    main()
