"""The head of each internal table (its metadata location and version), as this node knows it.

A node that is not one of several stages commits on the head it knows: the swap compares it with the row, so a
stale head costs a lost swap. The only server on its database (store/claim.py) makes every pointer change itself,
so its heads are the pointers and a loadTable reads no row. Writers tell the map after they commit; a reader that
missed hands in the row with a `stamp` taken before reading, kept only if no writer told anything since. A claim
lost and taken again forgets every head."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lakewarden.domain.lru import SizedLRU
from lakewarden.store import rest_catalog as store
from lakewarden.store.claim import Claim
from lakewarden.store.database import Database

Key = tuple[str, str, str]  # catalog, namespace key, table name
Head = tuple[str, int]  # metadata location, pointer version
HEADS_KEPT_BYTES = 8 * 1024**2  # some 40,000 tables; a table forgotten is read again when next asked for
ENTRY_BYTES = 120  # what a kept head weighs besides its strings


class TableHeads:
    """`keeping`: whether this node keeps heads at all (not when it is one of several: a head kept would be stale
    as often as not); a node that keeps none reads every pointer, and what it is told is dropped."""

    def __init__(self, keeping: bool = True, max_bytes: int = HEADS_KEPT_BYTES) -> None:
        self.keeping = keeping
        self._lru: SizedLRU[Key, Head] = SizedLRU(max_bytes)
        self._lock = threading.Lock()
        self._writes = 0  # changes told so far (learn's stamp)
        self.claim: Claim | None = None  # this server's claim on its database, when it is the only server there

    @property
    def authoritative(self) -> bool:
        """Whether a head kept here is the pointer: this node makes every pointer change, and may count on it."""
        return self.keeping and self.claim is not None and self.claim.valid()

    def get(self, key: Key) -> Head | None:
        """The head kept of the table, if one is (the one this node last knew: maybe not the pointer's)."""
        return self._lru.get(key) if self.keeping else None

    def current(self, db: Database, key: Key) -> Head:
        """The table's head now: the one kept when it is the pointer (`authoritative`), else the pointer read."""
        kept = self._lru.get(key) if self.authoritative else None
        return kept if kept is not None else self.read(db, key)

    async def current_async(self, db: Database, key: Key) -> Head:
        """`current` for the event loop (the pointer read awaited: store/metadata.pointer_head_async)."""
        kept = self._lru.get(key) if self.authoritative else None
        if kept is not None:
            return kept
        stamp = self.stamp()
        head = await store.pointer_head_async(db, *key)
        self.learn(key, head, stamp)
        return head

    def read(self, db: Database, key: Key) -> Head:
        """The pointer read from the database (NoSuchTable if there is none), and kept (see `learn`)."""
        stamp = self.stamp()
        head = store.pointer_head(db, *key)
        self.learn(key, head, stamp)
        return head

    def stamp(self) -> int:
        """Taken before a read of a pointer, handed to `learn` with the row read."""
        return self._writes

    def learn(self, key: Key, head: Head, stamp: int) -> None:
        """A head read from the database: kept unless a writer told a change after `stamp` was taken."""
        with self._lock:
            if self.keeping and self._writes == stamp and key not in self._lru:
                self._put(key, head)

    @contextmanager
    def changing(self, *keys: Key) -> Iterator[None]:
        """A change of these tables' pointers: a failure may have left them changed or not, so their heads are
        forgotten. After a success the writer tells what changed (`wrote`)."""
        try:
            yield
        except BaseException:
            for key in keys:
                self.forget(key)
            raise

    def wrote(self, key: Key, head: Head | None) -> None:
        """A pointer changed, its transaction committed: its new head, or None (the table is gone)."""
        with self._lock:
            self._writes += 1
            if head is None or not self.keeping:
                self._lru.pop(key)
            else:
                self._put(key, head)

    def forget(self, key: Key | None = None) -> None:
        """A change whose outcome is not known (or, without a key, one to any table: a catalog replaced): read
        again next time."""
        with self._lock:
            self._writes += 1
            if key is None:
                self._lru.clear()
            else:
                self._lru.pop(key)

    def _put(self, key: Key, head: Head) -> None:
        self._lru.put(key, head, len(head[0]) + sum(map(len, key)) + ENTRY_BYTES)

    def __len__(self) -> int:
        return len(self._lru)
