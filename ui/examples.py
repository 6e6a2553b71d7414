"""Clickable examples for each mode, read from assets/voices.json (paths made absolute here)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@lru_cache(maxsize=1)
def _catalogue() -> dict:
    return json.loads((ASSETS / "voices.json").read_text(encoding="utf-8"))


def transcript_of(relative: str) -> str:
    for voice in _catalogue()["voices"]:
        if voice["file"] == relative:
            return voice["transcript"]
    raise KeyError(f"assets/voices.json has no transcript for {relative}")


def design_examples() -> list[list[str]]:
    return [list(row) for row in _catalogue()["design"]]


def cloning_examples() -> list[list[str]]:
    return [[text, str(ASSETS / clip), style] for text, clip, style in _catalogue()["cloning"]]


def ultimate_examples() -> list[list[str]]:
    return [[text, str(ASSETS / clip), transcript_of(clip)] for text, clip in _catalogue()["ultimate"]]
