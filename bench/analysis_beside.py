"""Live streams while another client scores a take and transcribes a clip (issue 44, item 1): the
whole app over HTTP, its analysis process on the same GPU as its engine.

    python -m bench.analysis_beside --checkpoint CKPT --streams 64 --rounds 3   # published shapes
    python -m bench.analysis_beside --checkpoint CKPT --shapes tiny --streams 4  # a smoke run on a CPU

Each round runs a burst of `--streams` long requests twice: alone, and beside a client that
evaluates a 25 s take against a clip and then transcribes a 25 s clip, back to back. In both, once
the burst plays, one new request is sent: its time to first audio is what a new visitor gets. Per
round: the largest gap between two audio frames of any stream (what a player must cover with its
prebuffer), and the new request's first audio, alone and beside; then the medians.

The analysis models are random weights in the published shapes (`--shapes published`:
whisper-large-v3-turbo, wavlm-base-plus-sv), written here with a tokenizer of the published
vocabulary's size, so the app loads and runs them as it loads the real ones. A random Whisper
never says it has finished: its generation config holds it to WORDS_TOKENS tokens a window, about
what 25 s of speech takes.
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from bench import http_load
from bench.serve import free_port, start_app, wait_ready, write_random_checkpoint

ROOT = Path(__file__).resolve().parent.parent
RATE = 16000
WORDS_TOKENS = 120  # a 25 s window of speech, as bench/take_evaluation.py holds the published Whisper
TEXT = "The quick brown fox jumps over the lazy dog, and the voice keeps going for a while longer."
SHAPES = {  # (Whisper, WavLM) configuration arguments
    "published": (dict(num_mel_bins=128, d_model=1280, encoder_layers=32, decoder_layers=4, encoder_attention_heads=20,
                       decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120, vocab_size=51866,
                       max_source_positions=1500, max_target_positions=448),
                  dict(num_labels=1211)),
    "tiny": (dict(num_mel_bins=80, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, vocab_size=51866,
                  max_source_positions=1500, max_target_positions=448),
             dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, conv_dim=(8, 8, 8),
                  conv_stride=(5, 8, 8), conv_kernel=(10, 8, 8), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=2, tdnn_dim=(8, 8), tdnn_kernel=(3, 1), tdnn_dilation=(1, 1),
                  xvector_output_dim=8, num_buckets=8, max_bucket_distance=16)),
}
ALIGNMENT_HEADS = [[2, 4], [2, 11], [3, 3], [3, 6], [3, 11], [3, 14]]  # whisper-large-v3-turbo's


def write_whisper(folder: Path, shape: dict) -> Path:
    """A random Whisper in `shape`, with a byte-level tokenizer of vocab_size tokens (the published
    special tokens at their ids, timestamps after <|notimestamps|>), as transformers saves one."""
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor, WhisperTokenizer)

    vocab_size = shape["vocab_size"]
    eot, sot, notimestamps = 50257, 50258, 50363
    names = [f"<|w{i}|>" for i in range(vocab_size)]
    names[:256] = _byte_symbols()
    names[eot], names[sot], names[sot + 1], names[50359], names[notimestamps] = (
        "<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
    for i in range(notimestamps + 1, vocab_size):
        names[i] = f"<|{(i - notimestamps - 1) * 0.02:.2f}|>"
    files = Path(tempfile.mkdtemp(prefix="whisper_tokenizer_"))
    (files / "vocab.json").write_text(json.dumps({name: i for i, name in enumerate(names)}), encoding="utf-8")
    (files / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tokenizer = WhisperTokenizer.from_pretrained(str(files))
    tokenizer.add_special_tokens({"additional_special_tokens": [names[i] for i in (sot, sot + 1, 50359, notimestamps)]})
    config = WhisperConfig(pad_token_id=eot, bos_token_id=eot, eos_token_id=eot, decoder_start_token_id=sot, **shape)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        no_timestamps_token_id=notimestamps, is_multilingual=False, alignment_heads=ALIGNMENT_HEADS
        if shape["decoder_layers"] >= 4 else [[0, 0]], max_initial_timestamp_index=50,
        begin_suppress_tokens=[eot], suppress_tokens=[eot], min_new_tokens=WORDS_TOKENS, max_new_tokens=WORDS_TOKENS)
    model.save_pretrained(folder)
    processor = WhisperProcessor(WhisperFeatureExtractor(feature_size=shape["num_mel_bins"]), tokenizer)
    processor.save_pretrained(folder)
    return folder


def write_wavlm(folder: Path, shape: dict) -> Path:
    import torch
    from transformers import Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector

    torch.manual_seed(0)
    WavLMForXVector(WavLMConfig(**shape)).eval().save_pretrained(folder)
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, padding_value=0.0, do_normalize=True,
                             return_attention_mask=True).save_pretrained(folder)
    return folder


def _byte_symbols() -> list[str]:
    """The printable stand-in of each byte, in byte order (the byte-level BPE alphabet)."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra, out = 0, []
    for b in range(256):
        out.append(chr(b) if b in shown else chr(256 + extra))
        extra += b not in shown
    return out


