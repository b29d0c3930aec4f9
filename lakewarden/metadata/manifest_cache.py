"""Parsed manifests, kept for everything on the server that reads them: the evaluator, the planning of
optimizing and maintenance, and the REST catalog's scan planning.

A manifest list or manifest never changes once written, so what was parsed from a path stays right. Per path it
keeps a list's manifests, a manifest's entries, views its readers derive from them, and for scan planning the live
files' merged column metrics; each part is evicted on its own, least recently used first, bounded by estimated
bytes (`ams.manifest-cache.max-size`; tests/test_manifest_cache.py measures the estimates)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record
from pyiceberg.types import PrimitiveType

from lakewarden.domain.lru import SizedLRU
from lakewarden.metadata.manifests import entries as manifest_entries
from lakewarden.metadata.manifests import manifests as snapshot_manifests

DEFAULT_MAX_BYTES = 1024**3
ENTRY_BYTES_PER_AVRO_BYTE = 16
ENTRY_BYTES = 3_000  # a parsed entry with its data file, without column metrics
METRIC_BYTES = 200  # per column with metrics (sizes, counts, bounds) in an entry
MANIFEST_FILE_BYTES = 1_500  # one ManifestFile of a manifest list, with its partition summaries
SUMMARY_BYTES = 2_000
NOTED_BYTES = 300  # a table's noted current manifest list: its key and path
PARTS = ("lists", "entries", "views", "summaries")
T = TypeVar("T")


class ManifestCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._lru: SizedLRU[tuple[Any, ...], Any] = SizedLRU(max_bytes)
        self.hits = dict.fromkeys(PARTS, 0)
        self.misses = dict.fromkeys(PARTS, 0)

    def _get(self, part: str, key: tuple[Any, ...]) -> Any:
        found = self._lru.get(key)
        if found is None:
            self.misses[part] += 1
        else:
            self.hits[part] += 1
        return found

    def manifests(self, io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
        """The manifests a snapshot's manifest list names."""
        key = ("list", snapshot.manifest_list)
        kept: list[ManifestFile] | None = self._get("lists", key)
        if kept is None:
            kept = snapshot_manifests(io, snapshot)
            self._lru.put(key, kept, MANIFEST_FILE_BYTES * max(1, len(kept)))
        return kept

    def forget_replaced(self, replaced_list: str, current: Sequence[ManifestFile]) -> None:
        """Drops a manifest list that is no longer any table's current one (a commit replaced its snapshot), and
        the entries and file records of its manifests that the `current` list does not name (merged or rewritten
        away): they belong to no current snapshot any more (a scan of an older one reads them again). Manifests
        shared with the current list stay. Each list holds every manifest of its snapshot, so keeping every
        version's list of a table that commits often would cost the square of its manifests."""
        listed: list[ManifestFile] | None = self._lru.pop(("list", replaced_list))
        if listed is None:
            return
        named = {manifest.manifest_path for manifest in current}
        for manifest in listed:
            if manifest.manifest_path not in named:
                self._lru.pop(("entries", manifest.manifest_path))
                self._lru.pop(("view", "files", manifest.manifest_path))

    def note_current(self, table: str, snapshot: Snapshot, current: Sequence[ManifestFile]) -> None:
        """Notes `snapshot` (whose manifest list names `current`) as the current one of the table at location
        `table`, and forgets the list noted before it with `forget_replaced`. Every reader of a table's current
        snapshot notes it (the evaluator, planning, read-ahead): each reads the table at moments of its own
        (read-ahead reads a burst of commits once, at the newest), so the list replaced by the one it reads is
        seldom the one it read before; without the note each list read would stay until evicted. A snapshot
        older than the noted one (a reader of stale metadata) changes nothing. The note is kept in the cache,
        bounded with it."""
        key = ("noted", table)
        order = (snapshot.sequence_number or 0, snapshot.timestamp_ms)
        before: tuple[tuple[int, int], str] | None = self._lru.get(key)
        if before is not None:
            if before[0] > order:
                return
            if before[1] != snapshot.manifest_list:
                self.forget_replaced(before[1], current)
        self._lru.put(key, (order, snapshot.manifest_list), NOTED_BYTES)

    def holds(self, manifest: ManifestFile) -> bool:
        """Whether the manifest's entries are kept (not a lookup: nothing counted, nothing refreshed)."""
        return ("entries", manifest.manifest_path) in self._lru

    def entries(self, io: FileIO, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
        """Every entry of the manifest, deleted ones included, with the fields of format version 3."""
        key = ("entries", manifest.manifest_path)
        kept: tuple[ManifestEntry, ...] | None = self._get("entries", key)
        if kept is None:
            kept = tuple(manifest_entries(io, manifest, discard_deleted=False, read_version=3))
            self._lru.put(key, kept, _entries_weight(kept))
        return kept

    def view(
        self,
        io: FileIO,
        manifest: ManifestFile,
        kind: str,
        build: Callable[[tuple[ManifestEntry, ...]], T],
        weight: Callable[[T], int],
    ) -> T:
        """What `build` makes of the manifest's entries, kept by (kind, path)."""
        key = ("view", kind, manifest.manifest_path)
        kept: T | None = self._get("views", key)
        if kept is None:
            kept = build(self.entries(io, manifest))
            self._lru.put(key, kept, weight(kept))
        return kept

    def summary(self, io: FileIO, manifest: ManifestFile, schema: Schema, field_ids: frozenset[int]) -> DataFile | None:
        """The live data files of a manifest as one file, for the columns `field_ids`: record counts and value,
        null and NaN counts summed, the least lower and the greatest upper bound of each column; a metric
        some file lacks is left out. None for a manifest without live files. (Iceberg's inclusive metrics
        evaluator cannot rule out this file unless it can rule out each of them.)"""
        key = ("summary", manifest.manifest_path, field_ids)
        kept = self._get("summaries", key)
        if kept is None:
            live = [e.data_file for e in self.entries(io, manifest) if e.status != ManifestEntryStatus.DELETED]
            kept = (_merged_metrics(live, schema, field_ids),)  # a tuple: a manifest without live files is kept too
            self._lru.put(key, kept, SUMMARY_BYTES)
        summary: DataFile | None = kept[0]
        return summary

    @property
    def bytes(self) -> int:
        return self._lru.bytes

    @property
    def max_bytes(self) -> int:
        return self._lru.max_bytes

    @property
    def evictions(self) -> int:
        return self._lru.evictions

    def __len__(self) -> int:
        return len(self._lru)


def _entries_weight(kept: Sequence[ManifestEntry]) -> int:
    """What parsed entries take, by their count and the columns with metrics in the first (one writer wrote a
    manifest: its entries carry the same metrics)."""
    if not kept:
        return 1_000
    first = kept[0].data_file
    columns = max(len(first.value_counts or {}), len(first.lower_bounds or {}), len(first.column_sizes or {}))
    return max(1_000, len(kept) * (ENTRY_BYTES + METRIC_BYTES * columns))


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
