"""Server-side scan planning: which data files a scan of a snapshot reads, the delete files that apply to each,
and the residual filter left for the reader, from the snapshot's manifests (parsed once and kept).

Pruning is Iceberg's own, through pyiceberg's evaluators in Iceberg's order: manifests by partition summaries,
then files by partition and column metrics. Delete files apply as in Iceberg's DeleteFileIndex (a file-scoped
position delete or vector to its file; others to older data of their partition; equality deletes to strictly
older data). An incremental scan reads what the appends between its snapshots added, as IncrementalAppendScan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo
from pyiceberg.expressions.visitors import (
    bind,
    expression_evaluator,
    extract_field_ids,
    inclusive_projection,
    manifest_evaluator,
    residual_evaluator_of,
)
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    INITIAL_SEQUENCE_NUMBER,
    POSITIONAL_DELETE_SCHEMA,
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.typedef import Record

from lakewarden._compat.pyiceberg import InclusiveMetricsEvaluator
from lakewarden.domain.errors import InvalidField
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.metadata.manifests import FILE_PATH_FIELD_ID, referenced_data_file, v3_field


@dataclass(frozen=True)
class ScanRequest:
    filter: BooleanExpression = field(default_factory=AlwaysTrue)
    case_sensitive: bool = True
    snapshot_id: int | None = None
    use_snapshot_schema: bool = False
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None


@dataclass(frozen=True)
class PlannedFile:
    """One file scan task: a data file, the delete files that apply to it, and the residual filter."""

    entry: ManifestEntry
    deletes: tuple[DataFile, ...]
    residual: BooleanExpression

    @property
    def data_file(self) -> DataFile:
        return self.entry.data_file


@dataclass(frozen=True)
class Plan:
    snapshot_id: int | None
    schema: Schema
    files: list[PlannedFile]
    manifests_total: int
    manifests_read: int  # after pruning by partition summaries


def plan_scan(metadata: TableMetadata, io: FileIO, cache: ManifestCache, request: ScanRequest) -> Plan:
    """The files a scan reads (InvalidField naming what was wrong with the request)."""
    if request.start_snapshot_id is not None or request.end_snapshot_id is not None:
        return _plan_incremental(metadata, io, cache, request)
    snapshot = _snapshot(metadata, request.snapshot_id, "snapshot-id")
    schema = metadata.schema()
    if request.use_snapshot_schema and snapshot is not None and snapshot.schema_id is not None:
        schema = next((s for s in metadata.schemas if s.schema_id == snapshot.schema_id), schema)
    if snapshot is None:
        return Plan(None, schema, [], 0, 0)
    pruning = _Pruning(metadata, schema, request.filter, request.case_sensitive)
    manifests = cache.manifests(io, snapshot)
    kept = [m for m in manifests if pruning.manifest(m) and pruning.manifest_metrics(io, cache, m)]
    data: list[ManifestEntry] = []
    deletes = _DeleteIndex()
    for manifest in kept:
        for entry in cache.entries(io, manifest):
            if entry.status == ManifestEntryStatus.DELETED or not pruning.file(entry.data_file):
                continue
            if manifest.content == ManifestContent.DATA:
                data.append(entry)
            else:
                deletes.add(entry, metadata)
    files = [
        PlannedFile(entry, deletes.for_data(entry), pruning.residual(entry.data_file))
        for entry in data
        if pruning.metrics(entry.data_file)
    ]
    return Plan(snapshot.snapshot_id, schema, files, len(manifests), len(kept))


def _plan_incremental(metadata: TableMetadata, io: FileIO, cache: ManifestCache, request: ScanRequest) -> Plan:
    if request.end_snapshot_id is None:
        raise InvalidField("end-snapshot-id", "is required with start-snapshot-id")
    if request.snapshot_id is not None:
        raise InvalidField("snapshot-id", "cannot be given with start-snapshot-id and end-snapshot-id")
    end = _snapshot(metadata, request.end_snapshot_id, "end-snapshot-id")
    assert end is not None
    appends: set[int] = set()
    current: Snapshot | None = end
    while current is not None and current.snapshot_id != request.start_snapshot_id:
        if current.summary is not None and current.summary.operation == Operation.APPEND:
            appends.add(current.snapshot_id)
        parent = current.parent_snapshot_id
        current = metadata.snapshot_by_id(parent) if parent is not None else None
    if request.start_snapshot_id is not None and current is None:
        raise InvalidField(
            "start-snapshot-id", f"{request.start_snapshot_id} is not an ancestor of end snapshot {end.snapshot_id}"
        )
    schema = metadata.schema()
    pruning = _Pruning(metadata, schema, request.filter, request.case_sensitive)
    manifests = [m for m in cache.manifests(io, end) if m.content == ManifestContent.DATA]
    kept = [m for m in manifests if m.added_snapshot_id in appends and pruning.manifest(m)]
    files = [
        PlannedFile(entry, (), pruning.residual(entry.data_file))
        for manifest in kept
        for entry in cache.entries(io, manifest)
        if entry.status == ManifestEntryStatus.ADDED
        and entry.snapshot_id in appends
        and pruning.file(entry.data_file)
        and pruning.metrics(entry.data_file)
    ]
    return Plan(end.snapshot_id, schema, files, len(manifests), len(kept))


def _snapshot(metadata: TableMetadata, snapshot_id: int | None, name: str) -> Snapshot | None:
    if snapshot_id is None:
        return metadata.current_snapshot()
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise InvalidField(name, f"snapshot {snapshot_id} does not exist in the table")
    return snapshot


class _Pruning:
    """Iceberg's evaluators for one scan: per spec (projection, manifest and partition evaluators, residuals)
    and for column metrics. A filter that names no column of the schema is an InvalidField for `filter`."""

    def __init__(self, metadata: TableMetadata, schema: Schema, row_filter: BooleanExpression, case_sensitive: bool):
        self.schema = schema
        self.specs = metadata.specs()
        self.row_filter = row_filter
        self.case_sensitive = case_sensitive
        self._manifest: dict[int, Callable[[ManifestFile], bool]] = {}
        self._partition: dict[int, Callable[[Record], bool]] = {}
        self._residual: dict[int, Any] = {}
        self.skip_merged = "NotStartsWith" in repr(row_filter) or row_filter == AlwaysTrue()
        self._residuals: dict[tuple[int, tuple[Any, ...]], BooleanExpression] = {}
        self.metrics: Callable[[DataFile], bool]
        self.field_ids: frozenset[int] = frozenset()
        if row_filter == AlwaysTrue():
            self.metrics = _not_empty  # what the evaluator decides for `true`, without visiting it
            return
        try:
            self.metrics = InclusiveMetricsEvaluator(schema, row_filter, case_sensitive, False).eval
            self.field_ids = frozenset(extract_field_ids(bind(schema, row_filter, case_sensitive)))
        except ValueError as exc:
            raise InvalidField("filter", str(exc)) from None

    def manifest_metrics(self, io: FileIO, cache: ManifestCache, manifest: ManifestFile) -> bool:
        """Whether some data file of the manifest may match, by the manifest's merged metrics (cached with its
        entries). A lakewarden addition to Iceberg's pruning that sets aside no file Iceberg would read: a
        manifest written in order (time, ids) is skipped whole, not evaluated file by file. Not used for
        `notStartsWith`, whose evaluation of truncated bounds does not carry over to merged ones."""
        if manifest.content != ManifestContent.DATA or self.skip_merged or not cache.holds(manifest):
            return True  # a manifest read now is evaluated file by file: merging first would only add work
        summary = cache.summary(io, manifest, self.schema, self.field_ids)
        return summary is not None and self.metrics(summary)

    def _projection(self, spec_id: int) -> BooleanExpression:
        try:
            return inclusive_projection(self.schema, self.specs[spec_id], self.case_sensitive)(self.row_filter)
        except ValueError as exc:
            raise InvalidField("filter", str(exc)) from None

    def manifest(self, manifest: ManifestFile) -> bool:
        spec_id = manifest.partition_spec_id
        evaluator = self._manifest.get(spec_id)
        if evaluator is None:
            projection = self._projection(spec_id)
            evaluator = manifest_evaluator(self.specs[spec_id], self.schema, projection, self.case_sensitive)
            self._manifest[spec_id] = evaluator
        return evaluator(manifest)

    def file(self, data_file: DataFile) -> bool:
        spec_id = data_file.spec_id
        evaluator = self._partition.get(spec_id)
        if evaluator is None:
            spec = self.specs[spec_id]
            projection = self._projection(spec_id)
            if projection == AlwaysTrue():
                evaluator = _anything
            else:
                partition_schema = Schema(*spec.partition_type(self.schema).fields)
                evaluator = expression_evaluator(partition_schema, projection, self.case_sensitive)
            self._partition[spec_id] = evaluator
        return evaluator(data_file.partition)

    def residual(self, data_file: DataFile) -> BooleanExpression:
        """The filter left for a file's rows once its partition is known (one per partition)."""
        key = _partition_key(data_file)
        known = self._residuals.get(key)
        if known is not None:
            return known
        spec_id = data_file.spec_id
        evaluator = self._residual.get(spec_id)
        if evaluator is None:
            evaluator = residual_evaluator_of(self.specs[spec_id], self.row_filter, self.case_sensitive, self.schema)
            self._residual[spec_id] = evaluator
        residual: BooleanExpression = evaluator.residual_for(data_file.partition)
        self._residuals[key] = residual
        return residual