def wav(seconds: float, seed: int) -> bytes:
    import soundfile as sf

    noise = np.random.default_rng(seed).standard_normal(int(seconds * RATE)).astype(np.float32) * 0.1
    out = io.BytesIO()
    sf.write(out, noise, RATE, format="WAV", subtype="PCM_16")
    return out.getvalue()


def analyse(url: str, stop: threading.Event, took: list[float]):
    """Evaluates a 25 s take against a clip, then transcribes a 25 s clip, until `stop`."""
    take, clip = wav(25.0, 1), wav(25.0, 2)
    with httpx.Client(base_url=url, timeout=600) as client:
        while not stop.is_set():
            began = time.perf_counter()
            scored = client.post("/voxcpm/evaluate", files={"file": ("take.wav", take, "audio/wav"),
                                                           "reference": ("clip.wav", clip, "audio/wav")},
                                 data={"text": TEXT})
            heard = client.post("/voxcpm/transcribe", files={"file": ("clip.wav", clip, "audio/wav")})
            if scored.status_code != 200 or heard.status_code != 200:
                raise SystemExit(f"the analysis failed: {scored.status_code} {scored.text[:300]} / "
                                 f"{heard.status_code} {heard.text[:300]}")
            took.append(time.perf_counter() - began)


def newcomer(url: str, after_s: float, patches: int, out: dict):
    """One request sent `after_s` into the burst: its time to first audio at the client."""
    time.sleep(after_s)

    async def one():
        async with http_load.session(url, 1) as client:
            await http_load.warm(client)
            return await http_load.one_request(client, http_load.request_body(10_000, patches, 10, TEXT), None)
    out["result"] = asyncio.run(one())


def burst(url: str, streams: int, patches: int, clients: int, beside: bool, words: bool = False) -> dict:
    """`words`: beside means the streams themselves ask for word timestamps, not another client."""
    stop, took, late = threading.Event(), [], {}
    side = threading.Thread(target=analyse, args=(url, stop, took)) if beside and not words else None
    new = threading.Thread(target=newcomer, args=(url, 1.5, 20, late))
    if side is not None:
        side.start()
    new.start()
    try:
        results, wall = http_load.in_processes("burst", clients, url, streams, _Body(patches, beside and words),
                                               http_load.stay)
    finally:
        stop.set()
        new.join()
        if side is not None:
            side.join()
    served = [r for r in results if r.first_audio is not None]
    gaps = [g for r in served for g in r.gaps]
    return {"beside": beside, "streams": len(served), "largest_gap_ms": max(gaps) * 1e3 if gaps else None,
            "gap_p99_ms": (http_load.percentile(gaps, 99) or 0) * 1e3, "wall_s": wall,
            "new_request_ttfb_ms": late["result"].first_audio * 1e3 if late["result"].first_audio else None,
            "analyses": len(took), "analysis_s": statistics.median(took) if took else None,
            "worded": sum(r.words for r in served), "words_missing": sum(len(r.words_missing) for r in served),
            "why_missing": sorted({w[:120] for r in served for w in r.words_missing}),
            "words_after_audio_s": max((r.words_after_audio_s for r in served if r.words_after_audio_s is not None),
                                       default=None)}


