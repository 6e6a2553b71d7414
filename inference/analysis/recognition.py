"""Speech recognition in the analysis process: a clip's transcript (ultimate cloning needs the
clip's exact words) and a take's words with their times (the take evaluation), from a Whisper
checkpoint loaded through transformers' own pipeline, so that any `openai/whisper-*` hub id or
folder loads as transformers loads it.

Clips are recognized in batches: every clip is one Whisper window (at most MAX_SECONDS, padded to
it by the feature extractor), so a batch changes nothing of what one clip gives
(tests/unit/test_real_whisper_hears_and_times_speech.py checks batched against alone with real
Whisper tiny.en and base).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import InputError
from .alignment import align, has_alignment_heads
from .ctranslate2_whisper import NotConvertible, converted, is_ctranslate2_folder
from .loading import ModelKind, Unusable, local_folder
from .sound_path import SoundLag

log = logging.getLogger("voxcpm.analysis")
MAX_SECONDS = 30.0  # one Whisper window
KIND = ModelKind(
    what="speech recognition model", option="--asr-model",
    fix=("To fix: give a local copy with --asr-model /path/to/folder (a Whisper checkpoint: config.json, "
         "model.safetensors, preprocessor_config.json and the tokenizer's files; or a CTranslate2 one, as "
         "faster-whisper keeps them: model.bin, config.json and tokenizer.json), let the server reach the "
         "Hugging Face hub once so that it downloads, or switch automatic transcripts off with --asr-model none."),
    off=("automatic transcripts are switched off on this server (--asr-model none): type the clip's "
         "transcript, or start the server with --asr-model set to a Whisper checkpoint (a hub id or a local folder)"))


@dataclass(frozen=True)
class Heard:
    """A transcript with its words: (word as recognized, start s, end s), times None where the model
    gives none."""
    text: str
    words: list[tuple[str, float | None, float | None]]


def cached_snapshot(hub_id: str) -> str | None:
    """The folder of a hub id's copy in the Hugging Face cache when it holds CTranslate2's
    model.bin (faster-whisper's models: Systran/faster-whisper-*), else None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_id, "model.bin")
    return str(Path(found).parent) if isinstance(found, str) else None


def converted_root(given: str | None) -> Path:
    """Where CTranslate2 folders are converted: `given` (the app's DATA_DIR/models), else the
    user's cache (a benchmark or a script loading a model itself)."""
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voxcpm2-demo" / "models"


def check_length(seconds: float):
    if seconds > MAX_SECONDS:
        raise InputError(f"the clip lasts {seconds:.1f} s; automatic transcripts take clips of up to "
                         f"{MAX_SECONDS:g} s (one pass of the speech recognition model): trim it, or type "
                         "its transcript")


def load_recognizer(name: str, device: str, converted_in: str | None = None) -> Recognizer:
    """transformers' speech recognition pipeline for a hub id or a local folder, on `device`: half
    precision on a GPU (as Whisper is published), float32 on the CPU. A CTranslate2 folder
    (faster-whisper's) is converted into `converted_in` first, on first use only."""
    import transformers

    name = local_folder(name)  # a hub id not in the cache: the hub asked once, briefly (loading.check_hub)
    folder = name if Path(name).is_dir() else cached_snapshot(name)
    if folder is not None and is_ctranslate2_folder(folder):
        try:
            name = str(converted(folder, converted_root(converted_in)))
        except NotConvertible as exc:  # said as it is: what the folder lacks or holds instead
            raise Unusable(str(exc)) from None
    elif Path(name).is_dir():
        check_folder(Path(name))
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    # Called dtype since transformers 4.56; torch_dtype before (requirements.txt allows 4.40 on).
    major, minor = (int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return Recognizer(transformers.pipeline("automatic-speech-recognition", model=name, device=device, **{key: dtype}))


def check_folder(folder: Path):
    """Unusable, naming what is wrong, for a folder that transformers would refuse with a message
    about something else ("Unrecognized model", "Could not load model ... with any of the following
    classes"): one that is not a Whisper checkpoint, or lacks files a Whisper checkpoint needs."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        config = None
    except (OSError, ValueError) as exc:
        raise Unusable(f"its config.json cannot be read ({exc})") from None
    if config is not None and config.get("model_type") != "whisper":
        kind = config.get("model_type") or ", ".join(config.get("architectures") or []) or "no model_type"
        raise Unusable(f"the folder {folder} holds a checkpoint that is not a Whisper checkpoint (its config.json "
                       f"says {kind})")
    missing = [] if config is not None else ["config.json"]
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        missing.append("the weights (model.safetensors)")
    if not any((folder / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")):
        missing.append("preprocessor_config.json")
    if not any((folder / f).is_file() for f in ("tokenizer.json", "vocab.json")):
        missing.append("the tokenizer (tokenizer.json, or vocab.json and merges.txt)")
    if missing:
        raise Unusable(f"the folder {folder} is missing files a Whisper checkpoint needs: {', '.join(missing)}")


class Recognizer:
    """Whisper, through its pipeline's pre- and post-processing, a batch of clips per call."""

    check_length = staticmethod(check_length)  # the window a clip must fit, for the aligner too

    def __init__(self, pipe: Any):
        self.pipe = pipe
        self.rate = int(pipe.feature_extractor.sampling_rate)
        self.sound_lag = SoundLag()  # the aligner's shift of this model's attention onto the sound, learned

    @torch.inference_mode()
    def transcribe(self, clips: list[np.ndarray]) -> list[str]:
        """Each clip's transcript (clips at self.rate, at most MAX_SECONDS each), as the pipeline
        would give it."""
        model = self.pipe.model
        features = self._features(clips)
        tokens = model.generate(features.input_features.to(model.device, model.dtype),
                                attention_mask=features.attention_mask.to(model.device))
        # Deliberate device->host copy: the pipeline's decoding reads the tokens with numpy.
        tokens = (tokens["sequences"] if isinstance(tokens, dict) else tokens).cpu()
        return [self.pipe.postprocess([{"tokens": tokens[i:i + 1], "is_last": True}])["text"].strip()
                for i in range(len(clips))]

    @torch.inference_mode()
    def hear(self, clips: list[np.ndarray], language: str | None = None) -> list[Heard]:
        """Each clip's transcript with its words' times, as pipe(clip, return_timestamps="word")
        gives them, made faster: generate() handed the audio asks the encoder for every layer's
        attention weights and copies them to the host (on an H100, 2.8 s for 5 s of audio instead
        of 0.13 s); handed the encoder's outputs instead (and the mask that says how much is audio,
        so that the alignment stops there), it gives the same words and times at 0.16 s.
        Whisper times its words from the cross-attention heads its generation config names (every
        openai/whisper-* checkpoint does); without them, the words come without times.
        `language` ("en", "zh"): what a multilingual model is told the clips say, where the caller
        knows (a take's text); left to detect it, whisper-base hears espeak-ng's Mandarin as Thai.
        An English-only model takes none."""
        if not has_alignment_heads(self.pipe):
            return [Heard(text, [(word, None, None) for word in text.split()]) for text in self.transcribe(clips)]
        model = self.pipe.model
        features = self._features(clips)
        encoded = model.get_encoder()(features.input_features.to(model.device, model.dtype))
        told = {"language": language} if language and getattr(model.generation_config, "is_multilingual", False) else {}
        out = model.generate(encoder_outputs=encoded, attention_mask=features.attention_mask.to(model.device),
                             return_timestamps=True, return_token_timestamps=True, return_segments=True, **told)
        heard = []
        for segments in out["segments"]:  # one list of segments per clip; one segment per 30 s window
            if not segments:  # nothing said
                heard.append(Heard("", []))
                continue
            # Deliberate device->host copies: the pipeline's decoding reads tokens and times with numpy.
            tokens = torch.cat([segment["tokens"] for segment in segments]).cpu()[None]
            times = [torch.cat([segment["token_timestamps"] for segment in segments]).cpu()]
            words = self.pipe.postprocess([{"tokens": tokens, "token_timestamps": times, "is_last": True}],
                                          return_timestamps="word")
            heard.append(Heard(words["text"].strip(), [(c["text"], *c["timestamp"]) for c in words.get("chunks", [])]))
        return heard

    def align(self, clips: list[np.ndarray], texts: list[str], chinese: list[bool]) -> list[list[tuple[str, float, float]]]:
        """Each clip's text (the words asked for, not heard) timed against it: alignment.py."""
        return align(self, clips, texts, chinese)

    def _features(self, clips: list[np.ndarray]):
        return self.pipe.feature_extractor(clips, sampling_rate=self.rate, return_tensors="pt",
                                           return_attention_mask=True)
