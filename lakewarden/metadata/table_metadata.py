"""Table metadata without a catalog: new tables, commits applied, metadata files written, what a commit did,
and every file a table's metadata references (for purging).

pyiceberg's models and update handlers do the work. Added here: format version 3, which pyiceberg reads but
neither upgrades to nor writes; and speed, since metadata objects are never mutated, so the deep copy of each
update's result is skipped, and each snapshot's JSON is made once and spliced into every later metadata file."""

from __future__ import annotations

import contextlib
import os
import uuid
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from pyiceberg.io import FileIO
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2, TableMetadataV3, new_table_metadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    AssignUUIDUpdate,
    RemoveSnapshotsUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.utils.datetime import datetime_to_millis

from lakewarden._compat.pyiceberg import TableMetadataUpdateContext, apply_table_update, update_table_metadata_log
from lakewarden.metadata.manifests import entries as manifest_entries
from lakewarden.metadata.manifests import manifests as snapshot_manifests
from lakewarden.metadata.paths import is_under

MAX_FORMAT_VERSION = 3

_DEFINING = (
    AssignUUIDUpdate,
    UpgradeFormatVersionUpdate,
    AddSchemaUpdate,
    SetCurrentSchemaUpdate,
    AddPartitionSpecUpdate,
    SetDefaultSpecUpdate,
    AddSortOrderUpdate,
    SetDefaultSortOrderUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
)


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
    if version not in (2, 3):
        raise ValueError(f"format-version {version} is not supported (2 or 3)")
    table_uuid = next((u.uuid for u in updates if isinstance(u, AssignUUIDUpdate)), uuid.uuid4())
    fields: dict[str, Any] = dict(
        location=last(SetLocationUpdate).location,
        table_uuid=table_uuid,
        last_column_id=schema.highest_field_id,
        schemas=[schema],
        current_schema_id=schema.schema_id,
        partition_specs=[partition_spec],
        default_spec_id=partition_spec.spec_id,
        last_partition_id=partition_spec.last_assigned_field_id,
        sort_orders=[order],
        default_sort_order_id=order.order_id,
        properties=properties,
    )
    return TableMetadataV3(**fields, next_row_id=0) if version == 3 else TableMetadataV2(**fields)


def new_metadata(
    schema: Schema, spec: PartitionSpec, order: SortOrder, location: str, properties: dict[str, str]
) -> TableMetadata:
    """A new table's metadata as pyiceberg builds it; a v3 table starts row lineage at 0."""
    metadata = new_table_metadata(schema, spec, order, location, properties)
    if isinstance(metadata, TableMetadataV3) and metadata.next_row_id is None:
        metadata = metadata.model_copy(update={"next_row_id": 0})
    return metadata


def apply_updates(
    base: TableMetadata, updates: Sequence[TableUpdate], metadata_location: str | None = None
) -> TableMetadata:
    """A commit's updates applied to `base`, as pyiceberg's `update_table_metadata` does, plus v3 upgrades.

    Raises ValueError (or KeyError) when an update cannot apply."""
    context = TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        if isinstance(update, RemoveSnapshotsUpdate):
            # Java's TableMetadata ignores ids already gone (two expirations racing both succeed); pyiceberg raises
            present = {s.snapshot_id for s in metadata.snapshots}
            gone = [i for i in update.snapshot_ids if i in present]
            if not gone:
                continue
            update = update.model_copy(update={"snapshot_ids": gone})
        if isinstance(update, UpgradeFormatVersionUpdate) and update.format_version >= 3:
            upgraded = _upgrade_to_v3(metadata, update.format_version, context)
            if upgraded is not metadata:
                context.add_update(update)
            metadata = upgraded
        else:
            metadata = apply_table_update(update, metadata, context)
    if context.has_changes():
        if metadata_location:
            metadata = update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            now = datetime_to_millis(datetime.now().astimezone())
            metadata = metadata.model_copy(update={"last_updated_ms": now})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def _upgrade_to_v3(metadata: TableMetadata, version: int, context: TableMetadataUpdateContext) -> TableMetadata:
    if version > MAX_FORMAT_VERSION:
        raise ValueError(f"Unsupported table format version: {version}")
    if metadata.format_version == version:
        return metadata
    if metadata.format_version > version:
        raise ValueError(f"Cannot downgrade v{metadata.format_version} table to v{version}")
    if metadata.format_version < 2:  # pyiceberg knows v1 -> v2
        metadata = apply_table_update(UpgradeFormatVersionUpdate(format_version=2), metadata, context)
    fields = {**dict(metadata), "format_version": 3, "next_row_id": 0}  # row lineage starts now
    return TableMetadataV3.model_construct(**fields)


def referenced_only(metadata: TableMetadata) -> TableMetadata:
    """The metadata with only the snapshots its refs (branches, tags) name, as Java's
    `suppressHistoricalSnapshots` makes it for the REST spec's `snapshots=refs`: the others' statistics go
    too; the snapshot log stays."""
    keep = {ref.snapshot_id for ref in metadata.refs.values()}
    return metadata.model_copy(
        update={
            "snapshots": [s for s in metadata.snapshots if s.snapshot_id in keep],
            "statistics": [s for s in metadata.statistics if s.snapshot_id in keep],
            "partition_statistics": [s for s in metadata.partition_statistics if s.snapshot_id in keep],
        }
    )


