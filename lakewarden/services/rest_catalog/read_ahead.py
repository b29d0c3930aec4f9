"""Manifests parsed before anyone asks: the manifest cache filled as commits land and at start, so a scan's
first plan, like the evaluator's look, finds the table's manifests parsed.

Subscribed to the catalog's events, a commit that moves a table's current snapshot has its manifests parsed in a
thread of its own (a burst read once, at its newest metadata); at start the most recently committed tables' are
read, as databases reload their buffer pools. Both bounded by a share of the cache; `ams.scan-planning.read-ahead`."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.metadata.manifest_cache import ENTRY_BYTES_PER_AVRO_BYTE, ManifestCache
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
READ_AHEAD_SHARE = 4  # a commit's manifests are read ahead only while they take at most 1/4 of the cache
WARM_SHARE = 2  # at start, the newest tables' manifests are read until they would fill 1/2 of the cache
WARM_TABLES = 10_000  # looked at, at most
TableKey = tuple[str, tuple[str, ...], str]  # catalog, namespace levels, name


class ManifestReadAhead:
    def __init__(
        self, db: Database, warehouses: Warehouses, files: MetadataFiles, cache: ManifestCache, enabled: bool = True
    ) -> None:
        self.db = db
        self.warehouses = warehouses
        self.files = files
        self.cache = cache
        self.enabled = enabled
        self.manifests_read = 0  # parsed ahead, as commits landed and at start
        self._pending: dict[TableKey, str] = {}  # tables to read ahead: their newest metadata
        self._lock = threading.Lock()
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakewarden-read-ahead")
        self._closing = threading.Event()

    def __call__(self, event: CatalogEvent) -> None:
        """An event of the REST catalog (outbox.py)."""
        payload = event.payload
        location = payload.get("metadata_location")
        if not self.enabled or event.type not in (EventType.TABLE_CREATED, EventType.TABLE_COMMITTED) or not location:
            return
        if payload.get("forwarded"):
            return  # a forwarded catalog's table (federation.py): its manifests are read where it is evaluated
        unmoved = "snapshot_id" in payload and payload["snapshot_id"] == payload.get("parent_snapshot_id")
        if event.type == EventType.TABLE_COMMITTED and unmoved:
            return  # the current snapshot did not change (properties, schema...): its manifests are read
        assert event.table is not None  # a table's event
        key = (event.catalog, event.namespace, event.table)
        with self._lock:
            queued = key in self._pending
            self._pending[key] = location
        if not queued:
            with contextlib.suppress(RuntimeError):  # closed: the server stops
                self._reader.submit(self._read_pending, key)

    def warm(self) -> None:
        """At start, in a thread of its own."""
        if self.enabled:
            threading.Thread(target=self._warm, name="lakewarden-warm-up", daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        self._reader.shutdown(wait=False, cancel_futures=True)

    def _read_pending(self, key: TableKey) -> None:
        with self._lock:
            location = self._pending.pop(key)
        self._read(key, location, self.cache.max_bytes // READ_AHEAD_SHARE)

    def _read(self, key: TableKey, location: str, budget: int) -> int:
        """Parses the manifests of the table's current snapshot that are not kept, unless they would weigh more
        than `budget`; returns their weight (0 when nothing was read)."""
        try:
            io = self.warehouses.io_of(self.warehouses.catalog(key[0]))
            metadata = self.files.read(io, location)
            snapshot = metadata.current_snapshot()
            if snapshot is None:
                return 0
            parent = (
                None if snapshot.parent_snapshot_id is None else metadata.snapshot_by_id(snapshot.parent_snapshot_id)
            )
            current = self.cache.manifests(io, snapshot)
            if parent is not None:
                self.cache.forget_replaced(parent.manifest_list, current)
            self.cache.note_current(metadata.location, snapshot, current)
            missing = [m for m in current if not self.cache.holds(m)]
            weight = sum(m.manifest_length for m in missing) * ENTRY_BYTES_PER_AVRO_BYTE
            if weight > budget:
                return 0
            for manifest in missing:
                if self._closing.is_set():
                    break
                self.cache.entries(io, manifest)
                self.manifests_read += 1
            return weight
        except Exception as exc:  # a dropped catalog or table, an unreachable store: planning reads them when asked
            log.debug("reading ahead the manifests of %s failed: %s", ".".join((*key[1], key[2])), exc)
            return 0

    def _warm(self) -> None:
        started = time.monotonic()
        with self.db.read() as session:
            tables = store.recent_pointers(session, WARM_TABLES)
        budget = self.cache.max_bytes // WARM_SHARE
        before = self.manifests_read
        warmed = 0
        for catalog, namespace, name, location in tables:
            if self._closing.is_set() or budget <= 0:
                break
            spent = self._read((catalog, tuple(namespace), name), location, budget)
            budget -= spent
            warmed += 1 if spent else 0
        if self.manifests_read > before:
            log.info(
                "warmed the manifest cache: %d manifests of %d tables in %.1fs",
                self.manifests_read - before,
                warmed,
                time.monotonic() - started,
            )