def _not_empty(data_file: DataFile) -> bool:
    return bool(data_file.record_count != 0)


def _anything(_: Record) -> bool:
    return True


def _partition_key(data_file: DataFile) -> tuple[int, tuple[Any, ...]]:
    record = data_file.partition
    return data_file.spec_id, tuple(record[i] for i in range(len(record))) if record else ()


def _within_path_bounds(delete_file: DataFile, data_path: str) -> bool:
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_FIELD_ID)
    if lower is None or upper is None:
        return True
    same_path = EqualTo(term="file_path", value=data_path)
    return bool(InclusiveMetricsEvaluator(POSITIONAL_DELETE_SCHEMA, same_path).eval(delete_file))


class _DeleteIndex:
    def __init__(self) -> None:
        self.by_path: dict[str, list[tuple[int, DataFile]]] = {}
        self.positions: dict[tuple[int, tuple[Any, ...]], list[tuple[int, DataFile]]] = {}
        self.equality: dict[tuple[int, tuple[Any, ...]], list[tuple[int, DataFile]]] = {}
        self.global_equality: list[tuple[int, DataFile]] = []

    def add(self, entry: ManifestEntry, metadata: TableMetadata) -> None:
        f = entry.data_file
        sequence = entry.sequence_number or INITIAL_SEQUENCE_NUMBER
        if f.content == DataFileContent.EQUALITY_DELETES:
            if metadata.specs()[f.spec_id].is_unpartitioned():
                self.global_equality.append((sequence, f))
            else:
                self.equality.setdefault(_partition_key(f), []).append((sequence, f))
            return
        target = referenced_data_file(f)
        if target is not None:
            self.by_path.setdefault(target, []).append((sequence, f))
        else:
            self.positions.setdefault(_partition_key(f), []).append((sequence, f))

    def for_data(self, entry: ManifestEntry) -> tuple[DataFile, ...]:
        data = entry.data_file
        sequence = entry.sequence_number or INITIAL_SEQUENCE_NUMBER
        key = _partition_key(data)
        found: list[DataFile] = [f for s, f in self.by_path.get(data.file_path, ()) if s >= sequence]
        found += [f for s, f in self.positions.get(key, ()) if s >= sequence and _within_path_bounds(f, data.file_path)]
        found += [f for s, f in self.equality.get(key, ()) if s > sequence]
        found += [f for s, f in self.global_equality if s > sequence]
        return tuple(found)


def delete_key(delete_file: DataFile) -> tuple[str, int | None]:
    """What tells delete files apart: their path, and for deletion vectors (several in one Puffin file) the
    offset of the vector in it."""
    return delete_file.file_path, v3_field(delete_file, "content_offset")
