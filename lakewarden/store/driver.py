"""The hottest statements of the system database, on the drivers' own connections, below SQLAlchemy's Session:
an internal table's pointer read (once per loadTable and commit), and a single table's commit (its swap with its
timeline entry and event, store/commit_statement.py). Each statement is compiled once by SQLAlchemy for the
database's dialect, and what a call needs of it is kept (its SQL, the order of its parameters, their bind
processors), so a call costs the driver's own work and little more. The rest of lakewarden goes through
`Database.read()` and `Database.write()` (store/database.py)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from typing import cast as typed

from sqlalchemy import Engine, Select
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.base import Executable

from lakewarden._compat.sqlalchemy import bind_processors
from lakewarden.domain.errors import WouldWait
from lakewarden.store.async_reads import AsyncReads
from lakewarden.store.failures import answer_lost, state_unknown


class DriverTransaction:
    """A transaction of Driver.write: its statements run on the driver's connection."""

    def __init__(self, owner: Driver, driver: Any) -> None:
        self._owner = owner
        self._driver = driver
        self.aborted = False

    def execute(self, statement: Executable, params: dict[str, Any]) -> Any:
        """Run the statement; the driver's cursor (its rowcount, lastrowid)."""
        sql, arguments = self._owner._driver_arguments(statement, params)
        return self._driver.execute(sql, arguments)

    def abort(self) -> None:
        """Roll the transaction back when the block ends, instead of committing it."""
        self.aborted = True


