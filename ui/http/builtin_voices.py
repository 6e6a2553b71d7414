"""OpenAI's voice names as built-in designed voices, so a client written for OpenAI's speech API
keeps its `voice` when it changes its base URL.

VoxCPM2 has no stock speakers: each name is a voice design (a description the model reads before
the text) with a fixed seed, so one name gives the same kind of voice on every request. The
descriptions are ours, chosen to be told apart, not copies of OpenAI's voices. A saved voice of the
same name wins (ui/http/speech_body.py); a request's `instructions` is added to the description,
and its `seed`, when given, replaces the voice's.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinVoice:
    name: str
    description: str
    seed: int

    def control(self, instructions: str | None) -> str:
        """What the model reads before the text: the description, then the request's style if any."""
        return self.description if not instructions else f"{self.description}; {instructions.strip()}"


BUILTIN_VOICES = {v.name: v for v in (
    BuiltinVoice("alloy", "A neutral, clear adult voice, even and balanced, at a moderate pace", 1101),
    BuiltinVoice("ash", "A young man with a slightly husky, relaxed voice, speaking casually", 1102),
    BuiltinVoice("ballad", "A soft-spoken man with a warm, gentle and slightly melodic voice", 1103),
    BuiltinVoice("coral", "A friendly young woman with a bright, warm and cheerful voice", 1104),
    BuiltinVoice("echo", "A calm man with a smooth, resonant mid-range voice, speaking steadily", 1105),
    BuiltinVoice("fable", "A storyteller with an expressive, animated voice and a light British accent", 1106),
    BuiltinVoice("nova", "A young woman with a lively, crisp and energetic voice", 1107),
    BuiltinVoice("onyx", "A man with a deep, low and authoritative voice, speaking slowly", 1108),
    BuiltinVoice("sage", "A mature woman with a calm, thoughtful and reassuring voice", 1109),
    BuiltinVoice("shimmer", "A woman with a soft, airy and soothing voice, speaking gently", 1110),
    BuiltinVoice("verse", "A versatile man with a clear, expressive voice, like a narrator reading aloud", 1111),
)}


def builtin_voice(name: str) -> BuiltinVoice | None:
    """The built-in voice of that name (compared without regard to case or spaces around it), or None."""
    return BUILTIN_VOICES.get(name.strip().casefold())


def listed() -> list[dict]:
    """The built-in voices as GET /v1/audio/voices lists them."""
    return [{"id": v.name, "name": v.name, "object": "voice", "builtin": True, "description": v.description,
             "seed": v.seed} for v in BUILTIN_VOICES.values()]
