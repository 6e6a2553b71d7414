"""Copies a folder voice library (DATA_DIR/voices) into PostgreSQL, for a server moving to replicas:

    python -m ui.library.copy_voices --from ~/.local/share/voxcpm2-demo/voices --to postgresql://USER@HOST/DB

Each voice keeps its name, clip, transcript, the patches encoded for it (so no replica encodes it
again) and its automatic transcripts. A name the database already has is left as it is and
reported, so the copy can be run again after a failure and copies only what is missing. Each voice
is one save (one transaction there): a copy cut short leaves whole voices only.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from inference.errors import InputError

from . import transcripts
from .voice_store import TEMP_SUFFIX, VoiceError, VoiceLibrary, VoiceStore


@dataclass
class Copied:
    copied: list[str] = field(default_factory=list)
    already_there: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # name -> why (the target is full...)


def folder_latents(library: VoiceLibrary, voice_id: str) -> dict[str, dict[str, np.ndarray]]:
    """{encoder identity: {padding side: patches}} of the files DATA_DIR/voices/<id>.<identity>.npz."""
    out = {}
    for path in library.folder.glob(f"{voice_id}.*.npz"):
        if path.name.endswith(TEMP_SUFFIX):
            continue
        identity = path.name[len(voice_id) + 1: -len(".npz")]
        with np.load(path) as saved:
            out[identity] = {side: saved[side].copy() for side in saved.files}
    return out


def folder_transcripts(library: VoiceLibrary, voice_id: str) -> dict[str, str]:
    """{ASR model: text} kept beside the voice's FLAC, if they still belong to it (their hash)."""
    flac = library.folder / f"{voice_id}.flac"
    try:
        kept = json.loads(transcripts.beside(flac).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    texts = kept.get("texts") if isinstance(kept, dict) else None
    if not isinstance(texts, dict):
        return {}
    return {model: text for model in texts if (text := transcripts.read_beside(flac, model)) is not None}


def clip_audio(library: VoiceStore, name: str) -> np.ndarray:
    """The voice's clip as float32 samples: its FLAC decoded (24-bit, so saved again bit for bit)."""
    audio, _ = sf.read(io.BytesIO(library.audio_bytes(name)), dtype="float32")
    return audio


def copy_voices(source: VoiceLibrary, target: VoiceStore) -> Copied:
    done = Copied()
    taken = {v.name.casefold() for v in target.list()}
    for voice in source.list():
        if voice.name.casefold() in taken:
            done.already_there.append(voice.name)
            continue
        try:
            saved = target.save(voice.name, clip_audio(source, voice.name), voice.transcript,
                                folder_latents(source, voice.id))
        except VoiceError as exc:
            if exc.status == 409:  # saved by another copy (or a user) since the listing
                done.already_there.append(voice.name)
                continue
            done.refused[voice.name] = str(exc)
            if exc.status == 503:  # the database went away: the rest would fail alike (run it again)
                break
            continue
        for model, text in folder_transcripts(source, voice.id).items():
            target.keep_automatic_transcript(saved, model, text)
        done.copied.append(voice.name)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", required=True, help="the folder library: DATA_DIR/voices")
    ap.add_argument("--to", dest="target", required=True, help="postgresql://USER[:PASSWORD]@HOST[:PORT]/DB")
    args = ap.parse_args(argv)
    folder = Path(args.source).expanduser()
    if not (folder / "index.sqlite3").is_file():
        ap.error(f"{folder} is not a voice library folder (it has no index.sqlite3): give DATA_DIR/voices")
    from .pg_voice_store import PostgresVoiceLibrary, check_url  # psycopg only here

    try:
        check_url(args.target)
    except InputError as exc:
        ap.error(str(exc).replace("--voice-store", "--to"))
    # The clips' own rate (the engine's input rate when they were saved), so lengths stay right.
    flac = next(folder.glob("*.flac"), None)
    rate = sf.info(str(flac)).samplerate if flac is not None else 16000
    source = VoiceLibrary(folder, sample_rate=rate)
    target = PostgresVoiceLibrary(args.target, sample_rate=rate)  # the servers' default limits
    try:
        done = copy_voices(source, target)
    except VoiceError as exc:  # the database cannot be reached, or refuses the login
        print(f"nothing copied: {exc}", file=sys.stderr)
        return 1
    finally:
        source.close()
        target.close()
    print(f"copied {len(done.copied)} voice(s)" + (f": {', '.join(done.copied)}" if done.copied else ""))
    if done.already_there:
        print(f"left {len(done.already_there)} the database already has: {', '.join(done.already_there)}")
    for name, why in done.refused.items():
        print(f"not copied {name!r}: {why}", file=sys.stderr)
    return 1 if done.refused else 0


if __name__ == "__main__":
    raise SystemExit(main())
