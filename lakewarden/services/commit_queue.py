"""The commit queue: on this node, the commits to one table take turns in arrival order, and the line is bounded.

Commits are optimistic (services/metadata_service.py): each stages its change on the table's head, writes a
metadata file and compare-and-swaps the pointer; a loser stages again. With many writers on one table every
commit but one would stage in vain, and each round repeats it — a thundering herd whose wasted work grows with
the square of the writers. Taking turns per table makes each commit stage once, on the head its predecessor
just left: the table commits at the rate of one writer however many there are, and the first to arrive is
the first served (fair). Commits to different tables do not wait for each other. The compare-and-swap stays:
another node (high availability) or a commit that skipped the line (none here) still loses a swap safely.

The line is kept on the server's event loop (the commit routes take their turn before their work goes to a
worker thread): a waiting commit holds no thread, and a refusal costs no thread either. It is bounded: at most
`max-waiting-per-table` commits wait for one table and `max-waiting` for all tables of the node together, and
none waits longer than `max-wait`. Past any bound the commit is refused at once with 503 and `Retry-After`
(nothing of it was written): under a burst of ten times what the table can take, clients back off instead of
piling up until they time out, and the commits in line keep the worker threads to themselves. A client that
goes away while waiting leaves the line; one whose turn came passes it on.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from lakewarden.domain.errors import Overloaded


class CommitQueue:
    """Only used on one event loop (the server's): no lock is needed."""

    def __init__(
        self,
        max_waiting_per_table: int = 8,
        max_waiting: int = 32,
        max_wait_seconds: float = 10.0,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled  # off: no turns, no line (every commit stages at once and retries a lost swap)
        self.max_waiting_per_table = max_waiting_per_table
        self.max_waiting = max_waiting
        self.max_wait = max_wait_seconds
        self._lines: dict[Any, deque[asyncio.Future[None]]] = {}  # per table: the one served, then those waiting
        self.waiting = 0
        self.refused = 0  # commits refused since start (the line was full, or they waited too long)
        self.served = 0

    @asynccontextmanager
    async def turn(self, key: Any) -> AsyncIterator[None]:
        """Wait for this table's turn (first come, first served); raises Overloaded when the line is full or the
        wait is over before the turn came."""
        if not self.enabled:
            yield
            return
        line = self._lines.setdefault(key, deque())
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not line:
            ticket.set_result(None)
            line.append(ticket)
        else:
            if self.full(key):
                self.refused += 1
                raise Overloaded(
                    f"too many commits are waiting for {_name(key)} ({len(line) - 1} on it, {self.waiting} in all): "
                    "try again shortly",
                    retry_after_seconds=1,
                )
            line.append(ticket)
            self.waiting += 1
            try:
                await asyncio.wait_for(asyncio.shield(ticket), self.max_wait)
            except BaseException as exc:  # the wait is over, or the client went away
                if not ticket.done():  # leave the line: nobody's turn is skipped
                    line.remove(ticket)
                    if isinstance(exc, TimeoutError):
                        self.refused += 1
                        raise Overloaded(
                            f"the commit waited {self.max_wait:g}s for its turn on {_name(key)}: try again shortly",
                            retry_after_seconds=1,
                        ) from None
                    raise
                if not isinstance(exc, TimeoutError):  # gone just as its turn came: pass the turn on
                    self._release(key, line)
                    raise
            finally:
                self.waiting -= 1
        try:
            yield
        finally:
            self._release(key, line)

    def full(self, key: Any) -> bool:
        """Whether a commit to the table arriving now would be refused."""
        line = self._lines.get(key)
        if not self.enabled or not line:
            return False
        return len(line) - 1 >= self.max_waiting_per_table or self.waiting >= self.max_waiting

    def _release(self, key: Any, line: deque[asyncio.Future[None]]) -> None:
        line.popleft()
        self.served += 1
        if line:
            line[0].set_result(None)
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


def _name(key: Any) -> str:
    return ".".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
