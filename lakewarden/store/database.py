"""The system database: engine set-up, transactions, and migrations applied at start."""

from __future__ import annotations

import concurrent.futures
import contextlib
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, InvalidatePoolError
from sqlalchemy.orm import Session, sessionmaker

from lakewarden.store.async_reads import AsyncReads
from lakewarden.store.driver import Driver
from lakewarden.store.failures import answer_lost, first_line, state_unknown

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
STARTUP_LOCK = 0x1A4E3A7D  # PostgreSQL advisory lock key: one server at a time migrates and seeds
# health checks' pings run here, so that one hanging on a cut connection cannot hang the check
_PINGS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="lakewarden-ping")


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything lakewarden stores is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _sqlite_engine(url: str) -> Engine:
    path = make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, start transactions, so writers can BEGIN IMMEDIATE and
        # wait on the busy timeout instead of failing when two upgrade a read lock at once.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: commits survive any process crash (only a power loss may drop the last ones)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


# a database that stops answering (a cut network) fails a connection within about 30 s instead of hanging it
_CONNECT_ARGS = {"connect_timeout": 10, "keepalives_idle": 10, "keepalives_interval": 5, "tcp_user_timeout": 30000}


def make_engine(url: str) -> Engine:
    if make_url(url).get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    engine = create_engine(url, pool_size=10, max_overflow=20, connect_args=_CONNECT_ARGS)
    ping_when_idle(engine, PING_AFTER_IDLE)
    return engine


# a pooled connection idle longer than this is pinged before use (HikariCP's window, `aliveBypassWindowMs`)
PING_AFTER_IDLE = 0.5


def ping_when_idle(engine: Engine, seconds: float) -> None:
    """A connection taken from the pool is checked before anything is sent on it, without a round trip when it
    can be: one that the server closed (a restart, a failover, an administrator's kill: the server's last words
    or the end of the stream wait in its socket, which an idle connection's never holds) is replaced at once; one
    that sat in the pool longer than `seconds` is pinged (`SELECT 1`) as well, and if that fails the pool is
    replaced with it (the database went away).

    SQLAlchemy's `pool_pre_ping` pings at every checkout: on PostgreSQL a round trip as long as a commit's own
    statement, before each commit, refresh and read. Within the window a connection whose database went away
    without a word (a cut network) is not found before use: its statement fails as a dropped connection's does
    (a write's state unknown, a read tried again). A connection just opened is not checked."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        record.info["returned"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _taken(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get("returned")
        if returned is None:
            return
        if _closed_by_server(dbapi_connection):
            raise DisconnectionError("the database closed this pooled connection")
        if time.monotonic() - returned <= seconds:
            return
        dialect = engine.dialect
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                raise InvalidatePoolError(f"a pooled connection failed its ping: {first_line(exc)}") from exc
            raise


def _closed_by_server(dbapi_connection: Any) -> bool:
    """Whether an idle connection's socket has something to read: only the server closing it puts anything there
    (a NOTIFY would too, but the pool's connections do not LISTEN)."""
    try:
        poller = select.poll()
        poller.register(dbapi_connection.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except Exception:  # no socket left to ask (the driver says so in its own way): it is gone
        return True


def single_reads_engine(url: str, engine: Engine) -> Engine:
    """The engine of `Driver.first_row` (store/driver.py). On PostgreSQL its connections are in autocommit, so
    that a read is one round trip (no ROLLBACK when the connection goes back to the pool), and are not pinged
    before use (first_row retries once on a connection found broken instead). SQLite's connections are in autocommit
    already: the same engine."""
    if engine.dialect.name == "sqlite":
        return engine
    return create_engine(url, isolation_level="AUTOCOMMIT", pool_size=5, max_overflow=10, connect_args=_CONNECT_ARGS)


class Database:
    """One system database. Store functions flush; `write()` and `read()` own the transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        writer_engine = self.engine
        # SQLite has one writer at a time: this process's writers queue on a lock instead of in
        # SQLite's busy handler, which sleeps in steps of up to 100 ms and makes bursts of commits slow
        self._write_lock: threading.Lock | contextlib.nullcontext[None] = contextlib.nullcontext()
        if self.engine.dialect.name == "sqlite":
            writer_engine = self.engine.execution_options(sqlite_begin="IMMEDIATE")
            self._write_lock = threading.Lock()
        self._writer = sessionmaker(writer_engine, expire_on_commit=False)
        # high availability: checks a write against the leader's lease (raises NotLeader); None: one node
        self.fence: Callable[[Session], None] | None = None
        single_reads = single_reads_engine(url, self.engine)
        async_reads = AsyncReads(url) if self.engine.dialect.name == "postgresql" else None
        self.driver = Driver(self.engine, single_reads, self._write_lock, async_reads)  # store/driver.py

    @contextmanager
    def write(self, any_node: bool = False) -> Iterator[Session]:
        """A write transaction. With high availability, a write is the leader's (its loops, the API's
        changes) and fenced by its lease unless `any_node` (the REST catalog's compare-and-swap commits, the
        audit log, start-up seeding), which any node may make."""
        with self._write_lock, self._writer() as session:
            session.begin()
            try:
                if self.fence is not None and not any_node:
                    self.fence(session)
                yield session
                session.flush()  # what fails here committed nothing
            except BaseException:
                session.rollback()
                raise
            try:
                session.commit()
            except DBAPIError as exc:
                if answer_lost(exc):  # the COMMIT was sent: it may have been applied
                    raise state_unknown(exc.orig, "A COMMIT") from exc
                raise

    @contextmanager
    def read(self) -> Iterator[Session]:
        # close() (not rollback()) ends the transaction without expiring what was loaded
        with self._reader() as session:
            yield session

    @contextmanager
    def startup_lock(self) -> Iterator[None]:
        """Servers starting together on one PostgreSQL database migrate and seed it one at a time."""
        if self.engine.dialect.name != "postgresql":
            yield
            return
        with self.engine.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({STARTUP_LOCK})")
            conn.commit()
            try:
                yield
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({STARTUP_LOCK})")
                conn.commit()

    def ping(self, timeout: float = 2.0) -> str:
        """'ok', or what went wrong reaching the database; a database that does not answer within `timeout`
        is an error too (a health check answers at once, even with the network to the database cut)."""

        def select_one() -> None:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")

        try:
            _PINGS.submit(select_one).result(timeout)
            return "ok"
        except concurrent.futures.TimeoutError:
            return f"error: no answer within {timeout:.0f}s"
        except Exception as exc:
            return f"error: {type(exc).__name__}"

    def migrate(self) -> None:
        """Bring the schema to the newest migration (the only way the schema changes)."""
        with self.engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def current_revision(self) -> str | None:
        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def dispose(self) -> None:
        self.driver.close()
        self.engine.dispose()


def alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def migration_heads() -> list[str]:
    return list(ScriptDirectory.from_config(alembic_config()).get_heads())
