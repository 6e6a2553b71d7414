"""Automatic transcripts (inference/serving/asr.py) kept with the clip they were made from, keyed by
the clip's content hash and the model that made them, so that a clip is transcribed once per model:

- an uploaded clip keeps them in memory for its lifetime (uploads.Clip.transcripts; the same audio
  uploaded again finds them by its hash);
- a saved voice keeps them in `<id>.transcripts.json` beside its FLAC (voice_store.VoiceLibrary),
  `{"digest": hash of the FLAC, "texts": {model: text}}`, removed with the voice. The hash is
  checked on reading, so a file that does not belong to the clip beside it is never believed.

They are never the voice's own transcript, which only the user sets (or a transcription asked to
save it): an automatic one is a suggestion the page shows as such, until it is edited."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

SUFFIX = "transcripts.json"


def content_hash(audio: np.ndarray) -> str:
    """The samples' hash: float32 little-endian, as every store holds them."""
    return hashlib.sha256(np.ascontiguousarray(audio, dtype="<f4").tobytes()).hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def beside(flac: Path) -> Path:
    return flac.with_name(f"{flac.name.split('.')[0]}.{SUFFIX}")


def read_beside(flac: Path, model: str) -> str | None:
    """The transcript by `model` kept beside this clip, if its hash still matches the clip."""
    try:
        kept = json.loads(beside(flac).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or unreadable: transcribed again and rewritten
        return None
    if not isinstance(kept, dict) or kept.get("digest") != file_hash(flac):
        return None
    text = (kept.get("texts") or {}).get(model)
    return text if isinstance(text, str) else None


def with_entry(flac: Path, model: str, text: str) -> bytes:
    """The file's new content: what it held for this clip, plus `text` by `model`."""
    digest = file_hash(flac)
    try:
        kept = json.loads(beside(flac).read_text(encoding="utf-8"))
        texts = kept["texts"] if kept.get("digest") == digest and isinstance(kept.get("texts"), dict) else {}
    except (OSError, ValueError, AttributeError, KeyError):
        texts = {}
    texts[model] = text
    return json.dumps({"digest": digest, "texts": texts}, ensure_ascii=False).encode("utf-8")
