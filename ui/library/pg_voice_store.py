"""The voice library in PostgreSQL (`--voice-store postgresql://...`), one library for every replica.

    voxcpm_voices          one row a voice: its name (and the name's key, unique), transcript,
                           length, size, the clip as FLAC, the automatic transcripts by ASR model
    voxcpm_voice_patches   its encoded patches, one row per VAE encoder and padding side (.npy)

A voice and its data are one transaction: it exists, whole, once that commits; a save cut short
(a crash, a kill, the database gone) leaves nothing. Saves take one transaction-scoped advisory
lock, so the count and size limits are checked and the row inserted with no other replica's save
in between; the unique name key refuses a second voice of the same name (409) even without it.

Every lookup reads the database, so a voice saved, renamed or deleted through one replica is found
by the others as soon as it commits. What each replica keeps in memory is a voice's clip with its
patches (ReferenceClip, by voice id, so the engine never encodes it twice): every change notifies
channel `voxcpm_voices` in its transaction, and a listener thread drops that voice's clip.

The database unreachable (at start-up or later): the voice routes answer 503 with the reason and a
Retry-After, everything else serves; the pool reconnects on its own, so they recover with no restart.
A save whose connection alone was lost runs once more on a fresh one before it answers 503.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import io
import logging
import secrets
import threading
import time

import numpy as np
import psycopg
import soundfile as sf
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from inference.request.reference import ReferenceClip

from ..settings import Settings
from .voice_names import check_name, name_key, normal_name
from .voice_store import (Voice, VoiceError, estimated_bytes, flac_bytes, library_options, name_taken, no_such_voice,
                          too_large, too_large_encoded, too_many)

log = logging.getLogger("voxcpm.voices")
CHANNEL = "voxcpm_voices"
# pg_advisory_xact_lock keys: one for creating the tables, one for every save (any 64-bit numbers
# that no other application on the database uses; these spell "voxcpm" and a digit in ASCII).
SCHEMA_LOCK, SAVE_LOCK = 0x766F7863706D30, 0x766F7863706D31
SCHEMA = """
CREATE TABLE IF NOT EXISTS voxcpm_voices (
    id text PRIMARY KEY,
    name text NOT NULL,
    name_key text NOT NULL UNIQUE,
    transcript text,
    seconds double precision NOT NULL,
    bytes bigint NOT NULL,
    created double precision NOT NULL,
    audio bytea NOT NULL,
    transcripts jsonb NOT NULL DEFAULT '{}'::jsonb);
CREATE TABLE IF NOT EXISTS voxcpm_voice_patches (
    voice_id text NOT NULL REFERENCES voxcpm_voices (id) ON DELETE CASCADE,
    encoder text NOT NULL,
    side text NOT NULL,
    patches bytea NOT NULL,
    PRIMARY KEY (voice_id, encoder, side));
