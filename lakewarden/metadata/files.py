"""A snapshot's live files as the evaluator and the planners of self-optimizing and maintenance see them:
plain records (domain/files.py) made from each manifest's entries once and kept in the server's manifest
cache (metadata/manifest_cache.py). Re-evaluating a table after a small commit parses only the manifests
that commit wrote.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import parse as parse_predicate
from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
from pyiceberg.manifest import DataFileContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.metadata.manifests import referenced_data_file, v3_field

EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class ManifestContents:
    data: tuple[DataFile, ...]
    deletes: tuple[DeleteFile, ...]
    # the partition record of each key, for evaluating filters on partition values
    records: dict[PartitionKey, Record]


def json_partition_value(spec: PartitionSpec, schema: Schema, index: int, value: Any) -> Any:
    """A partition value as Iceberg's JSON expressions write literals of the transform's result type."""
    if value is None:
        return None
    field = spec.fields[index]
    source_type = schema.find_type(field.source_id)
    if isinstance(field.transform, DayTransform) or (
        isinstance(field.transform, IdentityTransform) and isinstance(source_type, DateType)
    ):
        return (EPOCH.date() + dt.timedelta(days=int(value))).isoformat()
    if isinstance(field.transform, IdentityTransform) and isinstance(source_type, (TimestampType, TimestamptzType)):
        stamp = (EPOCH + dt.timedelta(microseconds=int(value))).isoformat(timespec="microseconds")
        return stamp + ("+00:00" if isinstance(source_type, TimestamptzType) else "")
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def identity_fields(spec: PartitionSpec, schema: Schema) -> list[tuple[str, str]]:
    """The spec's fields as (source column, field name) when every one is an identity field, else none: only
    then does a filter that pins each column name one partition (domain/reads.partition_of)."""
    if not all(isinstance(f.transform, IdentityTransform) for f in spec.fields):
        return []
    return [(schema.find_column_name(f.source_id) or "", f.name) for f in spec.fields]


class _Reader:
    """Turns one manifest's pyiceberg entries into lakewarden's plain file records."""

    def __init__(self, table: Table) -> None:
        self.schema = table.schema()
        self.specs = table.specs()
        self._keys: dict[tuple[int, tuple[Any, ...]], PartitionKey] = {}
        self.read_count = 0

    def key(self, spec_id: int, record: Record) -> PartitionKey:
        raw: tuple[Any, ...] = tuple(record[i] for i in range(len(record)))
        found = self._keys.get((spec_id, raw))
        if found is None:
            spec = self.specs[spec_id]
            path = spec.partition_to_path(record, self.schema) if spec.fields else ""
            values = tuple(json_partition_value(spec, self.schema, i, v) for i, v in enumerate(raw))
            found = self._keys[(spec_id, raw)] = PartitionKey(spec_id, path, values)
        return found

    def read(self, entries: tuple[ManifestEntry, ...]) -> ManifestContents:
        self.read_count += 1
        data: list[DataFile] = []
        deletes: list[DeleteFile] = []
        records: dict[PartitionKey, Record] = {}
        for entry in entries:
            if entry.status == ManifestEntryStatus.DELETED:
                continue
            f = entry.data_file
            key = self.key(f.spec_id, f.partition)
            records.setdefault(key, f.partition)
            sequence = entry.sequence_number or 0
            if f.content == DataFileContent.DATA:
                data.append(DataFile(f.file_path, key, f.file_size_in_bytes, f.record_count, sequence))
                continue
            equality = f.content == DataFileContent.EQUALITY_DELETES
            size = f.file_size_in_bytes
            referenced = None
            if not equality:
                referenced = referenced_data_file(f)
                content_size = v3_field(f, "content_size_in_bytes")
                if content_size:  # a deletion vector: the Puffin file is shared, count the vector's own bytes
                    size = int(content_size)
            deletes.append(DeleteFile(f.file_path, key, equality, size, f.record_count, sequence, referenced))
        return ManifestContents(tuple(data), tuple(deletes), records)


def _weight(contents: ManifestContents) -> int:
    return 400 * (len(contents.data) + len(contents.deletes)) + 300 * len(contents.records) + 200


def optimized_branches(table: Table, named: tuple[str, ...]) -> list[str | None]:
    """The branches self-optimizing plans, in turn: main (None) first, then those of `named` (the table's
    `self-optimizing.branches`) that the table has as branches (a tag, or a name it does not have, is not)."""
    refs = table.metadata.refs
    return [None, *(name for name in named if name in refs and refs[name].snapshot_ref_type == "branch")]


@dataclass(frozen=True)
class SnapshotFiles:
    snapshot_id: int | None
    data: list[DataFile]
    deletes: list[DeleteFile]
    manifests_read: int  # manifests whose records were made now (the rest were kept)


def partition_filter(table: Table, predicate: str | None) -> Callable[[PartitionKey, Record], bool]:
    """Whether a partition may hold rows matching `self-optimizing.filter` (a SQL predicate)."""
    if not predicate:
        return lambda _key, _record: True
    try:
        expression: BooleanExpression = parse_predicate(predicate)
    except Exception as exc:
        raise InvalidField("self-optimizing.filter", f"{predicate!r} is not a valid predicate: {exc}") from exc
    schema = table.schema()
    evaluators: dict[int, Callable[[Record], bool]] = {}
    for spec_id, spec in table.specs().items():
        try:
            projected = inclusive_projection(schema, spec)(expression)
        except Exception as exc:
            raise InvalidField("self-optimizing.filter", f"{predicate!r}: {exc}") from exc
        if projected == AlwaysTrue():
            evaluators[spec_id] = lambda _record: True
        else:
            partition_schema = Schema(*spec.partition_type(schema).fields)
            evaluators[spec_id] = expression_evaluator(partition_schema, projected, True)
    return lambda key, record: evaluators[key.spec_id](record)


def snapshot_files(
    table: Table, cache: ManifestCache, predicate: str | None = None, branch: str | None = None
) -> SnapshotFiles:
    """The live data and delete files of the table's current snapshot, or of the head of `branch` (limited by
    `predicate`, if any)."""
    snapshot = table.current_snapshot() if branch is None else table.snapshot_by_name(branch)
    if snapshot is None:
        return SnapshotFiles(None, [], [], 0)
    accept = partition_filter(table, predicate)
    reader = _Reader(table)
    data: list[DataFile] = []
    deletes: list[DeleteFile] = []
    manifests = cache.manifests(table.io, snapshot)
    if branch is None:  # the cache keeps one list a table: main's
        cache.note_current(table.location(), snapshot, manifests)
    for manifest in manifests:
        contents = cache.view(table.io, manifest, "files", reader.read, _weight)
        if predicate:
            rejected = {k for k, rec in contents.records.items() if not accept(k, rec)}
            data.extend(d for d in contents.data if d.partition not in rejected)
            deletes.extend(d for d in contents.deletes if d.partition not in rejected)
        else:
            data.extend(contents.data)
            deletes.extend(contents.deletes)
    return SnapshotFiles(snapshot.snapshot_id, data, deletes, reader.read_count)
