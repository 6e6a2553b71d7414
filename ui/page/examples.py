"""Clickable examples for each mode, read from assets/voices.json (paths made absolute here)."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"


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


@lru_cache(maxsize=1)
def _cached_copies() -> dict[tuple[str, str], Path]:
    """(folder, name) of Gradio's cached copy of each example clip -> the clip in assets/. Gradio
    copies an example's file to <upload folder>/<hash_file of its bytes>/<its name> and hands the
    page that path, the same in every process of this install (the hash seed is kept on disk)."""
    from gradio.processing_utils import hash_file

    clips = {ASSETS / voice["file"] for voice in _catalogue()["voices"]}
    return {(hash_file(clip), clip.name): clip for clip in clips}


def example_clip(path: str, upload_root: str) -> Path | None:
    """The example clip in assets/ whose Gradio cached copy `path` names, or None.

    The copy itself cannot be relied on: the upload folder is shared by every Gradio app on the
    machine, and any of them that shuts down deletes the files it cached (route_utils.
    delete_files_created_by_app), this same example copy included, since Gradio does not keep the
    files of examples shown without caching. A live page would then have its example refused as a
    server path. Only the path's shape is compared (the copy is never opened), so the answer is
    always the public asset and no other file can be reached this way."""
    candidate = Path(os.path.abspath(path))
    roots = {Path(os.path.abspath(upload_root)), Path(upload_root).resolve()}
    if candidate.parent.parent not in roots:
        return None
    return _cached_copies().get((candidate.parent.name, candidate.name))
