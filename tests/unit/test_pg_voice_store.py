"""The voice library in PostgreSQL as several replicas share it (ui/library/pg_voice_store.py): two
library instances on one database stand for two replicas. What both stores do alike (save, rename,
delete, names, limits in one process) is in test_voice_store.py; the HTTP side (503 while the
database is gone) in tests/http/test_shared_voice_library.py."""
from __future__ import annotations

import contextlib
import statistics
import threading
import time

import numpy as np
import pytest
import torch

from ..support.app_helpers import record_figure, wait_until

psycopg = pytest.importorskip("psycopg")

from ui.library.pg_voice_store import ConnectionLost, LibraryUnavailable, PostgresVoiceLibrary  # noqa: E402
from ui.library.voice_store import VoiceError  # noqa: E402
from ui.settings import DEFAULTS  # noqa: E402


def opened_library(url: str, **limits) -> PostgresVoiceLibrary:
    """A library as the default settings open it, with `limits` changed."""
    return PostgresVoiceLibrary(url, **{**PostgresVoiceLibrary.options(DEFAULTS, 16000), **limits})


def tone(seconds: float = 0.25, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


@pytest.fixture()
def replicas(postgres_database):
    """open(**limits): a library on the module's database, emptied for each test; all closed after."""
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS voxcpm_voice_patches, voxcpm_voices")
    opened = []

    def open_library(**limits):
        opened.append(opened_library(postgres_database, **limits))
        return opened[-1]
    yield open_library
    for lib in opened:
        lib.close()


def rows(url: str) -> tuple[int, int]:
    """(voices, patch rows) in the database, as any replica would count them."""
    with psycopg.connect(url) as conn:
        return (conn.execute("SELECT COUNT(*) FROM voxcpm_voices").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM voxcpm_voice_patches").fetchone()[0])


def race(*calls) -> list:
    """Runs the calls at once, one thread each; what each returned or raised."""
    start, results = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i, call):
        start.wait()
        try:
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            results[i] = exc
    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_a_voice_saved_renamed_or_deleted_on_one_replica_is_seen_by_the_other_within_a_second(replicas):
    a, b = replicas(), replicas()
    assert b.listening.wait(10)
    seen, dropped = [], []
    for trial in range(20):
        a.save(f"voice {trial}", tone(0.1), latents={"enc": {"right": torch.zeros(2, 4, 64)}})
        saved = time.perf_counter()
        wait_until(lambda: any(v.name == f"voice {trial}" for v in b.list()), timeout=1.0, interval=0.001)
        seen.append(time.perf_counter() - saved)
        voice, clip = b.clip(f"VOICE {trial}", "enc")  # b now holds the clip and its patches
        assert clip.latents(("enc", "right")).shape == (2, 4, 64)
        a.delete(f"voice {trial}")
        deleted = time.perf_counter()
        wait_until(lambda: voice.id not in b._clips, timeout=1.0, interval=0.001)  # told through NOTIFY
        dropped.append(time.perf_counter() - deleted)
        with pytest.raises(VoiceError) as gone:
            b.get(f"voice {trial}")
        assert gone.value.status == 404
    a.save("Anna", tone())
    b.clip("anna", "enc")
    assert a.rename("Anna", "Hanna").name == "Hanna"
    assert b.get("hanna").name == "Hanna" and [v.name for v in b.list()] == ["Hanna"]
    record_figure(f"voice library across replicas (PostgreSQL): a save on A listed by B after "
                  f"{statistics.median(seen) * 1000:.1f} ms median, {max(seen) * 1000:.1f} ms max; a delete on A "
                  f"dropped B's cached clip after {statistics.median(dropped) * 1000:.1f} ms median, "
                  f"{max(dropped) * 1000:.1f} ms max ({len(seen)} trials)")


def test_concurrent_saves_of_one_name_on_two_replicas_give_one_winner_and_a_409(replicas, postgres_database):
    a, b = replicas(), replicas()
    for trial in range(3):
        results = race(lambda: a.save(f"Same {trial}", tone()), lambda: b.save(f"same {trial}", tone(0.5)))
        won = [r for r in results if not isinstance(r, Exception)]
        lost = [r for r in results if isinstance(r, Exception)]
        assert len(won) == 1 and len(lost) == 1, results
        assert isinstance(lost[0], VoiceError) and lost[0].status == 409 and "already exists" in str(lost[0])
    assert rows(postgres_database) == (3, 0)


def test_the_count_and_size_limits_hold_across_replicas_saving_at_once(replicas, postgres_database):
    """Each save holds its transaction open a little before it commits, so that without the lock
    every save would count the library before any other's row: the lock makes them take turns."""
    libraries = [replicas(max_voices=3), replicas(max_voices=3)]
    for lib in libraries:
        lib._before_commit = lambda conn: time.sleep(0.05)
    results = race(*[lambda lib=libraries[i % 2], i=i: lib.save(f"v{i}", tone(0.1)) for i in range(6)])
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 3 and all(isinstance(r, VoiceError) and r.status == 507 for r in refused), results
    assert rows(postgres_database)[0] == 3

    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("DELETE FROM voxcpm_voices")
    one = libraries[0].save("probe", tone(0.5)).bytes
    libraries[0].delete("probe")
    # Room for two: the second save's estimate (2 bytes a sample) fits beside the first, a third's does not.
    room = one + 2 * tone(0.5).size + 1000
    sized = [replicas(max_bytes=room), replicas(max_bytes=room)]
    for lib in sized:
        lib._before_commit = lambda conn: time.sleep(0.05)
    results = race(*[lambda lib=sized[i % 2], i=i: lib.save(f"s{i}", tone(0.5)) for i in range(4)])
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 2 and all(isinstance(r, VoiceError) and r.status == 507 for r in refused), results
    assert rows(postgres_database)[0] == 2 and sized[0].used_bytes() <= room


def test_a_save_cut_short_leaves_nothing(replicas, postgres_database):
    lib = replicas()
    lib.save("kept", tone())

    def crash(conn):
        raise RuntimeError("the process died here")
    lib._before_commit = crash
    with pytest.raises(RuntimeError):
        lib.save("half", tone(), "a transcript", {"enc": {"right": torch.zeros(2, 4, 64)}})
    assert rows(postgres_database) == (1, 0)

    def connection_lost(conn):  # the server ends this session, as a restart or a network cut would
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    lib._before_commit = connection_lost  # on the fresh connection of the retry too: then 503
    with pytest.raises(LibraryUnavailable) as lost:
        lib.save("half", tone(), "a transcript", {"enc": {"right": torch.zeros(2, 4, 64)}})
    assert lost.value.status == 503 and lost.value.headers == {"Retry-After": str(DEFAULTS.http.busy_retry_s)}
    assert rows(postgres_database) == (1, 0)
    del lib._before_commit
    assert lib.save("half", tone()).name == "half"  # the name is free, and the pool has a new connection
    assert [v.name for v in lib.list()] == ["half", "kept"]


def test_a_save_whose_connection_is_lost_is_retried_once_on_a_fresh_one(replicas, postgres_database):
    """A connection the server ended (a restart, a failover, a proxy that cut it) is replaced by the
    pool: the save runs again on a new one instead of answering 503 (issue 45)."""
    lib = replicas()
    killed = []

    def lost_once(conn):
        if not killed:
            killed.append(conn.info.backend_pid)
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    lib._before_commit = lost_once
    voice = lib.save("anna", tone(), "a transcript", {"enc": {"right": torch.zeros(2, 4, 64)}})
    assert killed and lib.get("Anna") == voice and voice.transcript == "a transcript"
    assert rows(postgres_database) == (1, 1)


def test_a_save_that_committed_before_its_connection_was_lost_is_not_saved_twice(replicas, postgres_database):
    """The commit went through but its answer never came back: the retry finds its own voice, and
    answers it, not 409 for a name it took itself."""
    lib = replicas()
    transaction, lost = lib._transaction, []

    @contextlib.contextmanager
    def answer_lost_after_the_commit():
        with transaction() as conn:
            yield conn
        if not lost:
            lost.append(True)
            raise ConnectionLost("server closed the connection unexpectedly")
    lib._transaction = answer_lost_after_the_commit
    voice = lib.save("anna", tone(), latents={"enc": {"right": torch.zeros(2, 4, 64)}})
    assert lost and voice.name == "anna"
    del lib._transaction
    assert lib.get("anna") == voice and rows(postgres_database) == (1, 1)


def test_patches_encoded_later_and_automatic_transcripts_are_shared(replicas):
    a, b = replicas(), replicas()
    a.save("Anna", tone())
    _, clip = a.clip("anna", "enc")
    assert clip.latents(("enc", "right")) is None
    patches = torch.randn(3, 4, 64)
    a._forget(None)  # as the listener does when it reconnects: what the engine encodes still gets stored
    clip.remember(("enc", "right"), patches)  # as the engine does after encoding it for a request
    a._writer.submit(lambda: None).result()  # the writer thread has stored them
    np.testing.assert_array_equal(np.asarray(b.clip("anna", "enc")[1].latents(("enc", "right"))), patches.numpy())
    assert b.get("anna").bytes > len(a.audio_bytes("anna"))  # the patches count against the limit

    voice = b.get("anna")
    assert a.automatic_transcript("anna", "whisper") == (voice, None)
    a.keep_automatic_transcript(voice, "whisper", "hello there")
    assert b.automatic_transcript("Anna", "whisper")[1] == "hello there"
    assert b.get("anna").transcript is None  # a suggestion, not the voice's own transcript
    assert b.keep_automatic_transcript(voice, "other", "hello", save=True).transcript == "hello"
    assert a.keep_automatic_transcript(voice, "third", "bye", save=True).transcript == "hello"  # never replaced
    a.delete("anna")
    with pytest.raises(VoiceError) as gone:
        b.keep_automatic_transcript(voice, "whisper", "late")
    assert gone.value.status == 404


def test_a_library_opened_while_the_database_is_down_answers_503_then_recovers(postgres_cluster):
    from ..support.postgres import fresh_database

    with fresh_database(postgres_cluster.url) as url:
        postgres_cluster.stop()
        try:
            lib = opened_library(url, wait_s=0.5)
            for call in (lib.list, lambda: lib.get("anna"), lambda: lib.save("anna", tone())):
                with pytest.raises(LibraryUnavailable) as down:
                    call()
                assert down.value.status == 503 and down.value.headers == {"Retry-After": str(DEFAULTS.http.busy_retry_s)}
                assert "cannot be reached (" in str(down.value)
        finally:
            postgres_cluster.start()
        back = time.perf_counter()
        wait_until(lambda: _answers(lib), timeout=15, interval=0.1)
        record_figure(f"voice library (PostgreSQL) opened while the database was down: answering "
                      f"{time.perf_counter() - back:.1f} s after it started")
        assert lib.save("anna", tone()).name == "anna"
        lib.close()


def _answers(lib) -> bool:
    try:
        lib.list()
    except LibraryUnavailable:
        return False
    return True


@pytest.mark.parametrize("url, says", [("mysql://voxcpm:secret@db/voices", "starts with 'mysql'"),
                                       ("postgresql://voxcpm:secret@db:port/voices", "a port is a number")])
def test_a_voice_store_that_is_no_postgresql_url_stops_the_start_without_showing_its_password(url, says):
    import logging

    import app
    from startup import StartupError

    with pytest.raises(StartupError) as refused:
        app.library_settings(app.parse_args(["--voice-store", url]), "127.0.0.1", logging.getLogger("test"))
    assert says in str(refused.value) and "postgresql://user[:password]@host[:port]/database" in str(refused.value)
    assert "secret" not in str(refused.value)
    shared = app.library_settings(app.parse_args(["--voice-store", "postgresql://voxcpm:secret@db/voices"]),
                                  "127.0.0.1", logging.getLogger("test"))
    assert shared["voice_store"] == "postgresql://voxcpm:secret@db/voices" and "data_dir" not in shared
