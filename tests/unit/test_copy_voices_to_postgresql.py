"""A folder voice library copied into PostgreSQL for a move to replicas (ui/library/copy_voices.py,
run as its command line): every voice arrives whole (clip, transcript, encoded patches, automatic
transcripts), a second run copies nothing and says so, and a URL that is not PostgreSQL's is refused
before anything is read."""
from __future__ import annotations

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from ui.library.copy_voices import clip_audio, main  # noqa: E402
from ui.library.pg_voice_store import LibraryUnavailable, PostgresVoiceLibrary  # noqa: E402
from ui.library.voice_store import VoiceLibrary, library_options  # noqa: E402
from ui.settings import DEFAULTS  # noqa: E402

RATE = 16000


@pytest.fixture()
def folder(tmp_path):
    """A folder library of two voices: one with a transcript and patches of one encoder, one with an
    automatic transcript only."""
    library = VoiceLibrary(tmp_path / "voices", **library_options(DEFAULTS, RATE))
    noise = np.random.default_rng(0).uniform(-0.2, 0.2, (2, RATE)).astype(np.float32)
    patches = {"enc1": {"left": np.arange(12, dtype=np.float32).reshape(3, 4), "none": np.ones((2, 4), np.float32)}}
    library.save("Narrator", noise[0], "Hello there.", patches)
    guide = library.save("Guide", noise[1])
    library.keep_automatic_transcript(guide, "whisper-tiny", "what the model heard")
    yield library
    library.close()


def test_a_folder_library_arrives_whole_and_a_second_run_copies_nothing(folder, postgres_database, capsys):
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS voxcpm_voice_patches, voxcpm_voices")
    assert main(["--from", str(folder.folder), "--to", postgres_database]) == 0
    assert "copied 2 voice(s)" in capsys.readouterr().out
    shared = PostgresVoiceLibrary(postgres_database, **PostgresVoiceLibrary.options(DEFAULTS, RATE))
    try:
        assert [(v.name, v.transcript, v.seconds) for v in shared.list()] == \
            [(v.name, v.transcript, v.seconds) for v in folder.list()]
        for voice in folder.list():
            np.testing.assert_array_equal(clip_audio(shared, voice.name), clip_audio(folder, voice.name))
        _, clip = shared.clip("Narrator", "enc1")
        known = {side: np.asarray(p) for side, p in clip.known("enc1").items()}
        assert set(known) == {"left", "none"}
        np.testing.assert_array_equal(known["left"], np.arange(12, dtype=np.float32).reshape(3, 4))
        assert shared.automatic_transcript("Guide", "whisper-tiny")[1] == "what the model heard"
    finally:
        shared.close()
    assert main(["--from", str(folder.folder), "--to", postgres_database]) == 0
    out = capsys.readouterr().out
    assert "copied 0 voice(s)" in out and "left 2 the database already has: Guide, Narrator" in out


def empty(url: str):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS voxcpm_voice_patches, voxcpm_voices")


def test_names_are_the_same_by_the_databases_rule_not_pythons(folder, postgres_database, capsys):
    """casefold() makes Strauß and Strauss one name; the database's key (ASCII case only) does not,
    and the app saves both: the copy must not leave Strauß behind as "already there" (issue 45)."""
    empty(postgres_database)
    folder.save("Strau\u00df", np.zeros(RATE // 4, np.float32))
    folder.save("ZO\u00eb", np.zeros(RATE // 4, np.float32))
    shared = PostgresVoiceLibrary(postgres_database, **PostgresVoiceLibrary.options(DEFAULTS, RATE))
    try:
        shared.save("Strauss", np.zeros(RATE // 4, np.float32))
        shared.save("Zo\u00eb", np.zeros(RATE // 4, np.float32))  # ASCII case apart: the same name
        assert main(["--from", str(folder.folder), "--to", postgres_database]) == 0
        out = capsys.readouterr().out
        assert "copied 3 voice(s): Guide, Narrator, Strau\u00df" in out
        assert "left 1 the database already has: ZO\u00eb" in out
        assert sorted(v.name for v in shared.list()) == ["Guide", "Narrator", "Strauss", "Strau\u00df", "Zo\u00eb"]
    finally:
        shared.close()


def test_voices_copied_are_reported_when_their_automatic_transcripts_are_not(folder, postgres_database, capsys,
                                                                          monkeypatch):
    empty(postgres_database)

    def connection_lost(self, voice, model, text, save=False):
        raise LibraryUnavailable("server closed the connection unexpectedly")
    monkeypatch.setattr(PostgresVoiceLibrary, "keep_automatic_transcript", connection_lost)
    assert main(["--from", str(folder.folder), "--to", postgres_database]) == 1
    out, err = capsys.readouterr()
    assert "copied 2 voice(s): Guide, Narrator" in out and "nothing copied" not in out + err
    assert "copied 'Guide' but not its automatic transcripts" in err
    assert "server closed the connection unexpectedly" in err and "Narrator" not in err
    assert rows_of(postgres_database) == 2


def test_a_database_that_stops_answering_is_reported_voice_by_voice(folder, postgres_database, capsys, monkeypatch):
    empty(postgres_database)
    folder.save("Zed", np.zeros(RATE // 4, np.float32))
    saved, calls = PostgresVoiceLibrary.save, []

    def down_after_one(self, name, *args, **kwargs):
        calls.append(name)
        if len(calls) > 1:
            raise LibraryUnavailable("Connection refused")
        return saved(self, name, *args, **kwargs)
    monkeypatch.setattr(PostgresVoiceLibrary, "save", down_after_one)
    assert main(["--from", str(folder.folder), "--to", postgres_database]) == 1
    out, err = capsys.readouterr()
    assert "copied 1 voice(s): Guide" in out
    assert "not copied 'Narrator': the voice library is unavailable" in err and "Connection refused" in err
    assert "not tried, as the database stopped answering (run it again to copy them): Zed" in err
    assert calls == ["Guide", "Narrator"]  # none after the database stopped answering


def rows_of(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT COUNT(*) FROM voxcpm_voices").fetchone()[0]


def test_a_url_that_is_not_postgresqls_is_refused_before_anything_is_read(folder, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["--from", str(folder.folder), "--to", "mysql://user@host/db"])
    assert refused.value.code == 2 and "--to takes a PostgreSQL URL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--from", str(folder.folder.parent), "--to", "postgresql://user@host/db"])
    assert "is not a voice library folder" in capsys.readouterr().err
