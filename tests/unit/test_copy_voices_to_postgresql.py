"""A folder voice library copied into PostgreSQL for a move to replicas (ui/library/copy_voices.py,
run as its command line): every voice arrives whole (clip, transcript, encoded patches, automatic
transcripts), a second run copies nothing and says so, and a URL that is not PostgreSQL's is refused
before anything is read."""
from __future__ import annotations

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from ui.library.copy_voices import clip_audio, main  # noqa: E402
from ui.library.pg_voice_store import PostgresVoiceLibrary  # noqa: E402
from ui.library.voice_store import VoiceLibrary  # noqa: E402

RATE = 16000


@pytest.fixture()
def folder(tmp_path):
    """A folder library of two voices: one with a transcript and patches of one encoder, one with an
    automatic transcript only."""
    library = VoiceLibrary(tmp_path / "voices", sample_rate=RATE)
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
    shared = PostgresVoiceLibrary(postgres_database, sample_rate=RATE)
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


def test_a_url_that_is_not_postgresqls_is_refused_before_anything_is_read(folder, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["--from", str(folder.folder), "--to", "mysql://user@host/db"])
    assert refused.value.code == 2 and "--to takes a PostgreSQL URL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--from", str(folder.folder.parent), "--to", "postgresql://user@host/db"])
    assert "is not a voice library folder" in capsys.readouterr().err