"""
COLUMNS = "id, name, transcript, seconds, bytes, created"
# Each connection: fail fast when the server does not answer, and notice a peer that vanished
# (the listener's connection is otherwise silent for as long as nobody changes a voice).
CONNECTION = dict(connect_timeout=3, application_name="voxcpm2-demo", keepalives=1, keepalives_idle=10,
                  keepalives_interval=3, keepalives_count=3)
UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


class LibraryUnavailable(VoiceError):
    def __init__(self, reason: str, retry_after_s: int | None = None):
        """retry_after_s: the 503's Retry-After (the library's), none when no library gave one."""
        self.reason = reason
        super().__init__(503, f"the voice library is unavailable: its database cannot be reached ({reason}). "
                              f"Saved voices come back by themselves once it answers again; design and "
                              f"uploaded clips work meanwhile",
                         None if retry_after_s is None else {"Retry-After": str(retry_after_s)})


class ConnectionLost(LibraryUnavailable):
    """The connection ended mid-way (the server restarted, a failover, a proxy cut it): the pool
    replaces it, so a save may run again on a fresh one (PostgresVoiceLibrary._once_more)."""


def where(url: str) -> str:
    """host:port/database, for the log: never the password a URL may hold."""
    parts = conninfo_to_dict(url)
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', parts.get('user', ''))}"


def check_url(url: str) -> str:
    """The URL if psycopg can read it; an InputError naming the form otherwise (app.py, at start)."""
    from inference.errors import InputError

    form = "postgresql://user[:password]@host[:port]/database"
    if not url.startswith(("postgresql://", "postgres://")):  # not echoed: it may hold a password
        raise InputError(f"--voice-store takes a PostgreSQL URL, {form}; this one starts with "
                         f"{url.split(':', 1)[0][:20]!r}")
    try:
        port = str(conninfo_to_dict(url).get("port", "5432"))
    except psycopg.ProgrammingError:
        raise InputError(f"--voice-store is not a URL that PostgreSQL's client can read: {form}") from None
    if not all(p.isdigit() for p in port.split(",")):
        raise InputError(f"--voice-store names the port {port[:20]!r}; a port is a number: {form}")
    return url


class PostgresVoiceLibrary:
    """The VoiceStore (voice_store.py) of a PostgreSQL database. Thread-safe; every method waits on
    the database, so callers on an event loop use a thread. Opening it never waits for the
    database: until it answers, every method raises LibraryUnavailable (503)."""

    @staticmethod
    def options(settings: Settings, sample_rate: int) -> dict:
        """Its keyword arguments as a settings tree gives them (library_options, and the pool's)."""
        return dict(library_options(settings, sample_rate), connections=settings.library.db_connections,
                    wait_s=settings.library.db_wait_s, retry_after_s=settings.http.busy_retry_s)

    def __init__(self, url: str, *, sample_rate: int, max_voices: int, max_bytes: int, connections: int, wait_s: float,
                 retry_after_s: int):
        """connections: the pool's most, per replica (a query holds one for a millisecond or so);
        wait_s: the longest a caller waits for one before the library is unavailable; retry_after_s:
        the Retry-After of that 503."""
        self.url, self.where = url, where(url)
        self.sample_rate, self.max_voices, self.max_bytes = sample_rate, max_voices, max_bytes
        self.wait_s, self.retry_after_s = wait_s, retry_after_s
        # Connections are checked as they are handed out, so one the server closed is replaced, not used;
        # reconnection gives up after 10 s and starts again at the next request, so that once the
        # database is back it is used within a second or two, however long it was gone.
        self._pool = ConnectionPool(url, min_size=1, max_size=connections, open=False, timeout=wait_s,
                                    check=ConnectionPool.check_connection, reconnect_timeout=10,
                                    kwargs=CONNECTION, name="voxcpm-voices")
        self._pool.open(wait=False)
        self._lock = threading.Lock()
        self._schema_ready = False
        self._clips: dict[str, ReferenceClip] = {}  # voice id -> its clip with patches, once used
        self._forgotten = 0  # counts drops, so a clip read while its voice changed is not cached
        self._problem: str | None = None  # why the database was last unreachable, for the 503
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="voice-writer")
        self._closing = threading.Event()
        self.listening = threading.Event()  # set while the listener is connected (tests wait on it)
        self._listener = threading.Thread(target=self._listen, name="voice-listener", daemon=True)
        self._listener.start()

    # -- reading ---------------------------------------------------------------------------------
    def list(self) -> list[Voice]:
        with self._transaction() as conn:
            rows = conn.execute(f'SELECT {COLUMNS} FROM voxcpm_voices ORDER BY name_key COLLATE "C"').fetchall()
        return [Voice(*row) for row in rows]

    def get(self, name: str) -> Voice:
        with self._transaction() as conn:
            row = conn.execute(f"SELECT {COLUMNS} FROM voxcpm_voices WHERE name_key = %s", (name_key(name),)).fetchone()
        if row is None:
            raise no_such_voice(normal_name(name), self.list())
        return Voice(*row)

    def used_bytes(self) -> int:
        with self._transaction() as conn:
            return int(conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM voxcpm_voices").fetchone()[0])

    def audio_bytes(self, name: str) -> bytes:
        with self._transaction() as conn:
            row = conn.execute("SELECT audio FROM voxcpm_voices WHERE name_key = %s", (name_key(name),)).fetchone()
        if row is None:
            raise no_such_voice(normal_name(name), self.list())
        return bytes(row[0])

    def clip(self, name: str, identity: str) -> tuple[Voice, ReferenceClip]:
        """The voice and its clip for the engine, with the patches saved for this encoder; the
        FLAC is read only if the engine needs the samples (on the request's preparing thread)."""
        voice = self.get(name)
        with self._lock:
            clip, seen = self._clips.get(voice.id), self._forgotten
        if clip is None:
            clip = ReferenceClip(self.sample_rate, load=lambda: self._read_audio(voice),
                                 latents=self._read_latents(voice.id, identity),
                                 on_encoded=lambda key, patches: self._writer.submit(self._keep_latents, voice.id,
                                                                                     key, patches))
            with self._lock:
                if self._forgotten == seen:  # else it may have changed meanwhile: used once, not kept
                    clip = self._clips.setdefault(voice.id, clip)
        return voice, clip

    def automatic_transcript(self, name: str, model: str) -> tuple[Voice, str | None]:
        with self._transaction() as conn:
            row = conn.execute(f"SELECT {COLUMNS}, transcripts ->> %s FROM voxcpm_voices WHERE name_key = %s",
                               (model, name_key(name))).fetchone()
        if row is None:
            raise no_such_voice(normal_name(name), self.list())
        return Voice(*row[:-1]), row[-1]

    # -- changing --------------------------------------------------------------------------------
    def check_room(self, name: str, audio: np.ndarray):
        """Refuses a save that could not succeed (bad or taken name, library full) before any work;
        save() checks again, under the lock every replica's saves take."""
        name = check_name(name)
        with self._transaction() as conn:
            self._check_room(conn, name_key(name), name, estimated_bytes(audio))

    def save(self, name: str, audio: np.ndarray, transcript: str | None = None,
             latents: dict[str, dict[str, np.ndarray]] | None = None) -> Voice:
        """audio: float32 mono at sample_rate. latents: {encoder identity: {side: patches}}. The
        encoded clip and patches count against max_bytes: past it, the save is refused (507)."""
        name = check_name(name)
        flac = flac_bytes(audio, self.sample_rate)
        patches = [(identity, side, _npy(array)) for identity, sides in (latents or {}).items()
                   for side, array in sides.items()]
        size = len(flac) + sum(len(data) for *_, data in patches)
        voice = Voice(secrets.token_hex(8), name, transcript, len(audio) / self.sample_rate, size, time.time())
        try:
            self._once_more(lambda conn: self._insert(conn, voice, flac, patches, estimated_bytes(audio)))
        except errors.UniqueViolation:  # a save that took no lock (an older replica): the key decides
            raise name_taken(name) from None
        log.info("saved voice %r (%.1f s%s)", name, voice.seconds, ", with transcript" if transcript else "")
        return voice

    def _insert(self, conn, voice: Voice, flac: bytes, patches: list, estimate: int):
        """The save's transaction: the limits checked and the voice inserted under the lock every
        save takes."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SAVE_LOCK,))
        if conn.execute("SELECT 1 FROM voxcpm_voices WHERE id = %s", (voice.id,)).fetchone():
            return  # a try before this one committed, though its connection was lost before it heard so
        used = self._check_room(conn, name_key(voice.name), voice.name, estimate)
        if voice.bytes > self.max_bytes - used:
            raise too_large_encoded(voice.bytes, max(0, self.max_bytes - used), self.max_bytes)
        conn.execute("INSERT INTO voxcpm_voices (id, name, name_key, transcript, seconds, bytes, created, audio) "
                     "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", (voice.id, voice.name, name_key(voice.name),
                                                                  voice.transcript, voice.seconds, voice.bytes,
                                                                  voice.created, flac))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO voxcpm_voice_patches VALUES (%s, %s, %s, %s)",
                            [(voice.id, *row) for row in patches])
        self._before_commit(conn)
        self._notify(conn, voice.id)

    def rename(self, name: str, new_name: str) -> Voice:
        new_name = check_name(new_name)
        voice = self.get(name)
        try:
            with self._transaction() as conn:
                row = conn.execute(f"UPDATE voxcpm_voices SET name = %s, name_key = %s WHERE id = %s "
                                   f"RETURNING {COLUMNS}", (new_name, name_key(new_name), voice.id)).fetchone()
                if row is not None:
                    self._notify(conn, voice.id)
        except errors.UniqueViolation:
            raise name_taken(new_name) from None
        if row is None:  # deleted meanwhile, through another replica
            raise no_such_voice(voice.name, self.list())
        return Voice(*row)

    def delete(self, name: str) -> Voice:
        with self._transaction() as conn:
            row = conn.execute(f"DELETE FROM voxcpm_voices WHERE name_key = %s RETURNING {COLUMNS}",
                               (name_key(name),)).fetchone()
            if row is not None:
                self._notify(conn, row[0])
        if row is None:
            raise no_such_voice(normal_name(name), self.list())
        self._forget(row[0])  # here at once; the other replicas when they hear of it
        return Voice(*row)

    def keep_automatic_transcript(self, voice: Voice, model: str, text: str, save: bool = False) -> Voice:
        """Keeps it with the voice; save: also as the voice's own transcript, which it must not
        have yet (one the user typed is never replaced)."""
        with self._transaction() as conn:
            row = conn.execute(
                "UPDATE voxcpm_voices SET transcripts = transcripts || jsonb_build_object(%s::text, %s::text), "
                "transcript = CASE WHEN %s AND transcript IS NULL THEN %s ELSE transcript END "
                f"WHERE id = %s RETURNING {COLUMNS}", (model, text, save, text, voice.id)).fetchone()
        if row is None:  # deleted (and maybe its name reused) while it was transcribed
            raise VoiceError(404, f"the voice {voice.name!r} was deleted meanwhile")
        return Voice(*row)

    def close(self):
        self._closing.set()
        self._listener.join(timeout=5)
        self._writer.shutdown(wait=True)
        self._pool.close()

    # -- inside --------------------------------------------------------------------------------------
    def _reason(self, exc: BaseException) -> str:
        return _reason(exc, self.wait_s)

    @contextlib.contextmanager
    def _transaction(self):
        """A connection in a transaction, committed when the block ends, rolled back if it raises;
        the database unreachable (no connection within wait_s, or lost mid-way) is LibraryUnavailable,
        at once while the listener finds it so: no thread then waits wait_s for the same answer."""
        problem = self._problem
        if problem is not None:
            raise LibraryUnavailable(problem, self.retry_after_s)
        conn = None
        try:
            with self._pool.connection() as conn:
                if not self._schema_ready:
                    self._create_schema(conn)
                with conn.transaction():
                    yield conn
        except UNREACHABLE as exc:
            # A connection that was handed out and is now closed was lost mid-way; anything else
            # (no connection within wait_s) is the database unreachable.
            lost = conn is not None and conn.closed and self._problem is None
            raise (ConnectionLost if lost else LibraryUnavailable)(self._problem or self._reason(exc),
                                                                   self.retry_after_s) from None

    def _once_more(self, work):
        """work(conn) in a transaction; if its connection was lost mid-way, once more on a fresh one
        (the pool hands out a new connection, checked): a server restart or a failover then costs a
        save a retry, not a 503. Once only: a second loss means the database itself is going, and
        the 503 says so. `work` must be safe to run again after a commit it did not hear of."""
        try:
            with self._transaction() as conn:
                return work(conn)
        except ConnectionLost as exc:
            log.info("voice library: a connection to %s was lost mid-way (%s); trying once more on a fresh one",
                     self.where, exc.reason)
        with self._transaction() as conn:
            return work(conn)

    def _create_schema(self, conn):
        try:
            with conn.transaction():  # replicas starting together: one creates, the others wait and see it
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                conn.execute(SCHEMA)
        except errors.InsufficientPrivilege as exc:  # a setup problem, not a client's: said as such
            log.error("voice library: the role may not create its tables in %s: %s", self.where, exc)
            raise LibraryUnavailable("the database role may not create the library's tables; "
                                     "the server's log says more", self.retry_after_s) from None
        self._schema_ready = True

    def _check_room(self, conn, key: str, name: str, new_bytes: int) -> int:
        count, used, taken = conn.execute("SELECT COUNT(*), COALESCE(SUM(bytes), 0), "
                                          "COALESCE(bool_or(name_key = %s), false) FROM voxcpm_voices",
                                          (key,)).fetchone()
        if taken:
            raise name_taken(name)
        if count >= self.max_voices:
            raise too_many(count)
        if used + new_bytes > self.max_bytes:
            raise too_large(self.max_bytes)
        return int(used)

    def _before_commit(self, conn):
        """Nothing: tests replace it to cut a save short between its data and its commit."""

    def _notify(self, conn, voice_id: str):
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, voice_id))  # delivered when the transaction commits

    def _forget(self, voice_id: str | None):
        """Drops one voice's clip (None: every clip, after notifications may have been missed)."""
        with self._lock:
            self._forgotten += 1
            if voice_id is None:
                self._clips.clear()
            else:
                self._clips.pop(voice_id, None)

    def _read_audio(self, voice: Voice) -> np.ndarray:
        with self._transaction() as conn:
            row = conn.execute("SELECT audio FROM voxcpm_voices WHERE id = %s", (voice.id,)).fetchone()
        if row is None:
            raise VoiceError(404, f"the voice {voice.name!r} was deleted meanwhile")
        audio, _ = sf.read(io.BytesIO(row[0]), dtype="float32")
        return audio

    def _read_latents(self, voice_id: str, identity: str) -> dict:
        with self._transaction() as conn:
            rows = conn.execute("SELECT side, patches FROM voxcpm_voice_patches WHERE voice_id = %s AND encoder = %s",
                                (voice_id, identity)).fetchall()
        return {(identity, side): np.load(io.BytesIO(data)) for side, data in rows}

    def _keep_latents(self, voice_id: str, key: tuple[str, str], patches):
        """Stores what a request encoded (on the writer thread, handed the patches themselves: the
        clip may have left the cache meanwhile), if the voice is still there and the library has
        room: charged under the lock every save takes, so patches and a save at once, on any
        replica, cannot pass max_bytes together. Without room they are not kept: the engine encodes
        the clip again when it next needs them, and only that time is lost."""
        data = _npy(patches)
        try:
            with self._transaction() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SAVE_LOCK,))
                conn.execute("INSERT INTO voxcpm_voice_patches VALUES (%s, %s, %s, %s) ON CONFLICT (voice_id, "
                             "encoder, side) DO UPDATE SET patches = EXCLUDED.patches", (voice_id, *key, data))
                size, others = conn.execute(
                    "SELECT octet_length(audio) + (SELECT COALESCE(SUM(octet_length(patches)), 0) FROM "
                    "voxcpm_voice_patches WHERE voice_id = %s), (SELECT COALESCE(SUM(bytes), 0) FROM voxcpm_voices "
                    "WHERE id <> %s) FROM voxcpm_voices WHERE id = %s", (voice_id, voice_id, voice_id)).fetchone()
                if others + size > self.max_bytes:
                    raise too_large(self.max_bytes)  # rolls the patches back
                conn.execute("UPDATE voxcpm_voices SET bytes = %s WHERE id = %s", (size, voice_id))
        except errors.ForeignKeyViolation:
            pass  # deleted meanwhile
        except LibraryUnavailable as exc:  # encoded again next time: nothing is lost but the time
            log.warning("the patches encoded for a voice were not stored: %s", exc)
        except VoiceError as exc:  # no room
            log.info("the patches encoded for a voice were not kept: %s", exc)

    def _listen(self):
        """The listener thread: drops the clip of each voice another replica changed, and tells
        whether the database answers (`_problem`). A lost connection is replaced at once, then
        retried every second while that fails; once back, every clip is dropped (changes may have
        been missed meanwhile)."""
        while not self._closing.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, **CONNECTION) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._forget(None)
                    if self._problem is not None or not self.listening.is_set():
                        log.info("voice library: PostgreSQL at %s answers", self.where)
                    self._problem = None
                    self.listening.set()
                    while not self._closing.is_set():
                        for note in conn.notifies(timeout=0.05):  # and look at _closing: close() waits this long
                            self._forget(note.payload)
            except psycopg.Error as exc:
                if self.listening.is_set():  # a connection that worked was lost: see whether another one does
                    self.listening.clear()
                    continue
                if self._problem is None:
                    log.warning("voice library: PostgreSQL at %s cannot be reached (%s); the voice routes answer "
                                "503 until it can", self.where, self._reason(exc))
                self._problem = self._reason(exc)
                self._closing.wait(1.0)


def _npy(patches) -> bytes:
    """Patches (an array, or the host tensor a request encoded) as .npy bytes."""
    out = io.BytesIO()
    np.save(out, np.asarray(patches), allow_pickle=False)
    return out.getvalue()


def _reason(exc: BaseException, wait_s: float) -> str:
    """The cause in a few words, without the server's address: e.g. 'Connection refused'."""
    if isinstance(exc, PoolTimeout):
        return f"no connection within {wait_s:g} s"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first.rsplit(": ", 1)[-1][:200] or type(exc).__name__
