"""VoxCPM2 inference core: `Engine.from_pretrained(...)`, `engine.stream(SynthesisRequest(...))`."""
from .runtime.engine import Engine
from .errors import AudioInputError, CheckpointError, InputError
from .request.reference import ReferenceClip
from .request.request import AudioChunk, SynthesisRequest

__all__ = ["Engine", "SynthesisRequest", "AudioChunk", "InputError", "AudioInputError", "CheckpointError", "ReferenceClip"]
