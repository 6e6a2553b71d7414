"""Issue #47's measurements of the word aligner (inference/analysis/alignment.py): how far its word
boundaries fall from the truth (target: within 40 ms at p90), and how many seconds of audio it aligns
per second at batch sizes 1, 8 and 32. Issue 57's targets, with whisper-base: p90 of both boundaries
within 150 ms in English and 2x better than faster-whisper's aligner (CTranslate2's align(), run
beside ours on the same truth when the model is a CTranslate2 folder and ctranslate2 is installed),
within 200 ms in Chinese.

    python -m bench.alignment --asr-model "$(python -m bench.whisper_models base ~/models)" --device cpu --batches 1 --runs 1
    python -m bench.alignment --asr-model openai/whisper-large-v3-turbo --device cuda --out DIR
    python -m bench.alignment --random-published --device cuda --out DIR   # no download: random weights
    python -m bench.alignment --random-tiny --out DIR                       # a smoke run on a CPU

The truth is built here, so that every boundary is known to the sample: each word (each character,
in Chinese) is spoken alone by espeak-ng (VOICES: docs/benchmarks.md says why), resampled to 16 kHz, trimmed of its silence at a fixed
energy threshold, and the words are joined with seeded random gaps of 40 to 400 ms (some of 0 ms:
touching words). A few sentences per language, about a minute each. Without espeak-ng the errors
are left out and the throughput still runs.

Random weights (`--random-published`: whisper-large-v3-turbo's shapes and alignment heads, written
by bench/analysis_beside.py; `--random-tiny`) time nothing: their errors are printed, and flagged,
only to show the run works. Their tokenizer is byte-level without merges, so a text has 3 to 4
times the tokens the real one gives: the throughput table says how many tokens a clip had.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.take_evaluation import timed
from inference.analysis import alignment
from inference.analysis.recognition import load_recognizer

RATE = 16000
TARGET_S = 0.040  # the target: a boundary within 40 ms at p90
THRESHOLD = 0.01  # a 5 ms frame is speech when its RMS reaches this (-40 dBFS)
FRAME = RATE // 200  # 5 ms
GAP_MS = (40, 400)  # the silence between two words, uniformly at random...
TOUCHING = 0.2  # ...except this share of them: no silence at all
EDGE_S = 0.3  # silence before the first word and after the last, as a take has
# cmn-latn-pinyin, not cmn: Debian's cmn reads most characters as pinyin with its tone digits said in
# English ("jin one"); its latn-pinyin twin says the same pinyin as Mandarin. docs/benchmarks.md.
VOICES = {"en": "en-us", "zh": "cmn-latn-pinyin"}
BATCHES = (1, 8, 32)
CLIP_S, CLIP_WORDS = 10.0, 25  # the throughput's clips
SENTENCES = {
    "en": ["The quick brown fox jumps over the lazy dog, and then it runs away into the quiet forest.",
           "Please call Stella. Ask her to bring these things with her from the store: six spoons of fresh snow peas.",
           "Yesterday morning, the old captain told us a long story about storms, ships and islands far away.",
           "Numbers like seven, twelve and forty-two are read aloud, one after another, without any hurry at all.",
           "She sells sea shells by the sea shore; the shells she sells are surely sea shells, I'm sure.",
           "When the music stopped, everyone in the little room looked up and waited for somebody to speak."],
    "zh": ["今天天气很好，我们一起去公园散步吧。",
           "我爱Python编程，因为它简单又好用。",
           "这本书讲的是一个小男孩和他的狗的故事。",
           "明天早上八点，请大家准时到学校门口集合。",
           "春天来了，花园里开满了红色和黄色的花。",
           "他每天晚上都会读半个小时的书再睡觉。"],
}


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(unit: str, voice: str) -> np.ndarray:
    """One unit spoken alone by espeak-ng, float32 at RATE."""
    import soundfile as sf
    import soxr

    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "unit.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), unit], check=True, capture_output=True)
        audio, rate = sf.read(wav, dtype="float32")
    return soxr.resample(audio, rate, RATE).astype(np.float32)


def loud_frames(audio: np.ndarray) -> np.ndarray:
    """Whether each whole 5 ms frame reaches THRESHOLD (RMS)."""
    frames = audio[: len(audio) // FRAME * FRAME].reshape(-1, FRAME)
    return np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1)) >= THRESHOLD


def trim(audio: np.ndarray) -> np.ndarray:
    """From the first loud frame to the end of the last: the unit's own sound, cut at whole frames,
    so that its first and last 5 ms are loud by construction."""
    loud = np.flatnonzero(loud_frames(audio))
    if not len(loud):
        raise ValueError("espeak-ng made no sound above the threshold")
    return audio[loud[0] * FRAME:(loud[-1] + 1) * FRAME]


@dataclass(frozen=True)
class Truth:
    """A sentence's audio at RATE, its text, and each unit's true (start s, end s)."""
    text: str
    chinese: bool
    audio: np.ndarray
    words: list[tuple[str, float, float]]


def gaps(count: int, rng: np.random.Generator) -> list[int]:
    """The silences between `count` words, in samples: whole 5 ms frames, some of them none."""
    ms = rng.uniform(*GAP_MS, size=count)
    ms[rng.random(count) < TOUCHING] = 0
    return [int(round(m / 5)) * FRAME for m in ms]


def build_truth(text: str, chinese: bool, rng: np.random.Generator, speak_unit=speak) -> Truth:
    """The text's units (alignment.units: what the aligner times) spoken one by one and joined."""
    voice = VOICES["zh" if chinese else "en"]
    units = alignment.units(text, chinese)
    pieces = [trim(speak_unit(unit, voice)) for unit in units]
    edge = np.zeros(int(EDGE_S * RATE), np.float32)
    parts, words, at = [edge], [], len(edge)
    for unit, piece, gap in zip(units, pieces, [0] + gaps(len(units) - 1, rng)):
        parts += [np.zeros(gap, np.float32), piece]
        at += gap
        words.append((unit, at / RATE, (at + len(piece)) / RATE))
        at += len(piece)
    return Truth(text, chinese, np.concatenate(parts + [edge]), words)


