"""The voice library without the app, in both stores (the folder with its SQLite index, and
PostgreSQL: tests/support/postgres.py): saves, renames, deletes, names, limits; and, in the folder,
saves cut short by a killed process (nothing half-saved appears; the leftovers are swept). What only
the shared store does (replicas, races, a database that goes away) is in test_pg_voice_store.py."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from inference.errors import InputError
from ui.library.voice_store import VoiceError, VoiceLibrary, library_options
from ui.settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]


def tone(seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


@dataclass
class Store:
    kind: str
    open: Callable  # (**limits) -> a library on this store; each one opened is closed after the test


@pytest.fixture(params=["folder", "postgresql"])
def store(request, tmp_path):
    if request.param == "folder":
        make = lambda **limits: VoiceLibrary(tmp_path, **{**library_options(DEFAULTS, 16000), **limits})  # noqa: E731
    else:
        import psycopg

        from ui.library.pg_voice_store import PostgresVoiceLibrary

        url = request.getfixturevalue("postgres_database")
        with psycopg.connect(url, autocommit=True) as conn:  # each test starts from an empty library
            conn.execute("DROP TABLE IF EXISTS voxcpm_voice_patches, voxcpm_voices")
        make = lambda **limits: PostgresVoiceLibrary(  # noqa: E731
            url, **{**PostgresVoiceLibrary.options(DEFAULTS, 16000), **limits})
    opened = []

    def open_library(**limits):
        opened.append(make(**limits))
        return opened[-1]
    yield Store(request.param, open_library)
    for lib in opened:
        lib.close()


def test_saved_voices_survive_reopening_with_audio_transcript_and_patches(store):
    lib = store.open()
    patches = {"enc1": {"right": torch.randn(3, 4, 64), "left": torch.randn(3, 4, 64)}}
    lib.save("Anna", tone(), "Hello there.", patches)
    lib.save("狮子 2", tone(0.5))
    lib.close()
    again = store.open()
    assert [v.name for v in again.list()] == ["Anna", "狮子 2"]
    voice, clip = again.clip("anna", "enc1")  # names are found without regard to case
    assert voice.transcript == "Hello there." and voice.seconds == pytest.approx(1.0)
    for side in ("right", "left"):
        torch.testing.assert_close(clip.latents(("enc1", side)), patches["enc1"][side], rtol=0, atol=0)
    assert clip.latents(("another encoder", "right")) is None
    rate, audio = clip.samples()  # 24-bit FLAC: within one step of 2**-23
    assert rate == 16000 and np.max(np.abs(audio - tone())) < 2**-22
    assert again.audio_bytes("Anna")[:4] == b"fLaC"


def test_rename_and_delete(store, tmp_path):
    lib = store.open()
    lib.save("Anna", tone())
    lib.save("Ben", tone())
    assert lib.rename("Anna", "ANNA").name == "ANNA"  # only the case may change into a taken name
    with pytest.raises(VoiceError) as taken:
        lib.rename("ANNA", "ben")
    assert taken.value.status == 409 and "already exists" in str(taken.value)
    lib.delete("ben")
    assert [v.name for v in lib.list()] == ["ANNA"]
    if store.kind == "folder":  # the deleted voice's files went with it
        assert sorted(p.suffix for p in tmp_path.glob("*.flac")) == [".flac"]
    with pytest.raises(VoiceError) as missing:
        lib.delete("Ben")
    assert missing.value.status == 404 and "ANNA" in str(missing.value)


@pytest.mark.parametrize("name", ["", "   ", "../../etc/passwd", "a/b", "design", "Design", "x" * 65, "_hidden",
                                  "two  spaces", "\u202egnp.exe", "tab\there"])
def test_bad_names_are_refused_with_the_rule(store, name):
    lib = store.open()
    with pytest.raises(InputError, match="1 to 64 characters"):
        lib.save(name, tone())
    with pytest.raises(InputError, match="1 to 64 characters"):
        lib.check_room(name, tone())
    assert lib.list() == [] and lib.used_bytes() == 0


def test_limits_on_count_and_size(store):
    lib = store.open(max_voices=2, max_bytes=200_000)
    lib.save("one", tone(0.5))
    lib.save("two", tone(0.5))
    with pytest.raises(VoiceError, match="holds 2 voices") as full:
        lib.save("three", tone(0.5))
    assert full.value.status == 507
    lib.delete("two")
    with pytest.raises(VoiceError, match="limit of 0 MB"):
        lib.save("long", tone(10.0))  # 320 kB of float32: more than the room left
    assert [v.name for v in lib.list()] == ["one"]



def test_the_size_limit_counts_the_encoded_files(store, tmp_path):
    """Noise takes about 3 bytes a sample as 24-bit FLAC, more than an estimate from the samples
    (2 bytes each) allows for: the size stored decides, and nothing of a refused save stays."""
    noise = np.random.default_rng(0).uniform(-0.9, 0.9, 16000).astype(np.float32)
    lib = store.open(max_bytes=40_000)
    with pytest.raises(VoiceError, match=r"takes \d\d KiB on disk.* 39 KiB left of the library's limit of 39 KiB") as over:
        lib.save("noise", noise, latents={"enc": {"right": torch.zeros(2, 4, 64)}})
    assert over.value.status == 507
    assert lib.list() == [] and lib.used_bytes() == 0
    if store.kind == "folder":
        assert {p.name for p in tmp_path.iterdir()} == {"index.sqlite3"}
    lib.save("tone", tone(0.5))  # what fits is still saved
    saved = 0
    for i in range(20):  # then noise until refused: the files on disk stay within the limit
        try:
            lib.save(f"noise {i}", noise[:4000])
            saved += 1
        except VoiceError:
            break
    assert saved > 0 and lib.used_bytes() <= lib.max_bytes
    if store.kind == "folder":
        on_disk = sum(p.stat().st_size for p in tmp_path.iterdir() if p.suffix in (".flac", ".npz"))
        assert on_disk == lib.used_bytes()


def test_patches_encoded_later_count_against_the_size_limit(store):
    """Patches a request encodes for a saved voice are kept with it and charged to the library, under
    the lock every save takes; where they would pass the limit they are not kept (issue 45): the
    engine encodes the clip again when it next needs them, and only that time is lost."""
    lib = store.open()
    lib.max_bytes = lib.save("Anna", tone(0.5)).bytes + 1500  # room for a small encoding, not a large one
    _, clip = lib.clip("anna", "enc")
    clip.remember(("enc", "right"), torch.zeros(1, 4, 8))
    lib._writer.submit(lambda: None).result()  # the writer thread has stored them
    with_small = lib.get("anna").bytes
    clip.remember(("enc", "left"), torch.randn(30, 4, 64))  # 30 KB: past the limit
    lib._writer.submit(lambda: None).result()
    assert lib.used_bytes() == lib.get("anna").bytes == with_small <= lib.max_bytes
    _, fresh = store.open().clip("anna", "enc")  # what another process (or replica) reads
    assert fresh.latents(("enc", "right")) is not None and fresh.latents(("enc", "left")) is None


def test_a_name_may_change_only_its_ascii_case_into_itself(store):
    """One rule for "the same name" (voice_names.name_key): ASCII case only, as the stores' keys."""
    lib = store.open()
    lib.save("Zo\u00eb", tone(0.25))
    assert lib.rename("Zo\u00eb", "ZO\u00eb").name == "ZO\u00eb"  # the same name, to the index and the key
    lib.save("Strauss", tone(0.25))
    assert lib.save("Strau\u00df", tone(0.25)).name == "Strau\u00df"  # not the same name: \u00df is not ASCII
    with pytest.raises(VoiceError) as taken:
        lib.rename("Strau\u00df", "STRAUSS")
    assert taken.value.status == 409


