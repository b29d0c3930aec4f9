"""The server process's heap and Python's garbage collector.

A full collection walks every long-lived object (the services built at start, and the caches: a 100,000-file
table's parsed manifests are over a million objects) inside whatever request allocated last, so pauses grow with
the caches. Frozen objects (`gc.freeze`) are left out of collections yet freed as usual when unreferenced. So the
heap is frozen once the server started, and again after each full collection that leaves `freeze_after` objects
(`HeapFreezer`): a full collection walks about that many at most. The caches' entries hold no cycles to leak."""

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
