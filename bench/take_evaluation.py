"""How long one take evaluation (POST /voxcpm/evaluate) keeps a model busy: the words of the take with
their times (Whisper, word timestamps), the take's and its clip's speaker embeddings (WavLM
x-vector) and the scores, for a few seconds of audio.

    python -m bench.take_evaluation --asr-model W --speaker-model S   # checkpoints (folders or hub ids),
                                                                     # through the app's own loading code
    python -m bench.take_evaluation --models published  # random weights in whisper-large-v3-turbo's and
                                                        # wavlm-base-plus-sv's shapes (no download)

The tests' tiny random checkpoints are written by tests/fixtures (tiny_whisper.py, tiny_wavlm.py):
    python -c "from tests.fixtures.tiny_whisper import write_tiny_whisper as w; w('/tmp/tw')"
    python -c "from tests.fixtures.tiny_wavlm import write_tiny_wavlm as w; w('/tmp/twl')"

The published shapes have no tokenizer offline, so that run times the models themselves: Whisper's
generate() with word timestamps, as the app calls it, for TOKENS tokens per 5 s (about what speech
needs; a random model would never stop by itself) and WavLM's forward, in half precision on a GPU as the app loads them.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

RATE = 16000
TOKENS = 24


def timed(fn, repeats: int) -> float:
    fn()  # warm: first-call allocations and kernel choices
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def checkpoints(audio: np.ndarray, clip: np.ndarray, device: str, repeats: int, asr_model: str,
                speaker_model: str) -> dict:
    """The app's own model code (inference/analysis/), in this process: what one evaluation asks of
    the analysis process's models."""
    from inference.analysis import scores
    from inference.analysis.recognition import load_recognizer
    from inference.analysis.speaker import load_speaker

    recognizer, speaker = load_recognizer(asr_model, device), load_speaker(speaker_model, device)
    text = "Hello world, the voice is here today."

    def words():
        heard = recognizer.hear([audio])[0]
        return scores.error_rate(scores.reference_units(text, False), scores.heard_units(heard.words, False), False)

    def similarity():
        return scores.cosine(speaker.embed(audio), speaker.embed(clip))
    return {"words_s": timed(words, repeats), "similarity_s": timed(similarity, repeats)}


def published(audio: np.ndarray, clip: np.ndarray, device: str, repeats: int) -> dict:
    from transformers import (GenerationConfig, Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector,
                              WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration)

    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    # whisper-large-v3-turbo (the app's default --asr-model): 32 encoder layers, 4 decoder layers, 128 mels.
    config = WhisperConfig(vocab_size=51866, num_mel_bins=128, d_model=1280, encoder_layers=32, decoder_layers=4,
                           encoder_attention_heads=20, decoder_attention_heads=20, encoder_ffn_dim=5120,
                           decoder_ffn_dim=5120, max_source_positions=1500, max_target_positions=448,
                           decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257, bos_token_id=50257)
    whisper = WhisperForConditionalGeneration(config).to(device, dtype).eval()
    whisper.generation_config = GenerationConfig(decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257,
                                                 no_timestamps_token_id=50364, is_multilingual=False,
                                                 alignment_heads=[[2, 4], [2, 11], [3, 3], [3, 6], [3, 11], [3, 14]],
                                                 max_initial_timestamp_index=50)
    features = WhisperFeatureExtractor(feature_size=128)
    # wavlm-base-plus-sv: WavLM base (12 layers, 768 wide) with its x-vector head.
    wavlm = WavLMForXVector(WavLMConfig(num_labels=1211)).to(device).eval()
    wav_features = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, do_normalize=True, return_attention_mask=True)

    tokens = int(TOKENS * len(audio) / RATE / 5)

    @torch.inference_mode()
    def words():  # as inference/analysis/recognition.Recognizer.hear calls it
        mel = features(audio, sampling_rate=RATE, return_tensors="pt", return_attention_mask=True)
        encoded = whisper.get_encoder()(mel.input_features.to(device, dtype))
        return whisper.generate(encoder_outputs=encoded, attention_mask=mel.attention_mask.to(device),
                                return_timestamps=True, return_token_timestamps=True, return_segments=True,
                                min_new_tokens=tokens, max_new_tokens=tokens)

    @torch.inference_mode()
    def similarity():
        def embed(x):
            inputs = {k: v.to(device) for k, v in wav_features(x, sampling_rate=RATE, return_tensors="pt").items()}
            return torch.nn.functional.normalize(wavlm(**inputs).embeddings[0], dim=-1)
        return float(embed(audio) @ embed(clip))
    return {"words_s": timed(words, repeats), "similarity_s": timed(similarity, repeats)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", choices=("checkpoints", "published"), default="checkpoints")
    parser.add_argument("--asr-model", default="/tmp/tw")
    parser.add_argument("--speaker-model", default="/tmp/twl")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    noise = np.random.default_rng(0).standard_normal(int(args.seconds * RATE)).astype(np.float32) * 0.1
    clip = noise[: RATE * 3] * 0.5
    if args.models == "published":
        result = published(noise, clip, args.device, args.repeats)
    else:
        result = checkpoints(noise, clip, args.device, args.repeats, args.asr_model, args.speaker_model)
    total = result["words_s"] + result["similarity_s"]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"{args.models} models on {name}, {args.seconds:g} s of audio: words with times {result['words_s'] * 1000:.0f} ms, "
          f"similarity (take + clip) {result['similarity_s'] * 1000:.0f} ms, one evaluation {total * 1000:.0f} ms")


if __name__ == "__main__":
    main()