class _SnapshotTexts:
    """Each snapshot's JSON, for as long as its (immutable) snapshot object lives in some metadata version.
    Keyed by the object's identity: pydantic hashes a frozen model by all its fields, which cost more than
    the lookup saves."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[weakref.ref[Snapshot], str]] = {}

    def get(self, snapshot: Snapshot) -> str | None:
        entry = self._texts.get(id(snapshot))
        return entry[1] if entry is not None and entry[0]() is snapshot else None

    def put(self, snapshot: Snapshot, text: str) -> None:
        key = id(snapshot)

        def gone(ref: weakref.ref[Snapshot]) -> None:  # the object died: its id may be reused
            entry = self._texts.get(key)
            if entry is not None and entry[0] is ref:
                self._texts.pop(key, None)

        self._texts[key] = (weakref.ref(snapshot, gone), text)

    def __len__(self) -> int:
        return len(self._texts)


_snapshot_texts = _SnapshotTexts()
SPLICED_FROM = 16  # snapshots: below this a table's metadata is serialised in one call


def metadata_json(metadata: TableMetadata) -> str:
    """The metadata file's JSON for any format version (pyiceberg's v3 model refuses to serialise itself).

    With many snapshots, the rest of the metadata is serialised and the snapshots' JSON, made once per
    snapshot object, is appended as its `snapshots` field (the same JSON value; the field comes last)."""
    snapshots = metadata.snapshots
    if len(snapshots) < SPLICED_FROM:
        return IcebergBaseModel.model_dump_json(metadata)
    rest = IcebergBaseModel.model_dump_json(metadata, exclude={"snapshots"})
    parts = []
    for snapshot in snapshots:
        text = _snapshot_texts.get(snapshot)
        if text is None:
            text = snapshot.model_dump_json()
            _snapshot_texts.put(snapshot, text)
        parts.append(text)
    return f'{rest[:-1]},"snapshots":[{",".join(parts)}]}}'


def write_metadata(io: FileIO, location: str, metadata: TableMetadata) -> str:
    """Write a new metadata file (it must not exist: metadata files never change); returns its JSON."""
    text = metadata_json(metadata)
    local = local_path(location)
    if local is not None:
        create_local(local, text.encode())
    else:
        with io.new_output(location).create(overwrite=False) as out:
            out.write(text.encode())
    return text


def local_path(location: str) -> str | None:
    """The file system path of a local location (a path, or a `file:` URI), else None."""
    if location.startswith("/"):
        return location
    if location.startswith("file:"):
        return urlsplit(location).path
    return None


def create_local(path: str, data: bytes) -> None:
    """Create a local file that must not exist, and its directory if need be. Opened exclusively (`O_EXCL`): one
    system call where pyarrow's FileIO asks whether the file exists and then creates it (a file made meanwhile
    would have been overwritten); FileExistsError as FileIO's `create(overwrite=False)` raises."""
    try:
        out = open(path, "xb")  # noqa: SIM115 - closed below, after the directory is made if need be
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        out = open(path, "xb")  # noqa: SIM115
    with out:
        out.write(data)


def describe_commit(base: TableMetadata, metadata: TableMetadata, updates: Sequence[TableUpdate]) -> dict[str, Any]:
    added = [u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)]
    if added:
        snapshot = added[-1]
        summary = snapshot.summary.model_dump() if snapshot.summary else {}
        operation = str(summary.get("operation", "append"))
        return {
            "operation": operation,
            "snapshot_id": snapshot.snapshot_id,
            "parent_snapshot_id": snapshot.parent_snapshot_id,
            "summary": summary,
        }
    actions = sorted({u.action for u in updates})
    return {
        "operation": ",".join(actions)[:64] or "noop",
        "snapshot_id": metadata.current_snapshot_id,
        "parent_snapshot_id": base.current_snapshot_id,
        "summary": {},
    }


def referenced_files(io: FileIO, metadata: TableMetadata) -> set[str]:
    """Every file the table's metadata references: data and delete files, manifests, manifest lists,
    statistics and partition statistics files, earlier metadata files."""
    paths: set[str] = set()
    for snapshot in metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot_manifests(io, snapshot):
            paths.add(manifest.manifest_path)
            for entry in manifest_entries(io, manifest, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    paths.update(log_entry.metadata_file for log_entry in metadata.metadata_log)
    paths.update(s.statistics_path for s in metadata.statistics)
    paths.update(s.statistics_path for s in metadata.partition_statistics)
    return paths


def purge_files(io: FileIO, metadata: TableMetadata, metadata_location: str) -> tuple[int, int]:
    """Delete what the table's metadata references under the table's location, then the metadata file
    itself; a referenced file elsewhere (a crafted metadata-log, another table's file) is left alone.
    Returns (files deleted, files skipped as outside the location)."""
    deleted = skipped = 0
    for path in [*sorted(referenced_files(io, metadata) - {metadata_location}), metadata_location]:
        if not is_under(metadata.location, path):
            skipped += 1
            continue
        with contextlib.suppress(OSError):  # already gone: purging again must not fail
            io.delete(path)
            deleted += 1
    return deleted, skipped
