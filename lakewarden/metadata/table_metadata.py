"""Table metadata without a catalog: a new table from the updates that define it, what a commit did,
and every file a table's metadata references (for purging)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    AssignUUIDUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
)

_DEFINING = (AssignUUIDUpdate, UpgradeFormatVersionUpdate, AddSchemaUpdate, SetCurrentSchemaUpdate,
             AddPartitionSpecUpdate, SetDefaultSpecUpdate, AddSortOrderUpdate, SetDefaultSortOrderUpdate,
             SetLocationUpdate, SetPropertiesUpdate)  # fmt: skip


def defines_table(update: TableUpdate) -> bool:
    return isinstance(update, _DEFINING)


def metadata_from_updates(updates: Sequence[TableUpdate]) -> TableMetadata:
    """A new table's metadata from the updates that define it, keeping the ids the client assigned."""

    def last(kind: type[Any]) -> Any:
        return next(u for u in reversed(updates) if isinstance(u, kind))

    schema = last(AddSchemaUpdate).schema_
    partition_spec = next((u.spec for u in reversed(updates) if isinstance(u, AddPartitionSpecUpdate)), PartitionSpec())
    order = next((u.sort_order for u in reversed(updates) if isinstance(u, AddSortOrderUpdate)), SortOrder())
    properties: dict[str, str] = {}
    for update in updates:
        if isinstance(update, SetPropertiesUpdate):
            properties.update(update.updates)
    version = next((u.format_version for u in updates if isinstance(u, UpgradeFormatVersionUpdate)), 2)
    if version != 2:
        raise ValueError(f"format-version {version} tables cannot be created here yet")
    table_uuid = next((u.uuid for u in updates if isinstance(u, AssignUUIDUpdate)), uuid.uuid4())
    return TableMetadataV2(
        location=last(SetLocationUpdate).location, table_uuid=table_uuid, last_column_id=schema.highest_field_id,
        schemas=[schema], current_schema_id=schema.schema_id, partition_specs=[partition_spec],
        default_spec_id=partition_spec.spec_id, last_partition_id=partition_spec.last_assigned_field_id,
        sort_orders=[order], default_sort_order_id=order.order_id, properties=properties,
    )  # fmt: skip


def describe_commit(base: TableMetadata, metadata: TableMetadata, updates: Sequence[TableUpdate]) -> dict[str, Any]:
    added = [u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)]
    if added:
        snapshot = added[-1]
        summary = snapshot.summary.model_dump() if snapshot.summary else {}
        operation = str(summary.get("operation", "append"))
        return {"operation": operation, "snapshot_id": snapshot.snapshot_id,
                "parent_snapshot_id": snapshot.parent_snapshot_id, "summary": summary}  # fmt: skip
    actions = sorted({u.action for u in updates})
    return {"operation": ",".join(actions)[:64] or "noop", "snapshot_id": metadata.current_snapshot_id,
            "parent_snapshot_id": base.current_snapshot_id, "summary": {}}  # fmt: skip


def purge_files(io: FileIO, metadata: TableMetadata) -> None:
    """Delete what the table's metadata references: data, delete and manifest files, then metadata files."""
    paths: set[str] = set()
    for snapshot in metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    paths.update(log_entry.metadata_file for log_entry in metadata.metadata_log)
    for path in sorted(paths):
        with contextlib.suppress(OSError):  # already gone: purging again must not fail
            io.delete(path)
