"""Single-row reads of PostgreSQL for the event loop, without blocking it.

A cached loadTable is answered on the server's event loop, and its one database read (the table's pointer) is
a round trip to PostgreSQL. Made with a blocking driver call, the loop waited through each round trip and
served nothing else meanwhile: eight clients' loads took turns at the database. Here the read is awaited on
an asyncio connection of psycopg, so the loop serves other requests while one waits; each event loop has its
own few connections (a connection belongs to the loop it was opened on), opened when first needed and kept.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

SIZE = 4  # connections per event loop: reads in flight at once


class AsyncReads:
    def __init__(self, url: str, connect_args: dict[str, Any], size: int = SIZE) -> None:
        self.conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.connect_args = connect_args
        self.size = size
        self._pools: dict[asyncio.AbstractEventLoop, _LoopPool] = {}
        self._lock = threading.Lock()

    async def first_row(self, sql: str, arguments: Any) -> tuple[Any, ...] | None:
        """The first row of `sql`, once more on a new connection if the database had closed the one used (a
        restart, a failover: the loop's other connections are then dropped too)."""
        pool = self._pool()
        for attempt in range(2):
            connection = await pool.acquire()
            try:
                async with connection.cursor() as cursor:
                    await cursor.execute(sql, arguments)
                    row = await cursor.fetchone()
            except psycopg.Error:
                lost = connection.closed or connection.broken
                pool.release(connection, lost=True)
                if lost:
                    pool.drop_idle()
                    if attempt == 0:
                        continue
                raise
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
        """Closes every loop's connections (from any thread: closing a libpq connection does not wait)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def connections(self) -> int:
        return sum(pool.opened for pool in list(self._pools.values()))


class _LoopPool:
    """One event loop's connections: idle ones in a queue; a free slot is a None in it (a connection to open)."""

    def __init__(self, reads: AsyncReads) -> None:
        self.reads = reads
        self.idle: asyncio.Queue[psycopg.AsyncConnection[Any] | None] = asyncio.Queue()
        for _ in range(reads.size):
            self.idle.put_nowait(None)
        self.opened = 0
        self.closed = False

    async def acquire(self) -> psycopg.AsyncConnection[Any]:
        connection = await self.idle.get()
        if connection is not None:
            return connection
        try:
            opened = await psycopg.AsyncConnection.connect(
                self.reads.conninfo, autocommit=True, **self.reads.connect_args
            )
        except BaseException:
            self.idle.put_nowait(None)  # the slot stays free for the next one
            raise
        self.opened += 1
        return opened

    def release(self, connection: psycopg.AsyncConnection[Any], lost: bool) -> None:
        if lost or self.closed:
            self.opened -= 1
            _finish(connection)
            self.idle.put_nowait(None)
        else:
            self.idle.put_nowait(connection)

    def drop_idle(self) -> None:
        """Closes the idle connections (opened again when needed)."""
        kept: list[psycopg.AsyncConnection[Any] | None] = []
        while not self.idle.empty():
            connection = self.idle.get_nowait()
            if connection is not None:
                self.opened -= 1
                _finish(connection)
            kept.append(None)
        for slot in kept:
            self.idle.put_nowait(slot)

    def close(self) -> None:
        self.closed = True
        while not self.idle.empty():
            connection = self.idle.get_nowait()
            if connection is not None:
                self.opened -= 1
                _finish(connection)


def _finish(connection: psycopg.AsyncConnection[Any]) -> None:
    """Closes the connection at once (its socket, without awaiting a clean close)."""
    connection.pgconn.finish()
