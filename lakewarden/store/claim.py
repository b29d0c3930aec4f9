"""A server's claim to be the only server on its system database, for as long as it runs: what lets it answer
loads from the heads it keeps (services/rest_catalog/heads.py).

SQLite: an exclusive lock on a file beside the database, let go however the process ends. PostgreSQL: an advisory
lock on a session of its own with short keepalives, pinged so the node stops counting on it before anyone else
could take it; a lost session is taken again, heads forgotten first. Servers with high availability hold it shared.
A second server is refused (`DatabaseInUse`). docs/architecture.md gives the timings."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from lakewarden.domain.errors import LakewardenError

log = logging.getLogger(__name__)
SOLE_LOCK = 0x1A4E3A7E  # PostgreSQL advisory lock key (STARTUP_LOCK is 0x1A4E3A7D)
KEEPALIVES = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 2, "tcp_keepalives_count": 3}
KEEPALIVE_SECONDS = 5 + 2 * 3  # a silent node's session ends after about this long
PING_SECONDS = 0.25  # a session ended (terminated, the database restarted) is seen within this
VALID_SECONDS = 3.0  # a silent session is counted on this long after a ping was sent: < KEEPALIVE_SECONDS
WAIT_SECONDS = 2 * KEEPALIVE_SECONDS  # a server that died without a word: its session ends within this


class DatabaseInUse(LakewardenError):
    """Another server holds this system database's claim."""


class Claim:
    """A claim held: `valid()` says whether the node may count on it now; `release()` lets it go."""

    on_regained: Callable[[], None] | None = None  # called before the claim is counted on again after a loss

    def valid(self) -> bool:
        return True

    def release(self) -> None:
        raise NotImplementedError


class _FileClaim(Claim):
    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def release(self) -> None:
        self._handle.close()  # the lock goes with the file's last descriptor


class _SessionClaim(Claim):
    def __init__(self, url: str, shared: bool) -> None:
        self._dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._shared = shared
        self._connection: psycopg.Connection[Any] | None = None
        self._valid_until = 0.0
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    def take(self, wait_seconds: float) -> None:
        deadline = time.monotonic() + wait_seconds
        told = False
        while True:
            started = time.monotonic()
            if self._lock():
                self._valid_until = started + VALID_SECONDS
                break
            if time.monotonic() >= deadline:
                holder = "without high availability" if self._shared else "on this database"
                raise DatabaseInUse(
                    f"another lakewarden server {holder} holds the system database (advisory lock {SOLE_LOCK}): "
                    "one server per database without ams.ha; with ams.ha on every server of the database"
                )
            if not told:
                log.warning("another server holds the system database; waiting up to %.0f s", wait_seconds)
                told = True
            time.sleep(PING_SECONDS)
        if not self._shared:  # the exclusive holder counts on its claim: it watches it
            self._watch = threading.Thread(target=self._watching, name="lakewarden-claim", daemon=True)
            self._watch.start()

    def valid(self) -> bool:
        return time.monotonic() < self._valid_until

    def _lock(self) -> bool:
        connection = psycopg.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=5,
            # this side gives a silent database up as quickly (a ping does not hang for TCP's default)
            keepalives=1,
            keepalives_idle=KEEPALIVES["tcp_keepalives_idle"],
            keepalives_interval=KEEPALIVES["tcp_keepalives_interval"],
            keepalives_count=KEEPALIVES["tcp_keepalives_count"],
            tcp_user_timeout=KEEPALIVE_SECONDS * 1000,
            options=" ".join(f"-c {name}={value}" for name, value in KEEPALIVES.items()),
        )
        try:
            function = "pg_try_advisory_lock_shared" if self._shared else "pg_try_advisory_lock"
            row = connection.execute(f"SELECT {function}(%s)", (SOLE_LOCK,)).fetchone()
        except BaseException:
            connection.close()
            raise
        if not (row and row[0]):
            connection.close()
            return False
        self._connection = connection
        return True

    def _watching(self) -> None:
        while not self._stop.wait(PING_SECONDS):
            started = time.monotonic()
            try:
                if self._connection is None:
                    if not self._lock():
                        continue
                    if self.on_regained is not None:
                        self.on_regained()
                    log.warning("the claim on the system database is held again")
                else:
                    self._connection.execute("SELECT 1")
                self._valid_until = started + VALID_SECONDS
            except Exception as exc:  # the session is gone, and its lock with it: taken again when it answers
                self._valid_until = 0.0  # not counted on from now: another server may take the lock at once
                if self._connection is not None:
                    log.warning("lost the claim on the system database (%s): loads read the pointers", exc)
                    with contextlib.suppress(Exception):
                        self._connection.close()
                    self._connection = None

    def release(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(10)
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()  # the lock goes with the session
            self._connection = None


def hold_alone(url: str, shared: bool = False, wait_seconds: float = WAIT_SECONDS) -> Claim | None:
    """This server's claim on its system database (see the module's docstring); `shared` for a server with high
    availability (PostgreSQL only: nothing to claim on SQLite, which has no such servers). None for an
    in-memory database. DatabaseInUse when another server holds it."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        claim = _SessionClaim(url, shared)
        claim.take(wait_seconds)
        return claim
    database = parsed.database
    if shared or not database or database == ":memory:":
        return None
    path = Path(f"{database}-server.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for as long as the server runs; closed by the release
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DatabaseInUse(
            f"another lakewarden server is running on the system database {database} (it holds {path}): one "
            "server per SQLite database; stop it first, or run several servers on PostgreSQL with ams.ha"
        ) from None
    return _FileClaim(handle)
