"""What snapshots changed, read from their manifests, for the server's commit rules (conflicts.py, yielding.py):
the snapshots since a commit's base, the files each removed and the data files its position deletes name, and a
commit's manifests moved onto a new sequence number."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, Summary
from pyiceberg.table.update import TableRequirement, TableUpdate

from lakewarden.metadata.manifests import entries as manifest_entries
from lakewarden.metadata.manifests import manifests as snapshot_manifests
from lakewarden.metadata.manifests import referenced_data_file

Where = tuple[int, tuple[Any, ...]]  # a partition: (spec id, partition values)
TOTALS = (
    "total-data-files",
    "total-delete-files",
    "total-records",
    "total-files-size",
    "total-position-deletes",
    "total-equality-deletes",
)


@dataclass(frozen=True)
class Rebased:
    """A commit the server changed so that it applies to the branch head: what to validate and apply instead,
    and the metadata files written for it (deleted again when the commit does not land)."""

    requirements: list[TableRequirement]
    updates: list[TableUpdate]
    written: list[str]


@dataclass
class Moved:
    """One file's net move by lakewarden's snapshots since a writer's base: its entry, where it is, and the
    snapshot that moved it."""

    entry: ManifestEntry
    where: Where
    snapshot: Snapshot


def since(current: TableMetadata, head_id: int, base_id: int | None) -> tuple[list[Snapshot], Snapshot | None]:
    """The snapshots from the head back to (not including) the base, and the base if it is an ancestor (with
    no base: the whole history)."""
    between: list[Snapshot] = []
    snapshot = current.snapshot_by_id(head_id)
    while snapshot is not None and snapshot.snapshot_id != base_id:
        between.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = current.snapshot_by_id(parent) if parent is not None else None
    return between, snapshot


def where(manifest: ManifestFile, entry: ManifestEntry) -> Where:
    record = entry.data_file.partition
    return manifest.partition_spec_id, tuple(record[i] for i in range(len(record)))


def own_entries(io: FileIO, snapshot: Snapshot) -> list[tuple[ManifestFile, ManifestEntry]]:
    """The entries the snapshot itself added or removed (EXISTING ones and carried-over manifests left out)."""
    found = []
    for manifest in snapshot_manifests(io, snapshot):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue  # carried over unchanged from the parent
        for entry in manifest_entries(io, manifest, discard_deleted=False):
            if entry.snapshot_id == snapshot.snapshot_id and entry.status != ManifestEntryStatus.EXISTING:
                found.append((manifest, entry))
    return found


@dataclass
class FileChanges:
    """What a commit names: the files it removed, the data files its new position deletes point at, and the
    partitions of its position deletes that may point at any file there."""

    removed: dict[str, Where] = field(default_factory=dict)
    targets: set[str] = field(default_factory=set)
    untargeted: set[Where] = field(default_factory=set)

    def add(self, other: FileChanges) -> None:
        self.removed |= other.removed
        self.targets |= other.targets
        self.untargeted |= other.untargeted


def file_changes(io: FileIO, snapshot: Snapshot) -> FileChanges:
    changes = FileChanges()
    for manifest, entry in own_entries(io, snapshot):
        place = where(manifest, entry)
        if entry.status == ManifestEntryStatus.DELETED:
            changes.removed[entry.data_file.file_path] = place
        elif entry.data_file.content == DataFileContent.POSITION_DELETES:
            target = referenced_data_file(entry.data_file)
            if target is None:
                changes.untargeted.add(place)
            else:
                changes.targets.add(target)
    return changes


def renumbered(manifest: ManifestFile, snapshot: Snapshot, sequence: int) -> ManifestFile:
    """A commit's own manifest under its new sequence number (its added entries inherit it)."""
    moved = copy.copy(manifest)
    moved.sequence_number = sequence
    if manifest.min_sequence_number == snapshot.sequence_number:
        moved.min_sequence_number = sequence
    return moved


def count(summary: Summary | None, key: str) -> int | None:
    try:
        return int(summary[key]) if summary is not None else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def file_totals(data_file: DataFile) -> Mapping[str, int]:
    """What one live file adds to a snapshot summary's totals."""
    if data_file.content == DataFileContent.DATA:
        return {
            "total-data-files": 1,
            "total-records": data_file.record_count,
            "total-files-size": data_file.file_size_in_bytes,
        }
    position = data_file.content == DataFileContent.POSITION_DELETES
    kind = "total-position-deletes" if position else "total-equality-deletes"
    return {"total-delete-files": 1, kind: data_file.record_count, "total-files-size": data_file.file_size_in_bytes}
