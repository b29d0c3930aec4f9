"""The head of each internal table (its pointer: metadata location and version), as this node knows it.

A node that is not one of several (no high availability) stages a commit on the head it knows without reading
the pointer first (services/table_commits.py): the swap compares that head with the row, so one that moved
meanwhile costs a lost swap and nothing else.

The only server on its system database, while it may count on its claim to be (`authoritative`:
store/claim.py), makes every change of every pointer itself, so what it knows is the pointer: a loadTable takes
the head from here, without reading the database. Every writer of a pointer tells this map after its
transaction committed (`wrote`; `forget` when whether it did is unknown). A reader that missed reads the row
and hands it in with the `stamp` it took before reading (`learn`); it is kept only if no writer told anything
since, so that a row read before a commit never replaces the head the commit wrote. A load that runs while a
commit's transaction ends may answer the head before it: the two are concurrent, and the commit's client gets
its answer only after the map has the new head. A claim lost and taken again (PostgreSQL) forgets every head
first: another server may have changed pointers meanwhile.
"""

from __future__ import annotations

import threading

from lakewarden.domain.lru import SizedLRU
from lakewarden.store.claim import Claim

Key = tuple[str, str, str]  # catalog, namespace key, table name
Head = tuple[str, int]  # metadata location, pointer version
HEADS_KEPT_BYTES = 8 * 1024**2  # some 40,000 tables; a table forgotten is read again when next asked for
ENTRY_BYTES = 120  # what a kept head weighs besides its strings


class TableHeads:
    def __init__(self, max_bytes: int = HEADS_KEPT_BYTES) -> None:
        self._lru: SizedLRU[Key, Head] = SizedLRU(max_bytes)
        self._lock = threading.Lock()
        self._writes = 0  # changes told so far (learn's stamp)
        self.claim: Claim | None = None  # this server's claim on its database, when it is the only server there

    @property
    def authoritative(self) -> bool:
        """Whether a head kept here is the pointer: this node makes every pointer change, and may count on it."""
        return self.claim is not None and self.claim.valid()

    def get(self, key: Key) -> Head | None:
        return self._lru.get(key)

    def stamp(self) -> int:
        """Taken before a read of a pointer, handed to `learn` with the row read."""
        return self._writes

    def learn(self, key: Key, head: Head, stamp: int) -> None:
        """A head read from the database: kept unless a writer told a change after `stamp` was taken."""
        with self._lock:
            if self._writes == stamp and key not in self._lru:
                self._put(key, head)

    def wrote(self, key: Key, head: Head | None) -> None:
        """A pointer changed, its transaction committed: its new head, or None (the table is gone)."""
        with self._lock:
            self._writes += 1
            if head is None:
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
