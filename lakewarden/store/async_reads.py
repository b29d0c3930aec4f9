"""Single-row reads of PostgreSQL for the event loop, without blocking it.

A cached loadTable's one database read, made with a blocking call, would stop the loop for a round trip and make
concurrent loads take turns at the database. Here it is awaited on an asyncio connection, a few per event loop,
opened when first needed and kept. They are asyncpg's, whose compiled protocol takes less of the loop's time per
read than psycopg's asyncio connection; statements are prepared once per connection. Failures are raised as
SQLAlchemy's errors of the kind (the database away is a 503)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

SIZE = 4  # connections per event loop: reads in flight at once
CONNECT_SECONDS = 10  # as the server's other connections (store/database.py)
READ_SECONDS = 30.0  # a read on a connection that stopped answering (a cut network) fails then


class AsyncReads:
    def __init__(self, url: str, size: int = SIZE) -> None:
        self.dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.size = size
        self._pools: dict[asyncio.AbstractEventLoop, _LoopPool] = {}
        self._lock = threading.Lock()
        self.sent = 0  # reads sent
        self.shared = 0  # callers answered by a read another caller's call sent

    async def first_row(self, sql: str, arguments: list[Any]) -> tuple[Any, ...] | None:
        """The first row of `sql` (its parameters `$1`, `$2`… in asyncpg's form), once more on a new connection
        if the database had closed the one used (a restart, a failover: the loop's other connections are then
        dropped too).

        Callers asking the same (a hot table's pointer, loaded by many clients) share reads: while one read of
        it is in flight, those who come wait for the next one, sent as soon as that read ends, and it answers
        them all. Never the read in flight: it was sent before they came, and might not see a commit that ended
        before they asked (one their client made)."""
        pool = self._pool()
        key = (sql, *arguments)
        if key in pool.running:
            waiting = pool.following.get(key)
            if waiting is None:
                waiting = pool.following[key] = pool.loop.create_future()
            self.shared += 1
            return await asyncio.shield(waiting)
        pool.running.add(key)
        try:
            return await self._read(pool, sql, arguments)
        finally:
            self._next(pool, key, sql, arguments)

    def _next(self, pool: _LoopPool, key: tuple[Any, ...], sql: str, arguments: list[Any]) -> None:
        """A read of `key` ended: the one those who came meanwhile wait for is sent now."""
        pool.running.discard(key)
        waiting = pool.following.pop(key, None)
        if waiting is not None:
            pool.running.add(key)
            task = pool.loop.create_task(self._follow(pool, key, sql, arguments, waiting))
            pool.tasks.add(task)
            task.add_done_callback(pool.tasks.discard)

    async def _follow(
        self, pool: _LoopPool, key: tuple[Any, ...], sql: str, arguments: list[Any], waiting: asyncio.Future[Any]
    ) -> None:
        try:
            row = await self._read(pool, sql, arguments)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                waiting.cancel()
            else:
                waiting.set_exception(exc)
                waiting.add_done_callback(lambda done: done.exception())  # not logged when nobody waits any more
            if not isinstance(exc, Exception):
                raise
        else:
            waiting.set_result(row)
        finally:
            self._next(pool, key, sql, arguments)

    async def _read(self, pool: _LoopPool, sql: str, arguments: list[Any]) -> tuple[Any, ...] | None:
        self.sent += 1
        for attempt in range(2):
            connection = await pool.acquire(sql, arguments)
            try:
                row = await connection.fetchrow(sql, *arguments, timeout=READ_SECONDS)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                lost = connection.is_closed() or isinstance(exc, OSError | TimeoutError)
                pool.release(connection, lost=True)
                if lost:
                    pool.drop_idle()
                    if attempt == 0 and not isinstance(exc, TimeoutError):
                        continue
                raise _as_sqlalchemy(sql, arguments, exc, lost) from exc
            except BaseException:
                pool.release(connection, lost=True)  # cancelled mid-read: its state is unknown
                raise
            pool.release(connection, lost=False)
            return None if row is None else tuple(row)
        raise AssertionError("unreachable")

    def _pool(self) -> _LoopPool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            with self._lock:
                for gone in [other for other in self._pools if other.is_closed()]:
                    self._pools.pop(gone).close()
                pool = self._pools[loop] = _LoopPool(self)
        return pool

    def close(self) -> None:
        """Closes every loop's connections (from any thread: the sockets are closed, no goodbye awaited)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def connections(self) -> int:
        return sum(pool.opened for pool in list(self._pools.values()))


def _as_sqlalchemy(sql: str, arguments: list[Any], exc: BaseException, lost: bool) -> DBAPIError:
    """The failure as SQLAlchemy raises the server's other drivers' failures: a connection that failed or was
    lost is an OperationalError with its connection invalidated (the database away), a refused statement a
    DBAPIError, a misuse of the connection an InterfaceError."""
    if lost:
        return OperationalError(sql, arguments, exc, connection_invalidated=True)
    if isinstance(exc, asyncpg.InterfaceError):
        return InterfaceError(sql, arguments, exc)
    return DBAPIError(sql, arguments, exc)


class _LoopPool:
    """One event loop's connections: idle ones in a queue; a free slot is a None in it (a connection to open)."""

    def __init__(self, reads: AsyncReads) -> None:
        self.reads = reads
        self.loop = asyncio.get_running_loop()
        self.idle: asyncio.Queue[asyncpg.Connection | None] = asyncio.Queue()
        for _ in range(reads.size):
            self.idle.put_nowait(None)
        self.opened = 0
        self.closed = False
        self.running: set[tuple[Any, ...]] = set()  # what is being read
        self.following: dict[tuple[Any, ...], asyncio.Future[Any]] = {}  # the read after it, for those who came
        self.tasks: set[asyncio.Task[None]] = set()  # reads sent for those, kept until they end

    async def acquire(self, sql: str, arguments: list[Any]) -> asyncpg.Connection:
        connection = await self.idle.get()
        if connection is not None:
            return connection
        try:
            opened = await asyncpg.connect(self.reads.dsn, timeout=CONNECT_SECONDS)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            self.idle.put_nowait(None)  # the slot stays free for the next one
            raise _as_sqlalchemy(sql, arguments, exc, lost=True) from exc
        except BaseException:
            self.idle.put_nowait(None)
            raise
        self.opened += 1
        return opened

    def release(self, connection: asyncpg.Connection, lost: bool) -> None:
        if lost or self.closed:
            self.opened -= 1
            self._terminate(connection)
            self.idle.put_nowait(None)
        else:
            self.idle.put_nowait(connection)

    def drop_idle(self) -> None:
        """Closes the idle connections (opened again when needed)."""
        kept: list[asyncpg.Connection | None] = []
        while not self.idle.empty():
            connection = self.idle.get_nowait()
            if connection is not None:
                self.opened -= 1
                self._terminate(connection)
            kept.append(None)
        for slot in kept:
            self.idle.put_nowait(slot)

    def close(self) -> None:
        """From any thread: the connections are closed on their own loop's."""
        self.closed = True
        while not self.idle.empty():
            connection = self.idle.get_nowait()
            if connection is not None:
                self.opened -= 1
                self._terminate(connection)

    def _terminate(self, connection: asyncpg.Connection) -> None:
        """Closes the connection's socket at once, without a goodbye to the server."""
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop or self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop closed: the socket goes with the connection object
                connection.terminate()
        else:
            self.loop.call_soon_threadsafe(connection.terminate)
