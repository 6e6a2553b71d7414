"""Copies a folder voice library (DATA_DIR/voices) into PostgreSQL, for a server moving to replicas:

    python -m ui.library.copy_voices --from ~/.local/share/voxcpm2-demo/voices --to postgresql://USER@HOST/DB

Each voice keeps its name, clip, transcript, the patches encoded for it (so no replica encodes it
again) and its automatic transcripts. A name the database already has is left as it is and
reported, so the copy can be run again after a failure and copies only what is missing; "already
there" is the database's own rule (names equal but for ASCII case), asked through the save. Each
voice is one save (one transaction there): a copy cut short leaves whole voices only, and the run
reports every voice: copied, already there, refused and why, or not tried.
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
from .voice_store import TEMP_SUFFIX, Voice, VoiceError, VoiceLibrary, VoiceStore, library_options


@dataclass
class Copied:
    """What one run did, voice by voice: every name of the folder lands in exactly one list but
    `transcripts_lost`, which names voices that are in `copied` too."""
    copied: list[str] = field(default_factory=list)
    already_there: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # name -> why (the target is full...)
    transcripts_lost: dict[str, str] = field(default_factory=dict)  # name -> why (the voice itself was copied)
    not_tried: list[str] = field(default_factory=list)  # after the database stopped answering


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
    """Saves each voice of the folder into the target. Whether the target already has a name is
    the target's to say (its save answers 409), by its own rule: a rule of ours beside it
    (casefold() took Strauß for Strauss) would skip voices that the target would have taken."""
    done = Copied()
    voices = source.list()
    for i, voice in enumerate(voices):
        try:
            saved = target.save(voice.name, clip_audio(source, voice.name), voice.transcript,
                                folder_latents(source, voice.id))
        except VoiceError as exc:
            if exc.status == 409:  # the same name by the target's rule: a run before, another copy, a user
                done.already_there.append(voice.name)
                continue
            done.refused[voice.name] = str(exc)
            if exc.status == 503:  # the database went away: the rest would fail alike (run it again)
                done.not_tried = [v.name for v in voices[i + 1:]]
                break
            continue
        done.copied.append(voice.name)
        why = copy_transcripts(source, target, voice, saved)
        if why is not None:
            done.transcripts_lost[voice.name] = why
    return done


def copy_transcripts(source: VoiceLibrary, target: VoiceStore, voice: Voice, saved: Voice) -> str | None:
    """The voice's automatic transcripts, once the voice itself is saved; why not, if they could not
    all be stored. Not fatal: the voice is whole without them (the server transcribes it again when
    asked), so the copy goes on and reports it."""
    try:
        for model, text in folder_transcripts(source, voice.id).items():
            target.keep_automatic_transcript(saved, model, text)
    except VoiceError as exc:
        return str(exc)
    return None


def report(done: Copied) -> int:
    """Prints what was copied and what was not, and why; the exit status: 1 if anything was not."""
    print(f"copied {len(done.copied)} voice(s)" + (f": {', '.join(done.copied)}" if done.copied else ""))
    if done.already_there:
        print(f"left {len(done.already_there)} the database already has: {', '.join(done.already_there)}")
    for name, why in done.refused.items():
        print(f"not copied {name!r}: {why}", file=sys.stderr)
    for name, why in done.transcripts_lost.items():
        print(f"copied {name!r} but not its automatic transcripts ({why}); the server transcribes it again "
              "when asked", file=sys.stderr)
    if done.not_tried:
        print(f"not tried, as the database stopped answering (run it again to copy them): "
              f"{', '.join(done.not_tried)}", file=sys.stderr)
    return 1 if done.refused or done.transcripts_lost or done.not_tried else 0


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
    from ..settings import DEFAULTS  # a command of its own, with no server's settings: the servers' defaults

    source = VoiceLibrary(folder, **library_options(DEFAULTS, rate))
    target = PostgresVoiceLibrary(args.target, **PostgresVoiceLibrary.options(DEFAULTS, rate))
    try:
        # A database that cannot be reached, or refuses the login, is the first voice's refusal
        # (503), reported with the rest: never "nothing copied" from a run that copied some.
        done = copy_voices(source, target)
    finally:
        source.close()
        target.close()
    return report(done)


if __name__ == "__main__":
    raise SystemExit(main())
