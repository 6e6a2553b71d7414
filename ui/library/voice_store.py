"""The voice library: what every store of saved voices offers the routes (`VoiceStore`), and the
embedded one, a folder with an SQLite index (`VoiceLibrary`). The other, shared by several replicas,
keeps them in PostgreSQL (pg_voice_store.py); the app picks one from its settings (ui/server.py).

On disk:

    DATA_DIR/voices/index.sqlite3          name, transcript, length, bytes of every voice
    DATA_DIR/voices/<id>.flac              the clip, mono at the engine's input rate, 24-bit
    DATA_DIR/voices/<id>.<encoder>.npz     its latent patches per padding side, for one VAE encoder
    DATA_DIR/voices/<id>.transcripts.json  its automatic transcripts, per ASR model (transcripts.py)

A voice exists once its index row is committed, and the row is committed last: every file is
written to a temporary name, flushed to the disk and renamed into place first. A save cut short
(a crash, a kill, a full disk) leaves at most files that no row names, and opening the library
sweeps them; a half-written voice never appears. Files are named by a random id, never by the
voice's name, so no name can reach outside the folder.
"""
from __future__ import annotations

import concurrent.futures
import io
import logging
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import soundfile as sf

from inference.request.reference import ReferenceClip

from . import transcripts
from ..settings import Settings
from ..guard.answers import Refusal
from .voice_names import check_name, normal_name, same_name

log = logging.getLogger("voxcpm.voices")
SCHEMA = """CREATE TABLE IF NOT EXISTS voices (
    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE COLLATE NOCASE, transcript TEXT,
    seconds REAL NOT NULL, bytes INTEGER NOT NULL, created REAL NOT NULL)"""
TEMP_SUFFIX = ".part"


@dataclass(frozen=True)
class Voice:
    id: str
    name: str
    transcript: str | None
    seconds: float
    bytes: int
    created: float

    def public(self) -> dict:
        out = asdict(self)
        del out["id"]  # the file name stays on the server
        return out


class VoiceError(Refusal):
    """A library change refused: `status` is the HTTP status that says why (404, 409, 507...)."""


class VoiceStore(Protocol):
    """What the routes and services use of a voice library, whichever store keeps it. Every method
    may wait on a disk or a database, so callers on an event loop use a thread. A name is found
    in its normal form (voice_names.normal_name), without regard to ASCII case."""
    sample_rate: int
    max_voices: int
    max_bytes: int

    def list(self) -> list[Voice]: ...
    def get(self, name: str) -> Voice: ...
    def used_bytes(self) -> int: ...
    def audio_bytes(self, name: str) -> bytes: ...  # the clip as FLAC
    def clip(self, name: str, identity: str) -> tuple[Voice, ReferenceClip]: ...
    def automatic_transcript(self, name: str, model: str) -> tuple[Voice, str | None]: ...
    def check_room(self, name: str, audio: np.ndarray) -> None: ...
    def save(self, name: str, audio: np.ndarray, transcript: str | None = None,
             latents: dict[str, dict[str, np.ndarray]] | None = None) -> Voice: ...
    def rename(self, name: str, new_name: str) -> Voice: ...
    def delete(self, name: str) -> Voice: ...
    def keep_automatic_transcript(self, voice: Voice, model: str, text: str, save: bool = False) -> Voice: ...
    def close(self) -> None: ...


# The refusals, worded the same by every store.
def no_such_voice(name: str, known: list[Voice]) -> VoiceError:
    listed = ", ".join(v.name for v in known[:20]) or "none yet"
    return VoiceError(404, f"there is no saved voice named {name[:80]!r}; saved voices: {listed}")


def name_taken(name: str) -> VoiceError:
    return VoiceError(409, f"a voice named {name!r} already exists: pick another name, or delete it first")


def too_many(count: int) -> VoiceError:
    return VoiceError(507, f"the library holds {count} voices, the most it may: delete one first")