class _Body:
    """Picklable request bodies for the client processes."""

    def __init__(self, patches: int, words: bool = False):
        self.patches, self.words = patches, words

    def __call__(self, i: int) -> dict:
        body = http_load.request_body(i, self.patches, 10, TEXT)
        return body | {"timestamps": "word"} if self.words else body


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="the TTS checkpoint (default: random published weights)")
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="published")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--patches", type=int, default=300, help="per stream: long enough to outlast the analysis")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4, help="client processes of the burst")
    ap.add_argument("--app-args", default="")
    ap.add_argument("--app-root", default=str(ROOT), help="the checkout whose app.py serves (an earlier one, to compare)")
    ap.add_argument("--words", action="store_true",
                    help="beside = every stream asks for word timestamps (issue 47), instead of another client's analysis")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="voxcpm_beside_"))
    out.mkdir(parents=True, exist_ok=True)
    whisper_shape, wavlm_shape = SHAPES[args.shapes]
    whisper = write_whisper(out / "whisper", whisper_shape)
    wavlm = write_wavlm(out / "wavlm", wavlm_shape)
    checkpoint = args.checkpoint or str(write_random_checkpoint(ROOT / "bench" / "voxcpm2_config.json", out / "checkpoint"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    app = start_app(checkpoint, port, ["--asr-model", str(whisper), "--speaker-model", str(wavlm), *args.app_args.split()],
                    out / "app.log", Path(args.app_root))
    rows = []
    try:
        wait_ready(url, app)
        analyse_once(url)  # the models loaded and warm before anything is timed
        for _ in range(args.rounds):
            for beside in (False, True):
                rows.append(burst(url, args.streams, args.patches, args.clients, beside, args.words))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        app.terminate()
        app.wait(60)
    report = summary(rows, args)
    print(report)
    (out / "beside.md").write_text(report)
    (out / "beside.json").write_text(json.dumps(rows, indent=1))


def analyse_once(url: str):
    stop, took = threading.Event(), []
    thread = threading.Thread(target=analyse, args=(url, stop, took))
    thread.start()
    while not took and thread.is_alive():
        time.sleep(0.2)
    stop.set()
    thread.join()


def summary(rows: list[dict], args) -> str:
    def median(beside: bool, key: str):
        values = [r[key] for r in rows if r["beside"] == beside and r[key] is not None]
        return statistics.median(values) if values else float("nan")
    lines = [f"{args.streams} streams of {args.patches} patches, {args.rounds} rounds, analysis models: {args.shapes} shapes",
             "| | largest gap ms (median) | gap p99 ms | new request's first audio ms | evaluate + transcribe s |",
             "|---|---|---|---|---|"]
    for beside in (False, True):
        analysis = f"{median(beside, 'analysis_s'):.2f}" if beside else "-"
        lines.append(f"| {'beside the analysis' if beside else 'alone'} | {median(beside, 'largest_gap_ms'):.1f} "
                     f"| {median(beside, 'gap_p99_ms'):.1f} | {median(beside, 'new_request_ttfb_ms'):.1f} | {analysis} |")
    if args.words:
        lines.append("beside = every stream asked for word timestamps; per round with them: segments worded / "
                     "missing, last words after the last audio: " + "; ".join(
                         f"{r['worded']} / {r['words_missing']}, {r['words_after_audio_s'] or 0:.2f} s"
                         for r in rows if r["beside"]) + " " + json.dumps(sorted({w for r in rows for w in r["why_missing"]})))
    lines.append("per round, largest gap / new request's first audio: " + "; ".join(
        f"{'beside' if r['beside'] else 'alone'} {r['largest_gap_ms'] or 0:.1f} / {r['new_request_ttfb_ms'] or 0:.1f} ms"
        for r in rows))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
