"""A least-recently-used map bounded by bytes: each value is put with its weight (its size in memory, as the
caller estimates it) and the least recently used values are evicted while the weights exceed the bound."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLRU(Generic[K, V]):
    """Thread-safe. A value heavier than the whole bound is not kept. `hits` and `misses` count `get`s."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def peek(self, key: K) -> tuple[V, int] | None:
        """The key's value and weight, if it is kept, neither counted as a lookup nor making it recently used."""
        with self._lock:
            return self._items.get(key)

    def __contains__(self, key: K) -> bool:
        """Whether the key is kept, neither counted as a lookup nor making it recently used."""
        with self._lock:
            return key in self._items

    def put(self, key: K, value: V, weight: int) -> None:
        weight = max(1, weight)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if weight > self.max_bytes:
                return
            self._items[key] = (value, weight)
            self._bytes += weight
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted
                self.evictions += 1

    def pop(self, key: K) -> V | None:
        """Drops the key (not counted as an eviction); returns its value, if it was kept."""
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return None
            self._bytes -= item[1]
            return item[0]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)
