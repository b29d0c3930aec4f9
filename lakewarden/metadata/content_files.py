"""Data and delete files as the REST spec's `ContentFile` JSON (scan planning answers): partition values and
bounds as single values of their types, counts as parallel key/value arrays."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Collection, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    FixedType,
    PrimitiveType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from lakewarden.metadata.files import json_partition_value
from lakewarden.metadata.manifests import v3_field

CONTENT = {
    DataFileContent.DATA: "data",
    DataFileContent.POSITION_DELETES: "position-deletes",
    DataFileContent.EQUALITY_DELETES: "equality-deletes",
}
EPOCH = dt.datetime(1970, 1, 1)


def content_file_json(
    f: DataFile, spec: PartitionSpec, schema: Schema, stats_fields: Collection[int] = ()
) -> dict[str, Any]:
    """One file; column statistics only for the field ids in `stats_fields` (Java's includeColumnStats)."""
    record = f.partition
    partition = [json_partition_value(spec, schema, i, record[i]) for i in range(len(record))] if record else []
    body: dict[str, Any] = {
        "content": CONTENT[f.content],
        "file-path": f.file_path,
        "file-format": str(f.file_format.value).lower(),
        "spec-id": f.spec_id,
        "partition": partition,
        "file-size-in-bytes": f.file_size_in_bytes,
        "record-count": f.record_count,
    }
    if f.key_metadata:
        body["key-metadata"] = bytes(f.key_metadata).hex()
    if f.split_offsets:
        body["split-offsets"] = list(f.split_offsets)
    if f.sort_order_id is not None and f.content == DataFileContent.DATA:
        body["sort-order-id"] = f.sort_order_id
    if f.content == DataFileContent.EQUALITY_DELETES and f.equality_ids:
        body["equality-ids"] = list(f.equality_ids)
    if f.content == DataFileContent.POSITION_DELETES:
        for name, key in (
            ("referenced_data_file", "referenced-data-file"),
            ("content_offset", "content-offset"),
            ("content_size_in_bytes", "content-size-in-bytes"),
        ):
            value = _optional(f, name)
            if value is not None:
                body[key] = value
    if f.content == DataFileContent.DATA:
        first_row_id = _optional(f, "first_row_id")
        if first_row_id is not None:
            body["first-row-id"] = first_row_id
        if stats_fields:
            body.update(_stats(f, schema, set(stats_fields)))
    return body


def _optional(f: DataFile, name: str) -> Any:
    return v3_field(f, name)


def _stats(f: DataFile, schema: Schema, wanted: set[int]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name, counts in (
        ("column-sizes", f.column_sizes),
        ("value-counts", f.value_counts),
        ("null-value-counts", f.null_value_counts),
        ("nan-value-counts", f.nan_value_counts),
    ):
        chosen = _chosen(counts, wanted)
        if chosen:
            body[name] = {"keys": list(chosen), "values": list(chosen.values())}
    for name, bounds in (("lower-bounds", f.lower_bounds), ("upper-bounds", f.upper_bounds)):
        chosen = _chosen(bounds, wanted)
        values = {}
        for field_id, raw in chosen.items():
            field_type = schema.find_type(field_id)
            if isinstance(field_type, PrimitiveType):
                values[field_id] = single_value_json(field_type, from_bytes(field_type, raw))
        if values:
            body[name] = {"keys": list(values), "values": list(values.values())}
    return body


def _chosen(values: Mapping[int, Any] | None, wanted: set[int]) -> dict[int, Any]:
    return {k: v for k, v in (values or {}).items() if k in wanted}


def single_value_json(field_type: PrimitiveType, value: Any) -> Any:
    """A value of a primitive type as Iceberg's JSON single-value serialization writes it."""
    if value is None:
        return None
    if isinstance(field_type, DateType):
        return (EPOCH.date() + dt.timedelta(days=int(value))).isoformat()
    if isinstance(field_type, TimeType):
        return (EPOCH + dt.timedelta(microseconds=int(value))).time().isoformat(timespec="microseconds")
    if isinstance(field_type, (TimestampType, TimestamptzType)):
        stamp = (EPOCH + dt.timedelta(microseconds=int(value))).isoformat(timespec="microseconds")
        return stamp + ("+00:00" if isinstance(field_type, TimestamptzType) else "")
    if isinstance(field_type, UUIDType):
        return str(UUID(bytes=value) if isinstance(value, bytes) else value)
    if isinstance(field_type, (BinaryType, FixedType)):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value
