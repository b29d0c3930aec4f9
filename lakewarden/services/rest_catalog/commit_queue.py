"""The commit queue: on this node, the commits to one table take turns in arrival order, and the line is bounded.

Optimistic commits to one busy table would stage in vain and retry, wasted work growing with the square of the
writers; taking turns makes each stage once on its predecessor's head. The line lives on the event loop, so a
waiting commit holds no thread. Past `max-waiting-per-table`, `max-waiting` or `max-wait` a commit is refused at
once with 503 and a `Retry-After` spread over the time the table needs for the clients being refused, so they come
back at the rate it commits. docs/rest-catalog.md gives the settings."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from lakewarden.domain.errors import Overloaded


@dataclass
class _Pressure:
    """One table's refusals and commits in the current second, and the Retry-After they lead to."""

    second: float
    refused: int = 0
    served: int = 0
    window: float = 1.0  # refusals are told to come back in 1 .. window seconds, in turn
    turn: int = 0


class CommitQueue:
    """Only used on one event loop (the server's): no lock is needed."""

    def __init__(
        self,
        max_waiting_per_table: int = 8,
        max_waiting: int = 32,
        max_wait_seconds: float = 10.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled  # off: no turns, no line (every commit stages at once and retries a lost swap)
        self.max_waiting_per_table = max_waiting_per_table
        self.max_waiting = max_waiting
        self.max_wait = max_wait_seconds
        # per table: the one served (None if it took its turn at once), then the tickets of those waiting
        self._lines: dict[Any, deque[asyncio.Future[None] | None]] = {}
        self.waiting = 0
        self.refused = 0  # commits refused since start (the line was full, or they waited too long)
        self.served = 0
        self._clock = clock
        self._pressure: dict[Any, _Pressure] = {}

    def turn(self, key: Any) -> _Turn:
        """This table's turn, to hold in `async with`: waited for first come, first served; raises Overloaded
        when the line is full or the wait is over before the turn came."""
        return _Turn(self, key)

    async def _take(self, key: Any) -> deque[asyncio.Future[None] | None] | None:
        """The table's turn taken (at once when nobody commits to it, else after waiting in its line); its line,
        to release the turn on, or None when the queue is off."""
        if not self.enabled:
            return None
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = deque((None,))
        else:
            await self._wait(key, line)
        return line

    async def _wait(self, key: Any, line: deque[asyncio.Future[None] | None]) -> None:
        """Wait in the table's line for the turn (another commit holds it)."""
        if self.full(key):
            raise Overloaded(
                f"too many commits are waiting for {_name(key)} ({len(line) - 1} on it, {self.waiting} in all): "
                "try again shortly",
                retry_after_seconds=self.refuse(key),
            )
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.append(ticket)
        self.waiting += 1
        try:
            await asyncio.wait_for(asyncio.shield(ticket), self.max_wait)
        except BaseException as exc:  # the wait is over, or the client went away
            if not ticket.done():  # leave the line: nobody's turn is skipped
                line.remove(ticket)
                if isinstance(exc, TimeoutError):
                    raise Overloaded(
                        f"the commit waited {self.max_wait:g}s for its turn on {_name(key)}: try again shortly",
                        retry_after_seconds=self.refuse(key),
                    ) from None
                raise
            if not isinstance(exc, TimeoutError):  # gone just as its turn came: pass the turn on
                self._release(key, line)
                raise
        finally:
            self.waiting -= 1

    def full(self, key: Any) -> bool:
        """Whether a commit to the table arriving now would be refused."""
        line = self._lines.get(key)
        if not self.enabled or not line:
            return False
        return len(line) - 1 >= self.max_waiting_per_table or self.waiting >= self.max_waiting

    def refuse(self, key: Any) -> int:
        """Counts a commit to the table refused; answers the seconds it should wait before it comes back."""
        self.refused += 1
        pressure = self._now(key)
        pressure.refused += 1
        pressure.turn += 1
        return 1 + pressure.turn % math.ceil(pressure.window)

    def _now(self, key: Any) -> _Pressure:
        """The table's counts for the current second (a second that ended sets the next Retry-After)."""
        now = self._clock()
        pressure = self._pressure.get(key)
        if pressure is None:
            if len(self._pressure) > 4 * max(1, self.max_waiting):  # tables no longer under pressure
                for other in [k for k, p in self._pressure.items() if now - p.second > 60 and k not in self._lines]:
                    del self._pressure[other]
            pressure = self._pressure[key] = _Pressure(now)
        elapsed = now - pressure.second
        if elapsed >= 1.0:
            # the clients refused in one mean wait; spread over twice the time the table takes to serve them (a
            # second with no commit counts as one commit)
            clients = pressure.refused / elapsed * (math.ceil(pressure.window) + 1) / 2
            wanted = 2 * clients / max(pressure.served / elapsed, 1.0)
            pressure.window = min(max(1.0, (pressure.window + wanted) / 2), max(1.0, self.max_wait))
            pressure.second, pressure.refused, pressure.served = now, 0, 0
        return pressure

    def _release(self, key: Any, line: deque[asyncio.Future[None] | None]) -> None:
        line.popleft()
        self.served += 1
        self._now(key).served += 1
        if line:
            head = line[0]
            assert head is not None  # only the first of a line takes its turn unticketed
            head.set_result(None)
        else:
            del self._lines[key]

    @asynccontextmanager
    async def turns(self, keys: Sequence[Any]) -> AsyncIterator[None]:
        """The turns of several tables (a multi-table transaction), taken in one order so no two wait on each
        other crosswise."""
        async with AsyncExitStack() as stack:
            for key in sorted(set(keys), key=repr):
                await stack.enter_async_context(self.turn(key))
            yield


class _Turn:
    """A table's turn (CommitQueue.turn): a commit to a table nobody commits to takes it at once, with no ticket
    to wait on; the others wait in line."""

    __slots__ = ("_key", "_line", "_queue")

    def __init__(self, queue: CommitQueue, key: Any) -> None:
        self._queue, self._key = queue, key
        self._line: deque[asyncio.Future[None] | None] | None = None

    async def __aenter__(self) -> None:
        self._line = await self._queue._take(self._key)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._line is not None:
            self._queue._release(self._key, self._line)


def _name(key: Any) -> str:
    return ".".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
