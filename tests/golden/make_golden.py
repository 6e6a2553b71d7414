"""Regenerate the golden parity data: tiny checkpoint, reference clips, official outputs.

    python -m tests.golden.make_golden

Everything is deterministic (fixed seeds). The official package runs in float32 on CPU with the
CFM noise of every patch fed from the case's stored noise, so our engine can replay it exactly.
"""
from __future__ import annotations

import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inference.model.tiny_checkpoint import write_tiny_checkpoint  # noqa: E402
from bench.official import import_official, load_official_model, run_official  # noqa: E402

GOLDEN = Path(__file__).resolve().parent
CKPT = GOLDEN / "ckpt"
SEED = 0
CLIPS = {  # file -> (sample rate, seconds, channels, seed, f0)
    "clip_16k_mono.wav": (16000, 1.3, 1, 1, 130.0),
    "clip_22k_stereo.wav": (22050, 1.1, 2, 2, 210.0),
    "clip_short_16k.wav": (16000, 0.3, 1, 3, 160.0),
}
PROMPT_TEXT = "This is my voice."
# Stop decisions and FSQ roundings closer than this to their threshold would make parity depend on
# float rounding; regeneration refuses such cases (change the noise seed).
MIN_STOP_MARGIN, MIN_FSQ_MARGIN = 1e-2, 5e-5

CASES = [
    dict(name="a_design_en_control", text="Hello,  this is\na test of the voice.", control=" A warm female voice ",
         min_len=8, max_len=8, noise_seed=11,
         about="voice design, English, control prefix, whitespace clean-up; fixed length (8)"),
    dict(name="b_design_zh", text="你好世界，我们今天很好。欢迎大家。", min_len=2, max_len=6, noise_seed=12,
         about="voice design, Chinese with multi-character tokens (split by the official wrapper)"),
    dict(name="c_clone_reference", text="We speak slowly today.", control="A slow calm voice",
         reference="clip_22k_stereo.wav", min_len=2, max_len=6, noise_seed=13,
         about="controllable cloning: 22.05 kHz stereo reference (down-mix + resample) and a control"),
    dict(name="d_ultimate_continuation", text="We speak slowly today.", prompt="clip_16k_mono.wav",
         prompt_text=PROMPT_TEXT, min_len=2, max_len=6, noise_seed=14,
         about="ultimate cloning: prompt clip + transcript (continuation; 3 context patches cut)"),
    dict(name="e_ultimate_with_reference", text="Good morning, the weather is warm.", prompt="clip_16k_mono.wav",
         prompt_text=PROMPT_TEXT, reference="clip_16k_mono.wav", min_len=2, max_len=6, noise_seed=15,
         about="ultimate cloning with the same clip as reference (reference prefix + continuation)"),
    dict(name="f_design_stops", text="Hello world, a good day.", min_len=2, max_len=4096, noise_seed=28,
         about="voice design that ends by the stop head (generous max_len)"),
    dict(name="g_length_cap", text="a", prompt="clip_16k_mono.wav", prompt_text=PROMPT_TEXT,
         min_len=100, max_len=100, noise_seed=17,
         about="length cap: 1 target token -> min(int(6*1+10), 100) = 16 patches; prompt text not counted"),
    dict(name="h_short_prompt", text="我们早上好。", prompt="clip_short_16k.wav", prompt_text="你好",
         min_len=2, max_len=4, cfg_value=1.5, inference_timesteps=6, noise_seed=18,
         about="continuation with a 2-patch prompt (context shorter than 3), cfg 1.5, 6 timesteps"),
    dict(name="i_short_prompt_with_reference", text="Good day.", prompt="clip_short_16k.wav", prompt_text="Hi",
         reference="clip_16k_mono.wav", min_len=2, max_len=4, noise_seed=19,
         about="reference + 2-patch prompt: the 3 decoded context patches are the last reference patch "
               "and the 2 prompt patches (the official code takes the last 3 audio positions)"),
]


