"""VoxCPM2 inference core: `Engine.from_pretrained(...)`, `engine.stream(SynthesisRequest(...))`."""
import importlib

from .errors import AudioInputError, CheckpointError, InputError

# Loaded on first use: they import torch (seconds), which the limits (inference.config) and the
# errors, read by app.py's command line and start-up checks, do without.
_LAZY = {"Engine": ".runtime.engine", "SynthesisRequest": ".request.request", "AudioChunk": ".request.request",
         "ReferenceClip": ".request.reference"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)


__all__ = ["Engine", "SynthesisRequest", "AudioChunk", "InputError", "AudioInputError", "CheckpointError", "ReferenceClip"]
