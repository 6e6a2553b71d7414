"""A PostgreSQL server for the voice library's tests (ui/library/pg_voice_store.py).

`$VOXCPM_TEST_POSTGRES` (a URL whose role may create databases; .ci/run starts Debian's cluster and
sets it) is used when given. Otherwise, and always for a test that must stop the server, a throwaway
cluster is made from Debian's binaries (`$VOXCPM_PG_BIN`, else /usr/lib/postgresql/15/bin) in a
temporary folder, on a free loopback port, without durability (a test's data is thrown away). As
root, the server runs as the `postgres` user: initdb and postgres refuse to run as root.
Each test gets a database of its own (`fresh_database`), dropped after it.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .app_helpers import free_port

PG_BIN = Path(os.environ.get("VOXCPM_PG_BIN", "/usr/lib/postgresql/15/bin"))
URL_VAR = "VOXCPM_TEST_POSTGRES"


def missing(need_throwaway: bool = False) -> str | None:
    """Why no server can be had here (need_throwaway: one this process may stop), or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (requirements.txt)"
    if os.environ.get(URL_VAR) and not need_throwaway:
        return None
    if not (PG_BIN / "initdb").is_file():
        return (f"no PostgreSQL server: set {URL_VAR} to a database URL, or install Debian's postgresql "
                f"(looked for {PG_BIN}/initdb; $VOXCPM_PG_BIN names another folder)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root with no 'postgres' user to run a throwaway PostgreSQL server as"
    return None


class Cluster:
    """A throwaway server: made and started by start(), stopped and started again by the tests
    that take the database away, removed by remove()."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="voxcpm-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_user = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8",
                  "--locale=C")

    def start(self):
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "log"), "-w", "-o", options, "start")

    def stop(self):
        """As an administrator stops it: every connection is closed (fast shutdown)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self):
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def _run(self, program: str, *args: str):
        subprocess.run([*self._as_user, str(PG_BIN / program), *args], check=True, capture_output=True,
                       timeout=120, cwd=self.folder)


@contextlib.contextmanager
def fresh_database(server_url: str):
    """A new, empty database on that server, as a URL; dropped afterwards."""
    import psycopg

    name = f"voxcpm_test_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        drop_database(server_url, name)


def drop_database(server_url: str, name: str, wait_s: float = 20.0):
    """FORCE ends the tests' own sessions still on it. An autovacuum worker busy on the new database
    is no role's, so a role that may only create databases cannot end it (InsufficientPrivilege,
    once in a clean clone's run): it is done within moments, so the drop is tried again meanwhile."""
    import psycopg

    deadline = time.monotonic() + wait_s
    while True:
        try:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except psycopg.errors.InsufficientPrivilege:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
