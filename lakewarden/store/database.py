"""The system database: engine set-up, transactions, and migrations applied at start."""

from __future__ import annotations

import concurrent.futures
import contextlib
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, Select, create_engine, event
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, InvalidatePoolError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.base import Executable

from lakewarden.domain.errors import CommitStateUnknown
from lakewarden.store.async_reads import AsyncReads

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


def _single_reads_engine(url: str, engine: Engine) -> Engine:
    """The engine of `Database.first_row`. On PostgreSQL its connections are in autocommit, so that a read is
    one round trip (no ROLLBACK when the connection goes back to the pool), and are not pinged before use
    (first_row retries once on a connection found broken instead). SQLite's connections are in autocommit
    already: the same engine."""
    if engine.dialect.name == "sqlite":
        return engine
    return create_engine(url, isolation_level="AUTOCOMMIT", pool_size=5, max_overflow=10, connect_args=_CONNECT_ARGS)


def _answer_lost(exc: DBAPIError) -> bool:
    """Whether a statement or COMMIT that failed so may have taken effect: the connection broke (the answer was
    lost) rather than the database refusing it (a constraint, a bad value, which commit nothing)."""
    return exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)


def database_unavailable(exc: DBAPIError) -> bool:
    """Whether the system database failed as a database does when it is away or busy (a connection dropped or
    refused, a statement canceled, SQLite's file locked), not because of the statement: nothing was written,
    and the request may be tried again (the API answers 503)."""
    if exc.connection_invalidated:
        return True
    if type(exc.orig).__module__.startswith("psycopg"):  # PostgreSQL's driver: its OperationalError is that
        return isinstance(exc, OperationalError)
    return isinstance(exc, OperationalError) and "database is locked" in str(exc.orig)


def first_line(driver_error: BaseException | None) -> str:
    """The first line of a driver's error message (PostgreSQL's go on with DETAIL and HINT lines)."""
    return (str(driver_error).strip().splitlines() or [""])[0]


def _state_unknown(driver_error: BaseException | None, what: str) -> CommitStateUnknown:
    return CommitStateUnknown(
        f"{what} to the system database failed with no answer to rely on ({type(driver_error).__name__}: "
        f"{first_line(driver_error)}); whether it took effect is unknown"
    )


