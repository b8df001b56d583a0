"""A real PostgreSQL server for the tests of the sweeps' storages (issue 67).

Optuna's RDB storage is shared by sweep workers on other processes and machines through a database
server; SQLite does not show what a server does under concurrent workers (row locks, the server's
clock for heartbeats). :func:`postgres_url` starts a throwaway server of its own from Debian's
``postgresql`` package (``.ci/run`` installs it), never a cluster the machine may already run.

Use it in a test module with ``from pg_server import postgres_url  # noqa: F401`` and a test
argument ``postgres_url``: an SQLAlchemy URL, ``postgresql+psycopg2://postgres@127.0.0.1:<port>/attnflow``,
of an empty database. Session-scoped: one server per pytest process (each pytest-xdist worker its own,
on its own port), started by the first test that asks for it and stopped at the end. Skips, with the
reason, where no PostgreSQL server binaries or no psycopg2 are installed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

DATABASE = "attnflow"


def server_bindir() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``: ``pg_config --bindir`` where it has them (Debian's
    ``/usr/bin/pg_config`` may come from libpq-dev without a server), else the newest
    ``/usr/lib/postgresql/<version>/bin``, else the ``PATH``'s."""
    candidates = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        candidates.append(out.stdout.strip())
    versions = [p for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p).parent.name.isdigit()]
    candidates += sorted(versions, key=lambda p: int(Path(p).parent.name), reverse=True)
    if shutil.which("initdb"):
        candidates.append(str(Path(shutil.which("initdb")).resolve().parent))
    for folder in candidates:
        if folder and all(os.access(Path(folder, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be started here (the reason: what to install)."""


@contextlib.contextmanager
def server(max_connections: int = 100):
    """A throwaway PostgreSQL server in a temporary folder: yields ``database(name)``, which makes
    an empty database and returns its SQLAlchemy URL; stopped and removed afterwards. Raises
    :class:`ServerUnavailable` where no server can be had, ``RuntimeError`` where one fails."""
    bindir = server_bindir()
    if bindir is None:
        raise ServerUnavailable("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql package")
    # initdb and postgres refuse to run as root: as root, run them as the package's `postgres` user
    as_user = []
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise ServerUnavailable("running as root and there is no `postgres` user to run the "
                                    "PostgreSQL server as") from None
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="attnflow-pg-"))  # in /tmp: the postgres user can reach it
    data, log = root / "data", root / "server.log"
    if as_user:
        os.chown(root, pw.pw_uid, pw.pw_gid)

    def run(*cmd: str) -> subprocess.CompletedProcess:
        # cwd=root: the postgres user may not be allowed into the caller's working directory
        return subprocess.run(as_user + list(cmd), cwd=root, capture_output=True, text=True)

    port = None
    try:
        done = run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                   "-E", "UTF8", "--locale=C", "--no-sync")
        if done.returncode:
            raise RuntimeError(f"initdb failed:\n{done.stdout}{done.stderr}")
        for _ in range(3):  # another process may take the free port between _free_port and the start
            candidate = _free_port()
            # fsync off: a throwaway server; Unix socket in our folder, not /var/run/postgresql
            options = (f"-k {root} -c listen_addresses=127.0.0.1 -p {candidate} -c fsync=off "
                       f"-c max_connections={max_connections}")
            done = run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start")
            if done.returncode == 0:
                port = candidate
                break
        if port is None:
            raise RuntimeError(f"pg_ctl start failed:\n{done.stdout}{done.stderr}\n{log.read_text()}")
        yield lambda name: _database(port, name)
    finally:
        if port is not None:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _database(port: int, name: str) -> str:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
    conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    conn.close()
    return f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{name}"


@pytest.fixture(scope="session")
def postgres_url():
    """An empty database on a PostgreSQL server of this pytest process (see the module's docstring)."""
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install -e '.[postgres]')")
    try:
        with server() as database:
            yield database(DATABASE)
    except ServerUnavailable as why:
        pytest.skip(str(why))