def truths(seed: int) -> dict[str, list[Truth]]:
    rng = np.random.default_rng(seed)
    return {lang: [build_truth(text, lang == "zh", rng) for text in texts] for lang, texts in SENTENCES.items()}


def boundary_errors(truth: Truth, timed_words: list[tuple[str, float, float]]) -> dict[str, list[float]]:
    """|start - true start| and |end - true end| of each unit, in seconds."""
    if [w for w, _, _ in timed_words] != [w for w, _, _ in truth.words]:
        raise ValueError(f"the aligner dropped or changed a unit of {truth.text!r}: {timed_words}")
    return {"start": [abs(s - ts) for (_, s, _), (_, ts, _) in zip(timed_words, truth.words)],
            "end": [abs(e - te) for (_, _, e), (_, _, te) in zip(timed_words, truth.words)]}


def summary(errors: list[float]) -> dict:
    e = np.asarray(errors)
    return {"n": len(e), "p50_ms": float(np.percentile(e, 50) * 1000), "p90_ms": float(np.percentile(e, 90) * 1000),
            "max_ms": float(e.max() * 1000), "within_40ms": float((e <= TARGET_S).mean())}


def end_floor(truth: Truth) -> list[float]:
    """The end errors of an aligner whose path were exact: each unit from its true start to the next
    one's (the path gives every frame to some token), then fitted to the sound inside it as the
    aligner fits its own (alignment.fitted_to_sound). What the fit alone leaves at the ends."""
    bounds = [start for _, start, _ in truth.words] + [len(truth.audio) / RATE]
    spans = alignment.fitted_to_sound(truth.audio, RATE, list(zip(bounds[:-1], bounds[1:])))
    return [abs(got - end) for (_, got), (_, _, end) in zip(spans, truth.words)]


def accuracy(aligner, built: dict[str, list[Truth]]) -> dict:
    """Per language: the boundary errors of `aligner(clips, texts, chinese)` against the built truth
    (starts, ends, both), and the end errors the fit to the sound alone implies (end_floor)."""
    result = {}
    for lang, truths_ in built.items():
        got = aligner([t.audio for t in truths_], [t.text for t in truths_], [t.chinese for t in truths_])
        errors = {"start": [], "end": [], "end_floor": []}
        for truth, words in zip(truths_, got):
            for side, values in boundary_errors(truth, words).items():
                errors[side] += values
            errors["end_floor"] += end_floor(truth)
        result[lang] = {"seconds": sum(len(t.audio) for t in truths_) / RATE, "units": len(errors["start"]),
                        **{side: summary(values) for side, values in errors.items()},
                        "both": summary(errors["start"] + errors["end"])}
    return result


