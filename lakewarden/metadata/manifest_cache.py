"""Manifests as scan planning reads them, kept: parsed manifest lists and manifest entries by path (neither
ever changes), and per manifest its files' column metrics merged into one, for setting a whole manifest
aside (metadata/scan_planning.py)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record
from pyiceberg.types import PrimitiveType

from lakewarden.metadata.manifests import entries as manifest_entries
from lakewarden.metadata.manifests import manifests as snapshot_manifests


class ManifestEntryCache:
    """Parsed manifest lists and manifests by path (neither ever changes), the least recently used manifests
    evicted past `max_entries` entries in all. Beside each manifest's entries it keeps their column metrics
    merged into one (`summary`), so a scan can set a whole manifest aside by its metrics."""

    def __init__(self, max_entries: int = 2_000_000, max_lists: int = 10_000) -> None:
        self.max_entries = max_entries
        self.max_lists = max_lists
        self._items: OrderedDict[str, tuple[ManifestEntry, ...]] = OrderedDict()
        self._summaries: dict[str, dict[frozenset[int], DataFile | None]] = {}
        self._lists: OrderedDict[str, list[ManifestFile]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def manifests(self, io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
        with self._lock:
            kept = self._lists.get(snapshot.manifest_list)
            if kept is not None:
                self._lists.move_to_end(snapshot.manifest_list)
                return kept
        read = snapshot_manifests(io, snapshot)
        with self._lock:
            self._lists[snapshot.manifest_list] = read
            while len(self._lists) > self.max_lists:
                self._lists.popitem(last=False)
        return read

    def holds(self, manifest: ManifestFile) -> bool:
        with self._lock:
            return manifest.manifest_path in self._items

    def entries(self, io: FileIO, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
        path = manifest.manifest_path
        with self._lock:
            kept = self._items.get(path)
            if kept is not None:
                self._items.move_to_end(path)
                self.hits += 1
                return kept
            self.misses += 1
        parsed = tuple(manifest_entries(io, manifest, discard_deleted=False, read_version=3))
        with self._lock:
            if path not in self._items:
                self._items[path] = parsed
                self._size += len(parsed)
                while self._size > self.max_entries and len(self._items) > 1:
                    evicted_path, evicted = self._items.popitem(last=False)
                    self._summaries.pop(evicted_path, None)
                    self._size -= len(evicted)
        return parsed

    def summary(self, io: FileIO, manifest: ManifestFile, schema: Schema, field_ids: frozenset[int]) -> DataFile | None:
        """The live data files of a manifest as one file, for the columns `field_ids`: record counts and value,
        null and NaN counts summed, the least lower and the greatest upper bound of each column; a metric
        some file lacks is left out. None for a manifest without live files. (Iceberg's inclusive metrics
        evaluator cannot rule out this file unless it can rule out each of them.)"""
        path = manifest.manifest_path
        with self._lock:
            known = self._summaries.get(path, {})
            if field_ids in known:
                return known[field_ids]
        live = [e.data_file for e in self.entries(io, manifest) if e.status != ManifestEntryStatus.DELETED]
        summary = _merged_metrics(live, schema, field_ids)
        with self._lock:
            if path in self._items:
                self._summaries.setdefault(path, {})[field_ids] = summary
        return summary

    @property
    def size(self) -> int:
        return self._size


def _merged_metrics(files: list[DataFile], schema: Schema, field_ids: frozenset[int]) -> DataFile | None:
    if not files:
        return None

    def summed(name: str) -> dict[int, int]:
        maps = [getattr(f, name) or {} for f in files]
        return {k: sum(m[k] for m in maps) for k in field_ids if all(k in m for m in maps)}

    def extreme(name: str, pick: Callable[[list[Any]], Any]) -> dict[int, bytes]:
        maps = [getattr(f, name) or {} for f in files]
        merged = {}
        for field_id in (k for k in field_ids if all(k in m for m in maps)):
            try:
                field_type = schema.find_type(field_id)
            except ValueError:
                continue  # a column dropped since: not filtered on
            if not isinstance(field_type, PrimitiveType):
                continue
            values = [from_bytes(field_type, m[field_id]) for m in maps]
            merged[field_id] = to_bytes(field_type, pick(values))
        return merged

    merged = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=sum(f.record_count for f in files),
        file_size_in_bytes=sum(f.file_size_in_bytes for f in files),
        value_counts=summed("value_counts"),
        null_value_counts=summed("null_value_counts"),
        nan_value_counts=summed("nan_value_counts"),
        lower_bounds=extreme("lower_bounds", min),
        upper_bounds=extreme("upper_bounds", max),
    )
    return merged
