"""Speaker embeddings for the take evaluation's speaker similarity (scores.py): a speaker-verification
model, transformers' WavLM x-vector (`microsoft/wavlm-base-plus-sv` by default), loaded on first use
as the speech recognition model is (on_demand.py: once per device, never on the worker thread, a
failure remembered and explained). An embedding is one call on an engine's worker thread, of at
most MAX_SECONDS of audio, between two steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..request.audio_input import resample
from .on_demand import ModelUnavailable, NotLoaded, OnDemand, local_folder

DEFAULT_MODEL = "microsoft/wavlm-base-plus-sv"
MAX_SECONDS = 30.0  # one call's audio: the wait it adds to a stream's patch stays short
FIX = ("To fix: give a local copy with --speaker-model /path/to/folder (a WavLM x-vector checkpoint: "
       "config.json, model.safetensors and preprocessor_config.json), let the server reach the Hugging Face hub "
       "once so that it downloads, or switch speaker similarity off with --speaker-model none.")


class SpeakerUnavailable(ModelUnavailable):
    """No speaker embedding can be made: the message says why and how to fix it."""


@dataclass(frozen=True)
class SpeakerModel:
    features: Any  # the checkpoint's feature extractor (raw samples, normalized)
    model: Any  # WavLMForXVector, or any model whose output has .embeddings
    rate: int
    device: torch.device

    @torch.inference_mode()
    def embed(self, samples: np.ndarray) -> np.ndarray:
        inputs = self.features(samples, sampling_rate=self.rate, return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        embedding = self.model(**inputs).embeddings[0].float()
        # Deliberate device->host copy: one short vector per call, which the scores need on the CPU.
        return torch.nn.functional.normalize(embedding, dim=-1).cpu().numpy()


def load_speaker_model(name: str, device: torch.device) -> SpeakerModel:
    """A WavLM x-vector checkpoint (hub id or local folder) on `device`, in float32 (small enough)."""
    from transformers import AutoFeatureExtractor, WavLMForXVector

    name = local_folder(name)
    features = AutoFeatureExtractor.from_pretrained(name)
    model = WavLMForXVector.from_pretrained(name).to(device).eval()
    return SpeakerModel(features, model, int(features.sampling_rate), device)


class SpeakerEncoder(OnDemand):
    what = "speaker verification model"
    option = "--speaker-model"
    fix = FIX
    error = SpeakerUnavailable
    load_model = staticmethod(load_speaker_model)

    def switched_off(self) -> str:
        return ("speaker similarity is switched off on this server (--speaker-model none): start it with "
                f"--speaker-model set to a WavLM x-vector checkpoint (a hub id such as {DEFAULT_MODEL}, "
                "or a local folder)")

    def on_engine(self, rate: int, audio: np.ndarray) -> Callable[[Any], np.ndarray | NotLoaded]:
        """fn(engine) for Serving.call: the unit-length speaker embedding of at most MAX_SECONDS of
        audio, or NotLoaded(device)."""
        def embed(engine) -> np.ndarray | NotLoaded:
            device = str(engine.device)
            loaded = self.loaded(device)
            if loaded is None:
                return NotLoaded(device)
            return loaded.embed(resample(audio, rate, loaded.rate)[: int(MAX_SECONDS * loaded.rate)])
        return embed