def ctranslate2_peer(folder: str, recognizer):
    """CTranslate2's own Whisper align() on the same CTranslate2 folder, its token times read as
    faster-whisper reads them (a token starts where the path first reaches it; a word from its first
    token's start to the next word's): the aligner faster-whisper's word timestamps come from. None
    when CTranslate2 is not installed or the model is not a CTranslate2 folder."""
    from inference.analysis.ctranslate2_whisper import is_ctranslate2_folder

    try:
        import ctranslate2
    except ImportError:
        return None
    if not is_ctranslate2_folder(folder):
        return None
    model = ctranslate2.models.Whisper(folder, device="cpu", compute_type="float32")
    pipe = recognizer.pipe

    def aligner(clips, texts, chinese):
        out = []
        for clip, text, zh in zip(clips, texts, chinese):
            spoken = alignment.spoken_units(text, zh)
            ids, counts = alignment.token_ranges(pipe.tokenizer, spoken)
            features = pipe.feature_extractor([clip], sampling_rate=RATE, return_tensors="np").input_features
            start = alignment.prompt(pipe.model, pipe.tokenizer, zh)[:-1]  # align() adds <|notimestamps|>
            found = model.align(ctranslate2.StorageView.from_array(features.astype(np.float32)), start, [ids],
                                [len(clip) // pipe.feature_extractor.hop_length], median_filter_width=7)[0]
            rows, cols = np.array(found.alignments).T
            token_starts = cols[np.concatenate([[True], np.diff(rows) > 0])] * alignment.FRAME_S
            edges = np.concatenate([[0], np.cumsum(counts)])
            out.append([(u.text, float(token_starts[a]), float(token_starts[b]))
                        for u, a, b in zip(spoken, edges[:-1], edges[1:])])
        return out
    return aligner, f"CTranslate2 {ctranslate2.__version__} align()"


def throughput_batch(size: int) -> tuple[list[np.ndarray], list[str]]:
    """`size` clips of CLIP_S s with CLIP_WORDS words each. The audio is noise: what the aligner does
    with a clip (one encoder window, a forced pass, DTW over tokens x frames) costs the same whatever
    it says."""
    words = " ".join(SENTENCES["en"]).split()
    rng = np.random.default_rng(size)
    clips, texts = [], []
    for i in range(size):
        clips.append((rng.standard_normal(int(CLIP_S * RATE)) * 0.1).astype(np.float32))
        texts.append(" ".join(words[(i * CLIP_WORDS + k) % len(words)] for k in range(CLIP_WORDS)))
    return clips, texts


def throughput(recognizer, sizes, runs: int) -> list[dict]:
    rows = []
    for size in sizes:
        clips, texts = throughput_batch(size)
        seconds = timed(lambda: alignment.align(recognizer, clips, texts, [False] * size), runs)
        spoken = alignment.spoken_units(texts[0], False)
        tokens = sum(alignment.token_ranges(recognizer.pipe.tokenizer, spoken)[1])
        dtw = timed(lambda: alignment.unit_times(np.random.rand(tokens + 1, int(CLIP_S / alignment.FRAME_S)),
                                                 [1] * tokens, CLIP_S), runs)
        rows.append({"batch": size, "audio_s": size * CLIP_S, "median_s": seconds,
                     "audio_s_per_s": size * CLIP_S / seconds, "tokens_per_clip": tokens, "dtw_ms_per_clip": dtw * 1000})
    return rows


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU, {torch.get_num_threads()} threads"


def load(args, scratch: Path):
    """The recognizer and what it is: a checkpoint through the app's loading code, or random weights
    written by bench/analysis_beside.py in the published (or tiny) shapes."""
    if args.random_published or args.random_tiny:
        from bench.analysis_beside import SHAPES, write_whisper

        shape = "published" if args.random_published else "tiny"
        folder = write_whisper(scratch / f"whisper-{shape}", SHAPES[shape][0])
        named = "whisper-large-v3-turbo's shapes" if shape == "published" else "tiny shapes"
        return load_recognizer(str(folder), args.device), f"random weights in {named}"
    return load_recognizer(args.asr_model, args.device), args.asr_model


def report(result: dict) -> str:
    lines = [f"# Word alignment: {result['model']} on {result['device']}", ""]
    if result.get("meaningless"):
        lines += ["**RANDOM WEIGHTS: the errors below are MEANINGLESS (the run works; the model times nothing).**", ""]
    if result["accuracy"] is None:
        lines += [f"Boundary errors: not measured ({result['accuracy_skipped']}).", ""]
    else:
        lines += ["| language | audio s | units | boundary | p50 ms | p90 ms | max ms | within 40 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        for lang, r in result["accuracy"].items():
            for side in ("start", "end", "both", "end_floor"):
                s = r[side]
                lines.append(f"| {lang} | {r['seconds']:.1f} | {r['units']} | {side} | {s['p50_ms']:.0f} | "
                             f"{s['p90_ms']:.0f} | {s['max_ms']:.0f} | {s['within_40ms']:.0%} |")
        lines += ["", "end_floor: the end errors if the path were exact (each unit up to the next one's start), after "
                  "the fit to the sound inside each span: what the fit alone leaves.", ""]
        if result.get("peer"):
            lines += [*peer_report(result), ""]
    lines += [f"Throughput: {CLIP_S:g} s clips of {CLIP_WORDS} words, median of {result['runs']} runs after a warm-up.", "",
              "| batch | median s | audio s per s | tokens per clip | DTW ms per clip |", "|---|---|---|---|---|"]
    for r in result["throughput"]:
        rate = r["audio_s_per_s"]
        rate = f"{rate:.0f}" if rate >= 10 else f"{rate:.2f}"  # a CPU's published-shape run is under 1
        lines.append(f"| {r['batch']} | {r['median_s']:.3f} | {rate} | {r['tokens_per_clip']} | "
                     f"{r['dtw_ms_per_clip']:.0f} |")
    return "\n".join(lines) + "\n"


def peer_report(result: dict) -> list[str]:
    """The peer's errors on the same truth, and how many times ours are smaller at p90."""
    peer = result["peer"]
    lines = [f"The same truth through {peer['name']} on the same model (the peer):", "",
             "| language | boundary | peer p50 ms | peer p90 ms | ours p90 ms | peer p90 / ours |", "|---|---|---|---|---|---|"]
    for lang, theirs in peer["accuracy"].items():
        ours = result["accuracy"][lang]
        for side in ("start", "end", "both"):
            ratio = theirs[side]["p90_ms"] / max(ours[side]["p90_ms"], 1e-9)
            lines.append(f"| {lang} | {side} | {theirs[side]['p50_ms']:.0f} | {theirs[side]['p90_ms']:.0f} | "
                         f"{ours[side]['p90_ms']:.0f} | {ratio:.1f}x |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--asr-model", default="openai/whisper-large-v3-turbo", help="a hub id or a local folder")
    ap.add_argument("--random-published", action="store_true", help="random weights in whisper-large-v3-turbo's shapes")
    ap.add_argument("--random-tiny", action="store_true", help="random weights in tiny shapes (a CPU smoke run)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/voxcpm-align")
    ap.add_argument("--no-peer", action="store_true", help="leave CTranslate2's align() out")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="voxcpm_align_"))
    try:
        recognizer, model = load(args, scratch)
        result = {"model": model, "device": device_name(args.device), "runs": args.runs,
                  "meaningless": args.random_published or args.random_tiny, "accuracy": None}
        if espeak_available():
            built = truths(args.seed)  # one truth for both aligners
            result["accuracy"] = accuracy(
                lambda clips, texts, zh: alignment.align(recognizer, clips, texts, zh), built)
            peer = None if args.no_peer else ctranslate2_peer(args.asr_model, recognizer)
            if peer is not None:
                result["peer"] = {"name": peer[1], "accuracy": accuracy(peer[0], built)}
        else:
            result["accuracy_skipped"] = "espeak-ng is not installed: the truth is built with it"
        result["throughput"] = throughput(recognizer, args.batches, args.runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # a published-shape checkpoint is 3 GB
    (out / "alignment.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    text = report(result)
    (out / "alignment.md").write_text(text, encoding="utf-8")
    print(text)
    if result["meaningless"]:
        print("WARNING: random weights. The boundary errors above are MEANINGLESS; only the throughput means something.")


if __name__ == "__main__":
    main()