class DriverTransaction:
    """A transaction of Database.driver_write: its statements run on the driver's connection."""

    def __init__(self, db: Database, driver: Any) -> None:
        self._db = db
        self._driver = driver
        self.aborted = False

    def execute(self, statement: Executable, params: dict[str, Any]) -> Any:
        """Run the statement; the driver's cursor (its rowcount, lastrowid)."""
        sql, arguments = self._db._driver_arguments(statement, params)
        return self._driver.execute(sql, arguments)

    def abort(self) -> None:
        """Roll the transaction back when the block ends, instead of committing it."""
        self.aborted = True


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
        self._write_shapes: dict[Executable, tuple[str, list[tuple[str, Any]], dict[str, Any]]] = {}  # driver_write's
        self._shapes: dict[Any, tuple[str, list[str], dict[str, Any], bool]] = {}  # first_row's (_statement)
        self._single_reads = _single_reads_engine(url, self.engine)
        self._kept: Any = None  # first_row's own driver connection, out of the pool (see there)
        self._kept_lock = threading.Lock()
        postgresql = self.engine.dialect.name == "postgresql"
        # one_statement's: the writers' pool in autocommit (a statement is its own transaction). Switching a
        # connection to autocommit and back is a setting of the driver's, no round trip.
        self._statements = self.engine.execution_options(isolation_level="AUTOCOMMIT") if postgresql else None
        self._async_reads = AsyncReads(url) if postgresql else None  # first_row_async's
        # what first_row_async's statements are compiled for (asyncpg's `$1` parameters)
        self._async_dialect = PGDialect_asyncpg() if postgresql else None  # type: ignore[no-untyped-call]

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
                if _answer_lost(exc):  # the COMMIT was sent: it may have been applied
                    raise _state_unknown(exc.orig, "A COMMIT") from exc
                raise

    @contextmanager
    def read(self) -> Iterator[Session]:
        # close() (not rollback()) ends the transaction without expiring what was loaded
        with self._reader() as session:
            yield session

    def first_row(self, query: Select[*tuple[Any, ...]], params: dict[str, Any]) -> tuple[Any, ...] | None:
        """The first row of `query` (its bind parameters named in `params`), read through the driver alone.

        For the hottest reads (an internal table's pointer, once per loadTable and commit): SQLAlchemy's
        Connection and Session cost some ten times the query itself on SQLite (a transaction begun and
        rolled back, events, result wrappers), so the statement is compiled once by SQLAlchemy for this
        database's dialect and run on a pooled driver connection. Values come back as the driver gives them
        (no column type processing): select plain strings and numbers. One statement reads a committed
        state, in autocommit (see _single_reads_engine)."""
        sql, arguments = self._statement(query, params)
        # the hottest reader (the event loop, answering cached loads) keeps a connection of its own out of the
        # pool: checking one out and back in cost as much as the query. Whoever finds it taken uses the pool.
        if self._kept_lock.acquire(blocking=False):
            try:
                kept, row = self._query(self._kept, sql, arguments, keep=True)
                self._kept = kept
                return row
            finally:
                self._kept_lock.release()
        return self._query(None, sql, arguments, keep=False)[1]

    async def first_row_async(self, query: Select[*tuple[Any, ...]], params: dict[str, Any]) -> tuple[Any, ...] | None:
        """first_row for the event loop: on PostgreSQL awaited on an asyncio connection (asyncpg's, the statement
        compiled for it), so that the loop serves other requests during the round trip (store/async_reads.py); on
        SQLite (a local file, microseconds) it is first_row itself."""
        if self._async_reads is None:
            return self.first_row(query, params)
        sql, arguments = self._statement(query, params, self._async_dialect)
        return await self._async_reads.first_row(sql, arguments)

    @property
    def one_statements(self) -> bool:
        """Whether one_statement runs here (PostgreSQL)."""
        return self._statements is not None

    def one_statement(self, statement: Executable, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """PostgreSQL only: `statement` run as a transaction of its own (autocommit), and its first row. For a
        write that is one statement (a commit's swap with its rows, store/commit_statement.py), it saves
        the BEGIN and COMMIT round trips. A connection idle in the pool a while is pinged when taken (one that a
        database restart dropped is replaced then: ping_when_idle), and a statement is never retried once sent: whether
        a write whose answer was lost took effect is not known, and CommitStateUnknown says so to the caller."""
        if self._statements is None:
            raise RuntimeError("one_statement is for PostgreSQL")
        with self._statements.connect() as connection:  # a failure to connect sent nothing: raised as it is
            try:
                row = connection.execute(statement, params).first()
            except DBAPIError as exc:
                if _answer_lost(exc):
                    raise _state_unknown(exc.orig, "A statement") from exc
                raise
        return None if row is None else tuple(row)

    @contextmanager
    def driver_write(self) -> Iterator[DriverTransaction]:
        """SQLite only: a write transaction on the driver's connection itself (BEGIN IMMEDIATE ... COMMIT, under
        the writers' lock), for the hottest write, a single table's commit (store/commit_statement.py). Its
        statements are compiled once and their values converted by SQLAlchemy's own bind processors, so they
        write what the same statements through a Session would. Leaving the block commits, unless the
        transaction was aborted or the block raised (a rollback); a COMMIT that fails may have been applied
        (CommitStateUnknown)."""
        if self.engine.dialect.name != "sqlite":
            raise RuntimeError("driver_write is for SQLite")
        with self._write_lock:
            connection = self.engine.raw_connection()
            try:
                driver: Any = connection.dbapi_connection
                driver.execute("BEGIN IMMEDIATE")
                transaction = DriverTransaction(self, driver)
                try:
                    yield transaction
                except BaseException:
                    driver.execute("ROLLBACK")
                    raise
                if transaction.aborted:
                    driver.execute("ROLLBACK")
                    return
                try:
                    driver.execute("COMMIT")
                except self.engine.dialect.loaded_dbapi.Error as exc:
                    raise _state_unknown(exc, "A COMMIT") from exc
            finally:
                connection.close()  # back to the pool

    def _driver_arguments(self, statement: Executable, params: dict[str, Any]) -> tuple[str, list[Any]]:
        """A write statement compiled once for this database, and its arguments in the driver's form (SQLite's are
        positional), each converted by the statement's bind processor (dates, JSON) as SQLAlchemy's execution
        converts it. What it takes of the compiled statement is kept as `_statement` keeps a read's: SQLAlchemy's
        construction of the parameters on every call was a tenth of a commit's time in the database."""
        shape = self._write_shapes.get(statement)
        if shape is None:
            compiled = statement.compile(dialect=self.engine.dialect)  # type: ignore[attr-defined]
            bound = compiled.construct_params(params)
            processors: Mapping[str, Any] = compiled._bind_processors  # what SQLAlchemy's execution applies
            names = list(compiled.positiontup or [])
            fixed = {name: bound[name] for name in names if name not in params}
            shape = self._write_shapes[statement] = (compiled.string, [(n, processors.get(n)) for n in names], fixed)
        sql, order, fixed = shape
        arguments = []
        for name, process in order:
            value = params[name] if name in params else fixed[name]
            arguments.append(value if process is None else process(value))
        return sql, arguments

    def _statement(
        self, query: Select[*tuple[Any, ...]], params: dict[str, Any], dialect: Dialect | None = None
    ) -> tuple[str, Any]:
        """The query compiled once for this database's dialect (or `dialect`: the event loop's driver's), and its
        arguments in the driver's form: the values of `params` in the statement's order (its own literal values
        kept from the first time), without SQLAlchemy's construction of the parameters on every call (a fifth
        of a pointer's read)."""
        key = query if dialect is None else (query, dialect.driver)
        shape = self._shapes.get(key)
        if shape is None:
            compiled = query.compile(dialect=dialect or self.engine.dialect)
            bound = compiled.construct_params(params)
            positions = getattr(compiled, "positiontup", None)  # a positional paramstyle's order of the names
            names = list(bound) if positions is None else list(positions)
            fixed = {name: bound[name] for name in names if name not in params}
            shape = self._shapes[key] = (compiled.string, names, fixed, positions is not None)
        sql, names, fixed, positional = shape
        values = [params[name] if name in params else fixed[name] for name in names]
        return sql, values if positional else dict(zip(names, values, strict=True))

    def _query(self, connection: Any, sql: str, arguments: Any, keep: bool) -> tuple[Any, tuple[Any, ...] | None]:
        """The first row of `sql` on `connection` (None: one from the pool), once more on a new connection if
        the database had closed this one (a restart, a failover). With `keep` the connection stays out of the
        pool and is returned, to be used again (None if it was dropped); else it goes back to the pool."""
        engine = self._single_reads
        for attempt in range(2):
            if connection is None:
                connection = engine.raw_connection()
            try:
                # on the driver's connection itself (both drivers run a statement there): the pool's wrapper
                # of it and of its cursor cost twice the query
                cursor = connection.dbapi_connection.execute(sql, arguments)
                try:
                    row = cursor.fetchone()
                finally:
                    cursor.close()  # on SQLite, ends the read (an open one holds WAL checkpoints back)
            except engine.dialect.loaded_dbapi.Error as exc:
                broken = engine.dialect.is_disconnect(exc, connection.dbapi_connection, None)
                if broken:
                    # the database went away (a restart, a failover): so did the pool's other connections
                    connection.invalidate()
                    engine.dispose(close=False)
                connection.close()
                connection = None
                if attempt == 0 and broken:
                    continue
                # as SQLAlchemy raises a driver's error (api/errors.py: the database away is 503)
                raise DBAPIError.instance(
                    sql, arguments, exc, engine.dialect.loaded_dbapi.Error, connection_invalidated=broken
                ) from exc
            except BaseException:
                connection.close()
                raise
            if not keep:
                connection.close()  # back to the pool
                connection = None
            return connection, None if row is None else tuple(row)
        raise AssertionError("unreachable")

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
        if self._async_reads is not None:
            self._async_reads.close()
        with self._kept_lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None
        self.engine.dispose()
        if self._single_reads is not self.engine:
            self._single_reads.dispose()


def alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def migration_heads() -> list[str]:
    return list(ScriptDirectory.from_config(alembic_config()).get_heads())
