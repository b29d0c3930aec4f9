"""A throwaway PostgreSQL server for the tests: a private cluster on loopback, removed afterwards."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

_databases = itertools.count(1)


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")


@contextmanager
def postgres_server(port: int) -> Iterator[str | None]:
    """Yields a SQLAlchemy URL of a server to create databases on, or None when PostgreSQL is absent."""
    explicit = os.environ.get("LAKEWARDEN_TEST_POSTGRES_URL")
    if explicit:
        yield explicit
        return
    bindir = _bindir()
    if bindir is None:
        yield None
        return
    # initdb refuses to run as root: run the cluster as the postgres user then
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # a directory of its own under /tmp: the postgres user cannot enter pytest's root-only temp dirs
    base = Path(tempfile.mkdtemp(prefix="lakewarden-pg-"))
    base.chmod(0o777)
    data = base / "data"
    try:
        _run(*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "lakewarden", "--auth=trust", "-E", "UTF8")
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
        _run(*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start")
        try:
            yield f"postgresql+psycopg://lakewarden@127.0.0.1:{port}/postgres"
        finally:
            _run(*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new empty database on the server; returns its SQLAlchemy URL."""
    name = f"lw_test_{os.getpid()}_{next(_databases)}"
    dsn = server_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + f"/{name}"
