"""The server process's heap and Python's garbage collector.

CPython's cyclic collector walks every object of a generation it collects. The oldest generation holds what
lives long: the modules and services built at start (hundreds of thousands of objects), and the server's
caches — a parsed manifest entry with its data file is about a dozen objects, so the manifests of a
100,000-file table are over a million. A full collection walks them all, and it runs inside whatever request
allocated last, so as the caches fill, the pauses grow with them (`bench/gc_pauses.py`).

Frozen objects (`gc.freeze`) are left out of every collection; they are still freed the usual way, when their
last reference goes (an entry evicted from a cache), as long as they are in no reference cycle. So the heap is
frozen once the server has started (`freeze`), and again right after each full collection that leaves
`freeze_after` objects or more in the oldest generation (`HeapFreezer`): a full collection then walks about that
many objects at most, never the whole heap. A freeze right after a full collection keeps no garbage the
collection could see; what it can keep for good is cyclic garbage that forms later among the objects alive at
that moment. The caches' entries (pyiceberg's records, table metadata) hold no cycles, and freezes come once per
`freeze_after` long-lived objects, not once per request.
"""

from __future__ import annotations

import gc
from typing import Any

FREEZE_AFTER = 100_000  # objects left in the oldest generation by a full collection, before it freezes them


def freeze() -> None:
    """Collects, then freezes what is left."""
    gc.collect()
    gc.freeze()


class HeapFreezer:
    """A garbage-collector callback (`gc.callbacks`): after a full collection, freezes what it left when that is
    `freeze_after` objects or more. It takes no lock and starts no collection (a callback runs in whichever
    thread allocated, inside the collector)."""

    def __init__(self, freeze_after: int = FREEZE_AFTER) -> None:
        self.freeze_after = freeze_after
        self.freezes = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2 and len(gc.get_objects(generation=2)) >= self.freeze_after:
            gc.freeze()
            self.freezes += 1

    def install(self) -> HeapFreezer:
        if self not in gc.callbacks:
            gc.callbacks.append(self)
        return self

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
