"""A writer's snapshots, or lakewarden's redone work, written onto a new parent (metadata/yielding.py): their
manifests without the files of the work kept (marked removed, or left out where an ancestor removed them), the
kept files listed with the sequence numbers they were written with, new sequence numbers and manifest lists.
Metadata only: nothing is read but manifests."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadataV2
from pyiceberg.table.snapshots import Snapshot, Summary

from lakewarden._compat.pyiceberg import delete_manifest_writer
from lakewarden.metadata.manifests import entries as manifest_entries
from lakewarden.metadata.manifests import manifests as snapshot_manifests
from lakewarden.metadata.snapshot_changes import TOTALS, Moved, file_totals, renumbered


class Landing:
    """Snapshots rewritten onto a new parent: their manifests without the files of `kept_out` (marked removed by
    `removed_by`, or left out when an ancestor already removed them), one manifest per spec and content of
    `kept_in`, new sequence numbers and manifest lists."""

    def __init__(
        self, io: FileIO, current: TableMetadataV2, snapshots: Sequence[Snapshot], base: Snapshot, head: Snapshot
    ) -> None:
        self.io, self.current, self.snapshots = io, current, snapshots
        self.sequences = {s.snapshot_id: current.last_sequence_number + 1 + i for i, s in enumerate(snapshots)}
        self.originals = {s.snapshot_id: s for s in snapshots}
        # only the base's manifests that lakewarden's work replaced, and the landing snapshots' own, can list a
        # file that work removed
        kept = {m.manifest_path for m in snapshot_manifests(io, head)}
        self.replaced = {m.manifest_path for m in snapshot_manifests(io, base)} - kept
        self.written: list[str] = []
        self._filtered: dict[str, ManifestFile | None] = {}
        self._prefix = f"{current.location.rstrip('/')}/metadata/{uuid.uuid4()}"

    def write(
        self,
        parent: int,
        kept_out: Mapping[str, Moved],
        kept_in: Sequence[Moved],
        summarize: Callable[[Snapshot, Mapping[str, int]], Summary | None],
        removed_by: int | None = None,
    ) -> list[Snapshot]:
        first = self.snapshots[0]
        status = ManifestEntryStatus.EXISTING if removed_by is None else ManifestEntryStatus.ADDED
        extra = self._kept_manifests(kept_in, first.snapshot_id, self.sequences[first.snapshot_id], status)
        # no landing snapshot removed a file of the kept work (its partition would be undone): each of them sees
        # the same change in totals
        delta = dict.fromkeys(TOTALS, 0)
        for sign, moves in ((1, kept_in), (-1, kept_out.values())):
            for moved in moves:
                for key, value in file_totals(moved.entry.data_file).items():
                    delta[key] += sign * value
        landed: list[Snapshot] = []
        stamp = self.current.last_updated_ms + 1
        for snapshot in self.snapshots:
            sequence = self.sequences[snapshot.snapshot_id]
            listed = (self._filtered_manifest(m, kept_out.keys(), removed_by) for m in self._listed(snapshot))
            manifests = [m for m in listed if m is not None]
            location = f"{self._prefix}-snap-{snapshot.snapshot_id}.avro"
            self.written.append(location)
            output = self.io.new_output(location)
            with write_manifest_list(2, output, snapshot.snapshot_id, parent, sequence, "deflate") as out:
                out.add_manifests(manifests + extra)
            stamp = max(snapshot.timestamp_ms, stamp)
            changed = {
                "parent_snapshot_id": parent,
                "sequence_number": sequence,
                "manifest_list": location,
                "timestamp_ms": stamp,
                "summary": summarize(snapshot, delta),
            }
            landed.append(snapshot.model_copy(update=changed))
            parent, stamp = snapshot.snapshot_id, stamp + 1
        return landed

    def _listed(self, snapshot: Snapshot) -> list[ManifestFile]:
        return [
            renumbered(m, self.originals[m.added_snapshot_id], self.sequences[m.added_snapshot_id])
            if m.added_snapshot_id in self.sequences
            else m
            for m in snapshot_manifests(self.io, snapshot)
        ]

    def _filtered_manifest(
        self, manifest: ManifestFile, kept_out: AbstractSet[str], removed_by: int | None
    ) -> ManifestFile | None:
        """The manifest without the files lakewarden's kept work removed; None when nothing is left in it."""
        may_list = manifest.manifest_path in self.replaced or manifest.added_snapshot_id in self.sequences
        if not kept_out or not may_list:
            return manifest
        if manifest.manifest_path in self._filtered:
            return self._filtered[manifest.manifest_path]
        entries = manifest_entries(self.io, manifest, discard_deleted=False)
        gone = [e.status != ManifestEntryStatus.DELETED and e.data_file.file_path in kept_out for e in entries]
        if not any(gone):
            result: ManifestFile | None = manifest
        elif removed_by is None:
            rest = [e for e, out in zip(entries, gone, strict=True) if not out]
            result = self._manifest(manifest, rest) if rest else None
        else:
            marked = [
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.DELETED,
                    snapshot_id=removed_by,
                    sequence_number=e.sequence_number,
                    file_sequence_number=e.file_sequence_number,
                    data_file=e.data_file,
                )
                if out
                else e
                for e, out in zip(entries, gone, strict=True)
            ]
            result = self._manifest(manifest, marked, removed_by)
        self._filtered[manifest.manifest_path] = result
        return result

    def _manifest(
        self, like: ManifestFile, entries: Sequence[ManifestEntry], snapshot_id: int | None = None
    ) -> ManifestFile:
        """`entries` in a new manifest standing where `like` stood: its spec, content, snapshot and sequence (a
        manifest of `snapshot_id` with that snapshot's sequence number, when given)."""
        mine = like.added_snapshot_id in self.sequences
        owner = snapshot_id if snapshot_id is not None else like.added_snapshot_id
        assert owner is not None  # format version 2 manifests name their snapshot
        with self._writer(like.partition_spec_id, like.content, owner) as out:
            for entry in entries:
                if mine and entry.status == ManifestEntryStatus.ADDED:
                    entry.sequence_number = None  # type: ignore[assignment]  # inherit the landed sequence number
                    entry.file_sequence_number = None  # type: ignore[assignment]
                elif snapshot_id is not None and entry.status == ManifestEntryStatus.ADDED:
                    entry.status = ManifestEntryStatus.EXISTING  # added by an older snapshot
                out.add_entry(entry)
        written = out.to_manifest_file()
        sequence = self.sequences[snapshot_id] if snapshot_id is not None else like.sequence_number
        written.sequence_number = sequence
        live = [e.sequence_number for e in entries if e.status != ManifestEntryStatus.DELETED]
        written.min_sequence_number = min((s if s is not None else sequence for s in live), default=sequence)
        return written

    def _kept_manifests(
        self, kept_in: Sequence[Moved], snapshot_id: int, sequence: int, status: ManifestEntryStatus
    ) -> list[ManifestFile]:
        """lakewarden's kept files with the data sequence numbers they were written with: existing files under
        an ancestor that added them, or added again by `snapshot_id`."""
        groups: dict[tuple[int, ManifestContent], list[ManifestEntry]] = {}
        for moved in kept_in:
            data = moved.entry.data_file.content == DataFileContent.DATA
            content = ManifestContent.DATA if data else ManifestContent.DELETES
            existing = status == ManifestEntryStatus.EXISTING
            groups.setdefault((moved.where[0], content), []).append(
                ManifestEntry.from_args(
                    status=status,
                    snapshot_id=moved.entry.snapshot_id if existing else snapshot_id,
                    sequence_number=moved.entry.sequence_number,
                    file_sequence_number=moved.entry.file_sequence_number if existing else None,
                    data_file=moved.entry.data_file,
                )
            )
        found = []
        for (spec_id, content), entries in groups.items():
            with self._writer(spec_id, content, snapshot_id) as out:
                for entry in entries:
                    out.add_entry(entry)
            written = out.to_manifest_file()
            written.sequence_number = sequence
            written.min_sequence_number = min(e.sequence_number or sequence for e in entries)
            found.append(written)
        return found

    def _writer(self, spec_id: int, content: ManifestContent, snapshot_id: int) -> ManifestWriter:
        location = f"{self._prefix}-m{len(self.written)}.avro"
        self.written.append(location)
        spec, schema, output = self.current.specs()[spec_id], self.current.schema(), self.io.new_output(location)
        if content == ManifestContent.DELETES:
            return delete_manifest_writer(spec, schema, output, snapshot_id, "deflate")
        return write_manifest(2, spec, schema, output, snapshot_id, "deflate")