def synth_voice(sample_rate: int, seconds: float, channels: int, seed: int, f0: float) -> np.ndarray:
    """A voiced-speech-like test signal: harmonics with vibrato, syllable envelope, breath noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    pitch = f0 * (1 + 0.03 * np.sin(2 * np.pi * 5.0 * t) + 0.05 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    harmonics = [np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 16)
                 if k * f0 < 0.45 * sample_rate]
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 3.5 * t)) ** 1.5
    voiced = 0.25 * envelope * np.sum(harmonics, axis=0)
    out = []
    for ch in range(channels):
        # Channels differ in gain, delay and noise, so a wrong down-mix changes the result.
        delayed = np.roll(voiced, 7 * ch) * (1.0 - 0.3 * ch)
        out.append(delayed + 0.01 * rng.standard_normal(len(t)))
    audio = np.stack(out, axis=1) if channels > 1 else out[0]
    return np.clip(audio, -0.99, 0.99).astype(np.float32)


def write_clips() -> None:
    for name, (sr, seconds, channels, seed, f0) in CLIPS.items():
        sf.write(GOLDEN / name, synth_voice(sr, seconds, channels, seed, f0), sr, subtype="PCM_16")


@contextmanager
def margins(model, record: dict):
    """Record the stop logit margin per step and the closest FSQ value to a rounding boundary."""
    stop_head, fsq_in = model.stop_head, model.fsq_layer.in_proj
    stop_fwd, fsq_fwd, inference = stop_head.forward, fsq_in.forward, model._inference
    scale = model.fsq_layer.scale

    def audio_mask(text, text_mask, feat, feat_mask, *args, **kwargs):
        # In the prefill only audio positions keep their FSQ output; text positions discard it.
        record["mask"] = feat_mask[0].bool()
        return inference(text, text_mask, feat, feat_mask, *args, **kwargs)

    def stop(x):
        y = stop_fwd(x)
        record["stop"].append(float(y[0, 1] - y[0, 0]))
        return y

    def fsq(x):
        y = fsq_fwd(x)
        v = torch.tanh(y.float()) * scale
        if v.dim() == 3:
            v = v[0, record["mask"]]
        if v.numel() == 0:
            return y
        record["fsq"] = min(record["fsq"], float(((v - v.floor()) - 0.5).abs().min()))
        return y

    stop_head.forward, fsq_in.forward, model._inference = stop, fsq, audio_mask
    try:
        yield
    finally:
        stop_head.forward, fsq_in.forward, model._inference = stop_fwd, fsq_fwd, inference


def run_case(model, case: dict) -> dict:
    cap = min(case["max_len"], 200)
    noise = torch.randn(cap, 64, 4, generator=torch.Generator().manual_seed(case["noise_seed"])).numpy()
    record = {"stop": [], "fsq": 1.0}
    with margins(model, record):
        latents, wav, n = run_official(
            model, text=case["text"], control=case.get("control"),
            reference_wav=_path(case.get("reference")), prompt_wav=_path(case.get("prompt")),
            prompt_text=case.get("prompt_text"), cfg_value=case.get("cfg_value", 2.0),
            inference_timesteps=case.get("inference_timesteps", 10), min_len=case["min_len"],
            max_len=case["max_len"], noise=noise)
    live = [abs(m) for i, m in enumerate(record["stop"]) if i > case["min_len"]]
    # The loop breaks right after a positive margin once i > min_len; patch i is kept.
    stopped = n - 1 > case["min_len"] and record["stop"][n - 1] > 0
    return dict(latents=latents, waveform=wav, n=n, noise=noise[:min(cap, n + 4)], stop_margins=record["stop"],
                min_live_stop_margin=min(live) if live else np.inf, min_fsq_margin=record["fsq"],
                stopped_by_head=stopped)


def _path(name):
    return None if name is None else GOLDEN / name


def save_case(case: dict, out: dict, version: str) -> Path:
    path = GOLDEN / f"{case['name']}.npz"
    np.savez_compressed(
        path, text=case["text"], control=case.get("control") or "", prompt_text=case.get("prompt_text") or "",
        reference=case.get("reference") or "", prompt=case.get("prompt") or "",
        cfg_value=case.get("cfg_value", 2.0), inference_timesteps=case.get("inference_timesteps", 10),
        min_len=case["min_len"], max_len=case["max_len"], noise=out["noise"].astype(np.float32),
        latents=out["latents"], waveform=out["waveform"], n_patches=out["n"],
        stopped_by_head=out["stopped_by_head"], stop_margins=np.asarray(out["stop_margins"], np.float32),
        official_version=version, about=case["about"])
    return path


def main() -> None:
    if CKPT.exists():
        shutil.rmtree(CKPT)
    # bf16 weights like the published model.safetensors (the VAE file stays float32, as published).
    write_tiny_checkpoint(CKPT, seed=SEED, dtype=torch.bfloat16)
    write_clips()
    version = import_official().version
    model = load_official_model(CKPT, dtype="float32")
    for case in CASES:
        out = run_case(model, case)
        if out["min_live_stop_margin"] < MIN_STOP_MARGIN or out["min_fsq_margin"] < MIN_FSQ_MARGIN:
            raise SystemExit(f"{case['name']}: a decision is too close to its threshold "
                             f"(stop {out['min_live_stop_margin']:.2e}, fsq {out['min_fsq_margin']:.2e})")
        path = save_case(case, out, version)
        print(f"{case['name']}: {out['n']} patches, stopped_by_head={out['stopped_by_head']}, "
              f"stop margins {np.round(out['stop_margins'], 2).tolist()}, min fsq margin "
              f"{out['min_fsq_margin']:.1e}, {path.stat().st_size / 1e3:.0f} kB")
    total = sum(p.stat().st_size for p in GOLDEN.rglob("*") if p.is_file() and p.suffix != ".py")
    print(f"official voxcpm {version}; golden data total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
