"""Automatic transcripts of reference clips (ultimate cloning needs the clip's exact words): a
speech recognition model, Whisper by default, through transformers' `pipeline("automatic-speech-
recognition")`, loaded on first use.

Where it runs: a transcription is a call on an engine's worker thread (`Serving.call`, between two
steps, like every other piece of GPU work), on that engine's device: the GPU it serves, or the CPU
with an engine on the CPU. Loading is the slow part (a download on first use, then reading the
weights), so it never happens there: a call that finds no model on its device answers
`NotLoaded(device)`, and its caller has the model loaded (on a thread of its own) and calls again. Live
streams thus wait only for the transcription itself, once, between two patches; a clip is one
pass of the model (at most MAX_SECONDS), so that wait stays short.

A model that cannot be loaded (offline and not in the cache, a missing folder) fails the
transcriptions with `AsrUnavailable`, whose message says how to fix it, and is tried again only
after RETRY_AFTER_S (a hub that cannot be reached takes half a minute to say so); nothing else in
the app depends on it. The loading rules are shared with the speaker model (on_demand.py).

The take evaluation (scores.py) asks for words with their times (`words_on_engine`): Whisper's
word timestamps, from its cross-attention alignment heads, which the published checkpoints name in
their generation config; a checkpoint without them gives the words without times.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..errors import InputError
from ..request.audio_input import resample
from .on_demand import RETRY_AFTER_S, ModelUnavailable, NotLoaded, OnDemand, local_folder

log = logging.getLogger("voxcpm.asr")
__all__ = ["AsrUnavailable", "Heard", "Loaded", "MAX_SECONDS", "NotLoaded", "RETRY_AFTER_S", "Transcriber",
           "check_length", "load_pipeline"]
MAX_SECONDS = 30.0  # one Whisper window: one pass, a bounded wait for the streams
FIX = ("To fix: give a local copy with --asr-model /path/to/folder (a Whisper checkpoint: config.json, "
       "model.safetensors, preprocessor_config.json and the tokenizer's files), let the server reach the "
       "Hugging Face hub once so that it downloads, or switch automatic transcripts off with --asr-model none.")


class AsrUnavailable(ModelUnavailable):
    """No transcript can be made (switched off, or the model cannot be loaded): the message says why
    and how to fix it. The HTTP layer answers 503, with Retry-After when `retry_after_s` is set."""


@dataclass(frozen=True)
class Loaded:
    pipe: Any  # a transformers AutomaticSpeechRecognitionPipeline, or anything called the same way
    rate: int  # the sample rate its feature extractor takes


@dataclass(frozen=True)
class Heard:
    """A transcript with its words: (word as recognized, start s, end s), times None where the model
    gives none."""
    text: str
    words: list[tuple[str, float | None, float | None]]


def load_pipeline(name: str, device: torch.device):
    """transformers' speech recognition pipeline for a hub id or a local folder, on `device`: half
    precision on a GPU (as Whisper is published), float32 on the CPU."""
    import transformers

    name = local_folder(name)  # a hub id not in the cache: the hub asked once, briefly (on_demand.check_hub)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    # Called dtype since transformers 4.56; torch_dtype before (requirements.txt allows 4.40 on).
    major, minor = (int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return transformers.pipeline("automatic-speech-recognition", model=name, device=device, **{key: dtype})


def check_length(seconds: float):
    if seconds > MAX_SECONDS:
        raise InputError(f"the clip lasts {seconds:.1f} s; automatic transcripts take clips of up to "
                         f"{MAX_SECONDS:g} s (one pass of the speech recognition model): trim it, or type "
                         "its transcript")


class Transcriber(OnDemand):
    """One model name (None: switched off), loaded at most once per device, from any thread."""
    what = "speech recognition model"
    option = "--asr-model"
    fix = FIX
    error = AsrUnavailable
    load_model = staticmethod(load_pipeline)

    def switched_off(self) -> str:
        return ("automatic transcripts are switched off on this server (--asr-model none): "
                "type the clip's transcript, or start the server with --asr-model set to a "
                "Whisper checkpoint (a hub id or a local folder)")

    def wrap(self, pipe) -> Loaded:
        return Loaded(pipe, int(pipe.feature_extractor.sampling_rate))

    def on_engine(self, rate: int, audio: np.ndarray) -> Callable[[Any], str | NotLoaded]:
        """fn(engine) for Serving.call: the clip's transcript, made on the engine's device by the
        model loaded there, or NotLoaded(device) when there is none yet."""
        def transcribe(engine) -> str | NotLoaded:
            device = str(engine.device)
            loaded = self.loaded(device)
            if loaded is None:
                return NotLoaded(device)
            samples = resample(audio, rate, loaded.rate)
            return loaded.pipe({"raw": samples, "sampling_rate": loaded.rate})["text"].strip()
        return transcribe

    def words_on_engine(self, rate: int, audio: np.ndarray) -> Callable[[Any], Heard | NotLoaded]:
        """fn(engine) for Serving.call: the transcript of at most MAX_SECONDS of audio with each
        word's times, or NotLoaded(device)."""
        def hear(engine) -> Heard | NotLoaded:
            device = str(engine.device)
            loaded = self.loaded(device)
            if loaded is None:
                return NotLoaded(device)
            inputs = {"raw": resample(audio, rate, loaded.rate), "sampling_rate": loaded.rate}
            if not has_alignment_heads(loaded.pipe):
                text = loaded.pipe(inputs)["text"].strip()
                return Heard(text, [(word, None, None) for word in text.split()])
            try:
                out = timed_words(loaded.pipe, inputs)
            except (TypeError, ValueError, KeyError) as exc:  # another transformers: its pipeline's own way
                log.warning("word timestamps through the encoder's outputs failed (%s); using the pipeline's", exc)
                out = loaded.pipe(inputs, return_timestamps="word")
            return Heard(out["text"].strip(), [(c["text"], *c["timestamp"]) for c in out.get("chunks", [])])
        return hear


@torch.inference_mode()
def timed_words(pipe, inputs: dict) -> dict:
    """What pipe(inputs, return_timestamps="word") answers, made faster: Whisper's generate() with
    token timestamps, handed the audio, asks its encoder for every layer's attention weights too
    and copies them to the host (on an H100, 2.8 s for 5 s of audio instead of 0.13 s). Handed the
    encoder's outputs instead (and the mask that says how much is audio, so that the alignment
    stops there), it gives the same words and times (tests/http/test_evaluate.py checks them
    against the pipeline) at 0.16 s."""
    model = pipe.model
    features = pipe.feature_extractor(inputs["raw"], sampling_rate=inputs["sampling_rate"], return_tensors="pt",
                                      return_attention_mask=True)
    encoded = model.get_encoder()(features.input_features.to(model.device, model.dtype))
    out = model.generate(encoder_outputs=encoded, attention_mask=features.attention_mask.to(model.device),
                         return_timestamps=True, return_token_timestamps=True, return_segments=True)
    if "segments" in out:
        times = [torch.cat([segment["token_timestamps"] for segment in each]) for each in out["segments"]]
    else:
        times = out["token_timestamps"]
    return pipe.postprocess([{"tokens": out["sequences"], "token_timestamps": times, "is_last": True}],
                            return_timestamps="word")


def has_alignment_heads(pipe) -> bool:
    """Whether Whisper can time its words: its generation config names the cross-attention heads
    that follow the audio (every openai/whisper-* checkpoint does)."""
    config = getattr(getattr(pipe, "model", None), "generation_config", None)
    return bool(getattr(config, "alignment_heads", None))
