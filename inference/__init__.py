"""VoxCPM2 inference core: `Engine.from_pretrained(...)`, `engine.stream(SynthesisRequest(...))`."""
from .engine import Engine
from .errors import AudioInputError, CheckpointError, InputError
from .reference import ReferenceClip
from .request import AudioChunk, SynthesisRequest

__all__ = ["Engine", "SynthesisRequest", "AudioChunk", "InputError", "AudioInputError", "CheckpointError", "ReferenceClip"]