class Driver:
    """A database's statements on the driver's connections (see the module's docstring). `engine` is the
    database's; `single_reads` the engine of first_row's connections (autocommit); `write_lock` SQLite's lock of
    this process's writers; `async_reads` PostgreSQL's reads for the event loop (None on SQLite)."""

    def __init__(
        self,
        engine: Engine,
        single_reads: Engine,
        write_lock: threading.Lock | contextlib.nullcontext[None],
        async_reads: AsyncReads | None,
    ) -> None:
        self.engine = engine
        self._single_reads = single_reads
        self._write_lock = write_lock
        self._kept: Any = None  # first_row's own driver connection, out of the pool (see there)
        self._kept_lock = threading.Lock()
        self._loop_writer: Any = None  # write's connection when it may not wait (SQLite), out of the pool
        self._shapes: dict[Any, tuple[str, list[str], dict[str, Any], bool]] = {}  # first_row's (_statement)
        # write's and one_statement's
        self._write_shapes: dict[Executable, tuple[str, list[tuple[str, Any]], dict[str, Any], bool]] = {}
        postgresql = engine.dialect.name == "postgresql"
        # one_statement's: the writers' pool in autocommit (a statement is its own transaction). Switching a
        # connection to autocommit and back is a setting of the driver's, no round trip.
        self._statements = engine.execution_options(isolation_level="AUTOCOMMIT") if postgresql else None
        self._async_reads = async_reads  # first_row_async's
        # what first_row_async's statements are compiled for (asyncpg's `$1` parameters)
        self._async_dialect = PGDialect_asyncpg() if postgresql else None  # type: ignore[no-untyped-call]

    def first_row(self, query: Select[*tuple[Any, ...]], params: dict[str, Any]) -> tuple[Any, ...] | None:
        """The first row of `query` (its bind parameters named in `params`), read through the driver alone.

        For the hottest reads (an internal table's pointer, once per loadTable and commit): SQLAlchemy's
        Connection and Session cost some ten times the query itself on SQLite (a transaction begun and
        rolled back, events, result wrappers), so the statement is compiled once by SQLAlchemy for this
        database's dialect and run on a pooled driver connection. Values come back as the driver gives them
        (no column type processing): select plain strings and numbers. One statement reads a committed
        state, in autocommit (store/database.py's single_reads_engine)."""
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
    def in_process(self) -> bool:
        """Whether the database is a file this process writes itself (SQLite): a statement waits for no network."""
        return self.engine.dialect.name == "sqlite"

    @property
    def one_statements(self) -> bool:
        """Whether one_statement runs here (PostgreSQL)."""
        return self._statements is not None

    def one_statement(self, statement: Executable, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """PostgreSQL only: `statement` run as a transaction of its own (autocommit), and its first row. For a
        write that is one statement (a commit's swap with its rows, store/commit_statement.py), it saves the
        BEGIN and COMMIT round trips. It runs on the driver's connection itself, compiled once as Driver.write's
        statements are (SQLAlchemy's Connection cost a commit's statement a sixth of its time on the server). A
        pooled connection is checked when taken (store/database.ping_when_idle), and a statement is never retried
        once sent: whether a write whose answer was lost took effect is not known, and CommitStateUnknown says
        so to the caller."""
        if self._statements is None:
            raise RuntimeError("one_statement is for PostgreSQL")
        sql, arguments = self._driver_arguments(statement, params)
        dbapi = self.engine.dialect.loaded_dbapi
        connection = self.engine.raw_connection()  # a failure to connect sent nothing: raised as it is
        driver: Any = connection.dbapi_connection
        try:
            driver.autocommit = True  # the connection is idle when taken (the pool rolled it back when returned)
            try:
                with driver.execute(sql, arguments) as cursor:
                    row = cursor.fetchone()
            finally:
                with contextlib.suppress(dbapi.Error):
                    driver.autocommit = False  # as the pool's other users expect it (fails on a broken one)
        except dbapi.Error as exc:
            broken = self.engine.dialect.is_disconnect(exc, driver, None)
            if broken:
                connection.invalidate()  # the database went away: the pool's other connections are checked
            error = DBAPIError.instance(sql, arguments, exc, dbapi.Error, connection_invalidated=broken)
            if not isinstance(error, DBAPIError) or answer_lost(error):  # (it is one: `exc` is the driver's)
                raise state_unknown(exc, "A statement") from error
            raise error from exc
        finally:
            connection.close()  # back to the pool
        return None if row is None else tuple(row)

    @contextmanager
    def write(self, wait: bool = True) -> Iterator[DriverTransaction]:
        """SQLite only: a write transaction on the driver's connection itself (BEGIN IMMEDIATE ... COMMIT, under
        the writers' lock), for the hottest write, a single table's commit (store/commit_statement.py). Its
        statements are compiled once and their values converted by SQLAlchemy's own bind processors, so they
        write what the same statements through a Session would. Leaving the block commits, unless the
        transaction was aborted or the block raised (a rollback); a COMMIT that fails may have been applied
        (CommitStateUnknown).

        Without `wait` (the event loop's commits, services/rest_catalog/commits.py) it raises WouldWait, having begun
        nothing, when another writer of this process or another process holds the database longer than Python's
        switch interval (`sys.getswitchinterval()`, 0.5 ms in the server): as long as a thread running Python may
        keep the loop waiting for the interpreter's lock anyway. It runs on a connection of its own, kept out of
        the pool (checking one out and in shows in a commit's time in the database)."""
        if not self.in_process:
            raise RuntimeError("Driver.write is for SQLite")
        if wait:
            with self._write_lock:
                connection = self.engine.raw_connection()
                try:
                    with self._transaction(connection.dbapi_connection, wait=True) as transaction:
                        yield transaction
                finally:
                    connection.close()  # back to the pool
            return
        lock = typed(threading.Lock, self._write_lock)
        if not lock.acquire(timeout=sys.getswitchinterval()):
            raise WouldWait("another writer of this process holds the system database")
        try:
            if self._loop_writer is None:
                self._loop_writer = self.engine.raw_connection()
                busy_ms = max(1, round(sys.getswitchinterval() * 1000))  # SQLite's busy handler waits that long
                self._loop_writer.dbapi_connection.execute(f"PRAGMA busy_timeout={busy_ms}")
            with self._transaction(self._loop_writer.dbapi_connection, wait=False) as transaction:
                yield transaction
        finally:
            lock.release()

    @contextmanager
    def _transaction(self, driver: Any, wait: bool) -> Iterator[DriverTransaction]:
        """Driver.write's transaction on the SQLite connection `driver`."""
        errors = self.engine.dialect.loaded_dbapi.Error
        try:
            driver.execute("BEGIN IMMEDIATE")
        except errors as exc:
            if not wait and ("locked" in str(exc) or "busy" in str(exc)):  # another process writes
                raise WouldWait(f"the system database is busy: {exc}") from exc
            raise
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
        except errors as exc:
            raise state_unknown(exc, "A COMMIT") from exc

    def _driver_arguments(self, statement: Executable, params: dict[str, Any]) -> tuple[str, Any]:
        """A write statement compiled once for this database, and its arguments in the driver's form (SQLite's are
        positional, psycopg's named), each converted by the statement's bind processor (dates, JSON) as
        SQLAlchemy's execution converts it. What it takes of the compiled statement is kept as `_statement` keeps
        a read's: SQLAlchemy's construction of the parameters on every call would show in a commit's time in
        the database."""
        shape = self._write_shapes.get(statement)
        if shape is None:
            compiled = statement.compile(dialect=self.engine.dialect)  # type: ignore[attr-defined]
            bound = compiled.construct_params(params)
            processors = bind_processors(compiled)  # what SQLAlchemy's execution applies
            positions = compiled.positiontup  # a positional paramstyle's order of the names
            names = list(bound) if positions is None else list(positions)
            fixed = {name: bound[name] for name in names if name not in params}
            order = [(n, processors.get(n)) for n in names]
            shape = self._write_shapes[statement] = (compiled.string, order, fixed, positions is not None)
        sql, order, fixed, positional = shape
        arguments = []
        for name, process in order:
            value = params[name] if name in params else fixed[name]
            arguments.append(value if process is None else process(value))
        return sql, arguments if positional else dict(zip((name for name, _ in order), arguments, strict=True))

    def _statement(
        self, query: Select[*tuple[Any, ...]], params: dict[str, Any], dialect: Dialect | None = None
    ) -> tuple[str, Any]:
        """The query compiled once for this database's dialect (or `dialect`: the event loop's driver's), and its
        arguments in the driver's form: the values of `params` in the statement's order (its own literal values
        kept from the first time), without SQLAlchemy's construction of the parameters on every call (a large
        share of a pointer's read)."""
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

    def close(self) -> None:
        """Closes the event loop's connections, first_row's own, and first_row's pool when it is its own (the
        database's engine is the database's to dispose)."""
        if self._async_reads is not None:
            self._async_reads.close()
        with self._kept_lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None
        with self._write_lock:
            if self._loop_writer is not None:
                self._loop_writer.close()
                self._loop_writer = None
        if self._single_reads is not self.engine:
            self._single_reads.dispose()