def test_names_are_looked_up_as_they_are_saved(store):
    """Surrounding spaces and decomposed letters are normalized for every call, not only a save."""
    lib = store.open()
    lib.save(" Anna ", tone(), latents={"enc": {"right": torch.zeros(2, 4, 64)}})
    lib.save("Zoe\u0308", tone())  # e + combining diaeresis
    assert [v.name for v in lib.list()] == ["Anna", "Zo\u00eb"]
    assert lib.get(" Anna").name == "Anna" and lib.get("Zoe\u0308 ").name == "Zo\u00eb"
    assert lib.audio_bytes(" anna ")[:4] == b"fLaC"
    assert lib.clip("\tAnna\n", "enc")[0].name == "Anna"
    with pytest.raises(VoiceError, match="already exists"):
        lib.rename("Zo\u00eb", " anna")
    assert lib.rename(" Zoe\u0308", "Zo\u00eb Two").name == "Zo\u00eb Two"
    lib.delete("Zoe\u0308 Two ")
    assert [v.name for v in lib.list()] == ["Anna"]


KILLED_SAVE = """
import os, signal, sys
import numpy as np
import ui.library.voice_store as store
from ui.settings import DEFAULTS
lib = store.VoiceLibrary(sys.argv[1], **store.library_options(DEFAULTS, 16000))
lib.save("kept", np.full(16000, 0.1, np.float32))
if sys.argv[2] == "before-commit":  # every file written and renamed into place, the row not yet
    lib._before_commit = lambda: os.kill(os.getpid(), signal.SIGKILL)
else:  # half of the FLAC written to its temporary file
    def half_then_die(out, audio, *args, **kwargs):
        out.write(b"fLaC" + b"\\0" * 1000)
        out.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    store.sf.write = half_then_die
lib.save("half", np.full(32000, 0.2, np.float32), "a transcript", {"enc": {"right": __import__("torch").zeros(2, 4, 64)}})
"""


@pytest.mark.parametrize("where", ["before-commit", "mid-write"])
def test_a_save_killed_midway_leaves_no_half_voice(tmp_path, where):
    script = tmp_path / "save.py"
    script.write_text(textwrap.dedent(KILLED_SAVE))
    folder = tmp_path / "voices"
    proc = subprocess.run([sys.executable, str(script), str(folder), where], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -9, proc.stderr  # SIGKILL: nothing was cleaned up on the way out
    leftovers = {p.name for p in folder.iterdir()} - {"index.sqlite3"}
    assert len(leftovers) > 1, "the kill should have left the cut save's files behind"
    lib = VoiceLibrary(folder, **library_options(DEFAULTS, 16000))
    assert [v.name for v in lib.list()] == ["kept"]
    assert lib.swept >= 1
    kept = lib.get("kept")
    assert {p.name for p in folder.iterdir()} - {"index.sqlite3"} == {f"{kept.id}.flac"}
    lib.save("half", tone())  # the name the cut save wanted is free
