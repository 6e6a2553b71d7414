"""Speaker embeddings in the analysis process, for the take evaluation's speaker similarity
(scores.py): a speaker-verification model, transformers' WavLM x-vector
(`microsoft/wavlm-base-plus-sv` by default).

One clip per call, not a padded batch: WavLM's first convolution normalizes over the whole input
(group norm), padding included, so a clip padded to its batch's longest would not get its own
embedding; and a call is a few milliseconds, next to Whisper's hundreds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .loading import ModelKind, local_folder

DEFAULT_MODEL = "microsoft/wavlm-base-plus-sv"
MAX_SECONDS = 30.0  # one call's audio: a take is embedded in windows of at most this, weighted by length
KIND = ModelKind(
    what="speaker verification model", option="--speaker-model",
    fix=("To fix: give a local copy with --speaker-model /path/to/folder (a WavLM x-vector checkpoint: "
         "config.json, model.safetensors and preprocessor_config.json), let the server reach the Hugging Face "
         "hub once so that it downloads, or switch speaker similarity off with --speaker-model none."),
    off=("speaker similarity is switched off on this server (--speaker-model none): start it with "
         f"--speaker-model set to a WavLM x-vector checkpoint (a hub id such as {DEFAULT_MODEL}, or a local folder)"))


@dataclass(frozen=True)
class SpeakerModel:
    features: Any  # the checkpoint's feature extractor (raw samples, normalized)
    model: Any  # WavLMForXVector, or any model whose output has .embeddings
    rate: int
    device: torch.device

    @torch.inference_mode()
    def embed(self, samples: np.ndarray) -> np.ndarray:
        """The unit-length embedding of one clip at self.rate (at most MAX_SECONDS)."""
        inputs = self.features(samples, sampling_rate=self.rate, return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        embedding = self.model(**inputs).embeddings[0].float()
        # Deliberate device->host copy: one short vector per call, which the scores need on the CPU.
        return torch.nn.functional.normalize(embedding, dim=-1).cpu().numpy()


def load_speaker(name: str, device: str) -> SpeakerModel:
    """A WavLM x-vector checkpoint (hub id or local folder) on `device`, in float32 (small enough)."""
    from transformers import AutoFeatureExtractor, WavLMForXVector

    name = local_folder(name)
    features = AutoFeatureExtractor.from_pretrained(name)
    model = WavLMForXVector.from_pretrained(name).to(device).eval()
    return SpeakerModel(features, model, int(features.sampling_rate), torch.device(device))