def too_large(max_bytes: int) -> VoiceError:
    return VoiceError(507, f"the library would pass its limit of {max_bytes / 2**20:.0f} MB: "
                           "delete a voice first, or save a shorter clip")


def too_large_encoded(size: int, free: int, max_bytes: int) -> VoiceError:
    return VoiceError(507, f"the voice takes {_amount(size)} on disk once encoded, more than the "
                           f"{_amount(free)} left of the library's limit of {_amount(max_bytes)}: "
                           "delete a voice first, or save a shorter clip")


def flac_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """The clip as every store keeps it: FLAC, 24-bit."""
    out = io.BytesIO()
    sf.write(out, audio, sample_rate, format="FLAC", subtype="PCM_24")
    return out.getvalue()


def library_options(settings: Settings, sample_rate: int) -> dict:
    """Either store's limits as a settings tree gives them, as keyword arguments; `sample_rate`:
    the engine's input rate, which its clips are kept at."""
    return dict(sample_rate=sample_rate, max_voices=settings.library.max_voices,
                max_bytes=settings.library.max_library_mb * 2**20)


class VoiceLibrary:
    """Thread-safe; every method may touch the disk, so callers on an event loop use a thread."""

    def __init__(self, folder: str | os.PathLike, *, sample_rate: int, max_voices: int, max_bytes: int):
        self.folder = Path(folder)
        self.sample_rate, self.max_voices, self.max_bytes = sample_rate, max_voices, max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.folder / "index.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(SCHEMA)
        self._clips: dict[str, ReferenceClip] = {}  # voice id -> its clip with patches, once used
        # Patches a request encoded are written here, off the engine's thread (ReferenceClip.on_encoded).
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="voice-writer")
        self.swept = self._sweep()

    # -- reading ---------------------------------------------------------------------------------
    def list(self) -> list[Voice]:
        with self._lock:
            rows = self._db.execute("SELECT id, name, transcript, seconds, bytes, created FROM voices "
                                    "ORDER BY name COLLATE NOCASE").fetchall()
        return [Voice(*row) for row in rows]

    def get(self, name: str) -> Voice:
        """The voice saved under `name`, in its normal form (ui/library/voice_names.py): every call
        that names a voice (clip, audio_bytes, rename, delete) finds it through here."""
        name = normal_name(name)
        with self._lock:
            row = self._db.execute("SELECT id, name, transcript, seconds, bytes, created FROM voices "
                                   "WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise no_such_voice(name, self.list())
        return Voice(*row)

    def used_bytes(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM voices").fetchone()[0])

    def audio_bytes(self, name: str) -> bytes:
        with self._lock:  # not deleted half-way through
            return (self.folder / f"{self.get(name).id}.flac").read_bytes()

    def clip(self, name: str, identity: str) -> tuple[Voice, ReferenceClip]:
        """The voice and its clip for the engine: the patches saved for this encoder when there are
        any, so the clip is neither read nor encoded; otherwise the FLAC, loaded when encoded."""
        voice = self.get(name)
        with self._lock:
            clip = self._clips.get(voice.id)
            if clip is None:
                clip = ReferenceClip(self.sample_rate, load=lambda: self._read_audio(voice.id),
                                     latents=self._read_latents(voice.id, identity),
                                     on_encoded=lambda key, _: self._writer.submit(self._keep_latents, voice.id, key[0]))
                self._clips[voice.id] = clip
        return voice, clip

    def automatic_transcript(self, name: str, model: str) -> tuple[Voice, str | None]:
        """The voice, and the automatic transcript by `model` kept beside its clip, if any."""
        with self._lock:
            voice = self.get(name)
            return voice, transcripts.read_beside(self.folder / f"{voice.id}.flac", model)

    # -- changing --------------------------------------------------------------------------------
    def save(self, name: str, audio: np.ndarray, transcript: str | None = None,
             latents: dict[str, dict[str, np.ndarray]] | None = None) -> Voice:
        """audio: float32 mono at sample_rate. latents: {encoder identity: {side: patches}}. The
        files written are measured before the index row is committed: past the library's limit
        (max_bytes), they are removed and the save refused (507)."""
        name = check_name(name)
        voice_id = secrets.token_hex(8)
        with self._lock:
            self._check_free(name)
            self._check_count_and_size(estimated_bytes(audio))
            written: list[Path] = []
            try:
                written.append(self._write_audio(voice_id, audio))
                for identity, sides in (latents or {}).items():
                    written.append(self._write_latents(voice_id, identity, sides))
                size = sum(p.stat().st_size for p in written)
                self._check_encoded_size(size)  # the files are removed below when it refuses
                self._before_commit()
                self._db.execute("INSERT INTO voices VALUES (?, ?, ?, ?, ?, ?)",
                                 (voice_id, name, transcript, len(audio) / self.sample_rate, size, time.time()))
            except BaseException:
                for path in written:
                    path.unlink(missing_ok=True)
                raise
        log.info("saved voice %r (%.1f s%s)", name, len(audio) / self.sample_rate, ", with transcript" if transcript else "")
        return self.get(name)

    def rename(self, name: str, new_name: str) -> Voice:
        new_name = check_name(new_name)
        with self._lock:
            voice = self.get(name)
            if not same_name(voice.name, new_name):
                self._check_free(new_name)
            self._db.execute("UPDATE voices SET name = ? WHERE id = ?", (new_name, voice.id))
        return self.get(new_name)

    def delete(self, name: str) -> Voice:
        with self._lock:
            voice = self.get(name)
            # The row goes first: a crash before the files are gone leaves orphans, swept at the next start.
            self._db.execute("DELETE FROM voices WHERE id = ?", (voice.id,))
            self._clips.pop(voice.id, None)
            for path in self.folder.glob(f"{voice.id}.*"):
                path.unlink(missing_ok=True)
        return voice

    def keep_automatic_transcript(self, voice: Voice, model: str, text: str, save: bool = False) -> Voice:
        """Keeps it beside the voice's clip (ui/library/transcripts.py); save: also as the voice's
        own transcript, which it must not have yet (one the user typed is never replaced)."""
        with self._lock:
            row = self._db.execute("SELECT name FROM voices WHERE id = ?", (voice.id,)).fetchone()
            if row is None:  # deleted (and maybe its name reused) while it was transcribed
                raise VoiceError(404, f"the voice {voice.name!r} was deleted meanwhile")
            data = transcripts.with_entry(self.folder / f"{voice.id}.flac", model, text)
            self._atomic(f"{voice.id}.{transcripts.SUFFIX}", lambda out: out.write(data))
            if save:
                self._db.execute("UPDATE voices SET transcript = ? WHERE id = ? AND transcript IS NULL", (text, voice.id))
            return self.get(row[0])

    def close(self):
        self._writer.shutdown(wait=True)
        with self._lock:
            self._db.close()

    # -- inside --------------------------------------------------------------------------------------
    def check_room(self, name: str, audio: np.ndarray):
        """Refuses a save that could not succeed (bad or taken name, library full) before any work."""
        with self._lock:
            self._check_free(check_name(name))
            self._check_count_and_size(estimated_bytes(audio))

    def _check_count_and_size(self, new_bytes: int):
        count = self._db.execute("SELECT COUNT(*) FROM voices").fetchone()[0]
        if count >= self.max_voices:
            raise too_many(count)
        if self.used_bytes() + new_bytes > self.max_bytes:
            raise too_large(self.max_bytes)

    def _check_encoded_size(self, size: int):
        free = max(0, self.max_bytes - self.used_bytes())
        if size > free:
            raise too_large_encoded(size, free, self.max_bytes)

    def _check_free(self, name: str):
        if self._db.execute("SELECT 1 FROM voices WHERE name = ?", (name,)).fetchone():
            raise name_taken(name)

    def _before_commit(self):
        """Nothing: tests replace it to cut a save short between its files and its index row."""

    def _write_audio(self, voice_id: str, audio: np.ndarray) -> Path:
        def write(tmp):
            sf.write(tmp, audio, self.sample_rate, format="FLAC", subtype="PCM_24")
        return self._atomic(f"{voice_id}.flac", write)

    def _write_latents(self, voice_id: str, identity: str, sides: dict) -> Path:
        data = _npz(sides)
        return self._atomic(f"{voice_id}.{identity}.npz", lambda out: out.write(data))

    def _atomic(self, name: str, write) -> Path:
        final = self.folder / name
        tmp = self.folder / f"{name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:
            with open(tmp, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        _sync_folder(self.folder)
        return final

    def _read_audio(self, voice_id: str) -> np.ndarray:
        # On the engine's thread, only when a voice meets an encoder it has no patches for.
        audio, _ = sf.read(self.folder / f"{voice_id}.flac", dtype="float32")
        return audio

    def _read_latents(self, voice_id: str, identity: str) -> dict:
        path = self.folder / f"{voice_id}.{identity}.npz"
        if not path.is_file():
            return {}
        with np.load(path) as saved:
            return {(identity, side): saved[side].copy() for side in saved.files}

    def _keep_latents(self, voice_id: str, identity: str):
        """Writes what a request encoded (on the writer thread), if the voice is still there and the
        library has room: measured and charged under the lock every save takes, so patches and a
        save at once cannot pass max_bytes together. Without room they are not kept: the engine
        encodes the clip again when it next needs them, and only that time is lost."""
        with self._lock:
            clip = self._clips.get(voice_id)
            if clip is None:
                return
            data = _npz(clip.known(identity))
            replaced = self.folder / f"{voice_id}.{identity}.npz"
            # As save() measures a voice: its clip and its patches (not its automatic transcripts).
            size = len(data) + sum(p.stat().st_size for p in self.folder.glob(f"{voice_id}.*")
                                   if p.suffix in (".flac", ".npz") and p != replaced)
            others = self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM voices WHERE id <> ?",
                                      (voice_id,)).fetchone()[0]
            if others + size > self.max_bytes:
                log.info("the patches encoded for a voice were not kept: the library would pass its limit of %s",
                         _amount(self.max_bytes))
                return
            self._atomic(replaced.name, lambda out: out.write(data))
            self._db.execute("UPDATE voices SET bytes = ? WHERE id = ?", (size, voice_id))

    def _sweep(self) -> int:
        """Removes what a save or delete cut short left: temporary files, and files of no voice."""
        with self._lock:
            ids = {row[0] for row in self._db.execute("SELECT id FROM voices")}
        swept = 0
        for path in self.folder.iterdir():
            orphan = path.name.split(".")[0] not in ids and path.suffix in (".flac", ".npz", ".json")
            if path.name.endswith(TEMP_SUFFIX) or orphan:
                path.unlink(missing_ok=True)
                swept += 1
        if swept:
            log.warning("removed %d file(s) left by an interrupted save or delete in %s", swept, self.folder)
        return swept


def estimated_bytes(audio: np.ndarray) -> int:
    """What a clip should take on disk, for a refusal before any work: 24-bit FLAC of speech takes
    about 2 bytes a sample, of noise about 3. The size of the files written decides (save)."""
    return 2 * audio.size


def _npz(sides: dict) -> bytes:
    """One encoder's patches by padding side as .npz bytes: arrays (a voice saved) or the tensors a
    request encoded, both read as arrays. Made before writing, so their size is known first."""
    out = io.BytesIO()
    np.savez(out, **{side: np.asarray(patches) for side, patches in sides.items()})
    return out.getvalue()


def _amount(size: int) -> str:
    return f"{size / 2**20:.2f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"


def _sync_folder(folder: Path):
    """Makes a rename durable: the folder's entry is flushed too (POSIX; Windows has no such call)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
