"""lakewarden's own work yields to a writer's commit (`lakewarden.commit.maintenance-yields`).

A writer that planned before one of lakewarden's commits fails its requirement on the branch head. When only
lakewarden committed since its base, the server lands the commit anyway: the partitions whose files lakewarden
removed and the writer names go back to the writer's view, the rest of lakewarden's work stays. Metadata only.
docs/rest-catalog.md gives the rules."""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestEntryStatus,
)
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.maintenance import yield_window
from lakewarden.domain.retention import OWN_COMMIT
from lakewarden.domain.yields import TASK_ID, YIELDED, YIELDED_FILES, YIELDED_TASKS, YIELDED_TO
from lakewarden.metadata.landing import Landing
from lakewarden.metadata.snapshot_changes import (
    TOTALS,
    FileChanges,
    Moved,
    Rebased,
    Where,
    count,
    file_changes,
    own_entries,
    since,
    where,
)

log = logging.getLogger(__name__)
YIELD_WINDOW_PROPERTY = "lakewarden.commit.yield-window"


class PastYieldWindow(Exception):
    """lakewarden's work that a writer's commit names is older than the table's yield window: the bases it
    would put back may be gone."""


@dataclass(frozen=True)
class Yielded(Rebased):
    """A writer's commit moved onto the head: lakewarden's snapshots whose work it undoes (empty when it names
    nothing lakewarden removed and all of that work stays) and the partitions put back."""

    undone: tuple[int, ...] = ()
    partitions: tuple[Where, ...] = ()
    restored: int = 0  # files lakewarden removed that are back in the table


@dataclass
class _OwnWork:
    """The net effect of lakewarden's snapshots since a base: files removed that the base had, files added that
    the head has, and whether any snapshot wrote into partitions other than those it read (a new spec)."""

    removed: dict[str, Moved] = field(default_factory=dict)
    added: dict[str, Moved] = field(default_factory=dict)
    crosses_partitions: bool = False

    @classmethod
    def of(cls, io: FileIO, between: Sequence[Snapshot]) -> _OwnWork:
        work = cls()
        for snapshot in reversed(between):  # oldest first: a file one of them added and a later one removed is gone
            read, wrote = set(), set()
            for manifest, entry in own_entries(io, snapshot):
                path, place = entry.data_file.file_path, where(manifest, entry)
                if entry.status == ManifestEntryStatus.DELETED:
                    read.add(place)
                    if work.added.pop(path, None) is None:
                        work.removed[path] = Moved(entry, place, snapshot)
                else:
                    wrote.add(place)
                    work.added[path] = Moved(entry, place, snapshot)
            work.crosses_partitions |= not wrote <= read
        return work

    def undone(self, undo: AbstractSet[Where], to: str) -> dict[str, str]:
        """The summary fields of a snapshot that undoes the work in `undo`; empty when it undoes nothing."""
        removed: dict[int, list[int]] = {}  # snapshot -> bytes it removed in all, and in `undo`
        for moved in self.removed.values():
            size = moved.entry.data_file.file_size_in_bytes
            counts = removed.setdefault(moved.snapshot.snapshot_id, [0, 0])
            counts[0] += size
            counts[1] += size if moved.where in undo else 0
        snapshots = {m.snapshot.snapshot_id: m.snapshot for m in self.removed.values()}
        undone = sorted(sid for sid, (_, gone) in removed.items() if gone)
        if not undone:
            return {}
        tasks = []
        for sid in undone:
            fields = _summary_fields(snapshots[sid])
            everything, gone = removed[sid]
            tasks.append(f"{fields.get(OWN_COMMIT, '')}.{fields.get(TASK_ID, '')}:{gone / max(everything, 1):.3f}")
        return {
            YIELDED: ",".join(map(str, undone)),
            YIELDED_FILES: str(sum(m.where in undo for m in self.removed.values())),
            YIELDED_TASKS: ",".join(tasks),
            YIELDED_TO: to,
        }

    def matching(self, matches: Callable[[DataFile, int], bool]) -> set[Where]:
        """The partitions of the data files removed here that `matches` (a file, its spec id) may match."""
        places = {
            moved.where
            for moved in self.removed.values()
            if moved.entry.data_file.content == DataFileContent.DATA and matches(moved.entry.data_file, moved.where[0])
        }
        return self._whole_if_crossing(places)

    def _whole_if_crossing(self, places: set[Where]) -> set[Where]:
        if places and self.crosses_partitions:  # its outputs are not where its inputs were: undo it whole
            places |= {moved.where for moved in itertools.chain(self.removed.values(), self.added.values())}
        return places

    def named(self, mine: FileChanges) -> set[Where]:
        """The partitions of the files removed here that the writer's changes name."""
        places = {self.removed[path].where for path in (mine.removed.keys() | mine.targets) if path in self.removed}
        places |= mine.untargeted & {moved.where for moved in self.removed.values()}
        return self._whole_if_crossing(places)


def yield_window_ms(properties: Mapping[str, str]) -> int | None:
    """The table's yield window in milliseconds, or None when lakewarden's work does not yield on this table."""
    try:
        window = yield_window(properties)
    except InvalidField:
        return None  # a value lakewarden cannot read: its evaluation says what is wrong, commits go on as before
    return int(window.total_seconds() * 1000) or None


def yield_to_writer(
    io: FileIO,
    current: TableMetadata,
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
    window_ms: int,
    now_ms: int,
) -> Yielded | None:
    """A writer's data commit moved over lakewarden's own work, or None when this does not apply: a commit of
    another shape, another writer's commit since the writer's base, a format other than 2.

    Each of the writer's snapshots lands on the head as the writer wrote it (its base's files with its changes),
    with lakewarden's work in the partitions it does not name applied again: the files that work removed taken
    out, the files it wrote put in, with their sequence numbers. Raises PastYieldWindow when work to undo is
    older than `window_ms`."""
    shape = _writer_chain(requirements, updates)
    if shape is None or current.format_version != 2:
        return None
    adds, ref_name, assertion = shape
    head_ref = current.refs.get(ref_name)
    first = adds[0].snapshot
    if head_ref is None or first.parent_snapshot_id is None:
        return None
    between, base = since(current, head_ref.snapshot_id, first.parent_snapshot_id)
    if base is None or not between or not all(OWN_COMMIT in _summary_fields(s) for s in between):
        return None
    work = _OwnWork.of(io, between)
    mine = FileChanges()
    for add in adds:
        mine.add(file_changes(io, add.snapshot))
    undo = work.named(mine)
    undone = sorted({m.snapshot.snapshot_id for m in work.removed.values() if m.where in undo})
    stale = [s for s in between if s.snapshot_id in undone and now_ms - s.timestamp_ms > window_ms]
    if stale:
        raise PastYieldWindow(
            f"this commit names files that lakewarden's snapshot {stale[0].snapshot_id} removed, which is older "
            f"than the table's {YIELD_WINDOW_PROPERTY} ({window_ms // 1000} s): refresh the table and retry"
        )
    kept_out = {path: m for path, m in work.removed.items() if m.where not in undo}
    kept_in = [m for m in work.added.values() if m.where not in undo]
    restored = sum(m.where in undo for m in work.removed.values())
    head = between[0]
    landing = Landing(io, current, [a.snapshot for a in adds], base, head)

    fields = work.undone(undo, "commit")

    def summarize(snapshot: Snapshot, delta: Mapping[str, int]) -> Summary | None:
        return _summary(snapshot.summary, delta, fields)

    landed = {s.snapshot_id: s for s in landing.write(head.snapshot_id, kept_out, kept_in, summarize)}
    if undone:
        log.info("lakewarden's snapshots %s yield to a writer's commit", ",".join(map(str, undone)))
    return Yielded(
        requirements=[
            AssertRefSnapshotId(ref=ref_name, snapshot_id=head.snapshot_id) if r is assertion else r
            for r in requirements
        ],
        updates=[
            AddSnapshotUpdate(snapshot=landed[u.snapshot.snapshot_id]) if isinstance(u, AddSnapshotUpdate) else u
            for u in updates
        ],
        written=landing.written,
        undone=tuple(undone),
        partitions=tuple(sorted(undo, key=repr)),
        restored=restored,
    )


def yield_to_planned_write(
    io: FileIO,
    current: TableMetadata,
    snapshot_id: int,
    matches: Callable[[DataFile, int], bool],
    window_ms: int,
    now_ms: int,
    writer: str = "unknown",
) -> Yielded | None:
    """lakewarden's work undone for a row-level write a client planned on an older snapshot, before it commits;
    None when there is nothing to undo (its scan names no file lakewarden removed since that snapshot, someone
    else committed since, the work is older than `window_ms`).

    Iceberg's Java client refreshes the table and checks its operation against every snapshot since the one it
    planned on before it sends its commit: a snapshot since then that removed a file it names fails it on the
    client, and the server never sees the commit. So the undo comes first, when its scan is reported: the branch
    goes back to the planned snapshot and lakewarden's work in the partitions of the files the scan may read
    (`matches`: a file and its spec id) is dropped; the rest is committed again on top, in one snapshot of
    lakewarden's."""
    found = _own_branch(current, snapshot_id) if current.format_version == 2 else None
    if found is None:
        return None
    ref_name, ref, between, base = found
    work = _OwnWork.of(io, between)
    undo = work.matching(matches)
    undone = sorted({m.snapshot.snapshot_id for m in work.removed.values() if m.where in undo})
    if not undone:
        return None
    if any(s.snapshot_id in undone and now_ms - s.timestamp_ms > window_ms for s in between):
        log.info("a write planned on snapshot %d names lakewarden's work older than the yield window", snapshot_id)
        return None
    head = between[0]
    kept_out = {path: m for path, m in work.removed.items() if m.where not in undo}
    kept_in = [m for m in work.added.values() if m.where not in undo]
    restored = sum(m.where in undo for m in work.removed.values())
    assertion = AssertRefSnapshotId(ref=ref_name, snapshot_id=head.snapshot_id)
    assert isinstance(current, TableMetadataV2)  # _own_branch answers format version 2 only

    def moved_to(target: int) -> SetSnapshotRefUpdate:
        return SetSnapshotRefUpdate(
            ref_name=ref_name,
            type=SnapshotRefType.BRANCH,
            snapshot_id=target,
            max_ref_age_ms=ref.max_ref_age_ms,
            max_snapshot_age_ms=ref.max_snapshot_age_ms,
            min_snapshots_to_keep=ref.min_snapshots_to_keep,
        )

    # a snapshot of lakewarden's on the planned one even when no work is kept: it says what yielded, and the
    # writer's check passes over it (it removes nothing the writer names)
    redo_id = uuid.uuid4().int & ((1 << 63) - 1)
    kept = kept_in or [m for m in work.removed.values() if m.where in undo]  # the processes it is lakewarden's for
    processes = sorted({_summary_fields(m.snapshot).get(OWN_COMMIT, "") for m in kept} - {""})
    redo = Snapshot(
        snapshot_id=redo_id,
        parent_snapshot_id=base.snapshot_id,
        sequence_number=0,  # set by the landing
        timestamp_ms=now_ms,
        manifest_list=base.manifest_list,
        summary=Summary(Operation.REPLACE, **{**_totals_of(base), OWN_COMMIT: ",".join(processes)}),
        schema_id=current.current_schema_id,
    )
    landing = Landing(io, current, [redo], base, head)
    fields = work.undone(undo, writer)
    (landed,) = landing.write(
        base.snapshot_id, kept_out, kept_in, lambda s, delta: _summary(s.summary, delta, fields), removed_by=redo_id
    )
    log.info("lakewarden's snapshots %s yield to a write planned on %d", ",".join(map(str, undone)), snapshot_id)
    return Yielded(
        requirements=[assertion],
        updates=[AddSnapshotUpdate(snapshot=landed), moved_to(redo_id)],
        written=landing.written,
        undone=tuple(undone),
        partitions=tuple(sorted(undo, key=repr)),
        restored=restored,
    )


def _own_branch(current: TableMetadata, snapshot_id: int) -> tuple[str, SnapshotRef, list[Snapshot], Snapshot] | None:
    """A branch whose commits since `snapshot_id` are all lakewarden's, with them (newest first) and that snapshot."""
    for name, ref in current.refs.items():
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            continue
        between, base = since(current, ref.snapshot_id, snapshot_id)
        if base is not None and between and all(OWN_COMMIT in _summary_fields(s) for s in between):
            return name, ref, between, base
    return None


def _totals_of(snapshot: Snapshot) -> dict[str, str]:
    fields = _summary_fields(snapshot)
    return {key: fields[key] for key in TOTALS if key in fields}


def _summary(summary: Summary | None, delta: Mapping[str, int], fields: Mapping[str, str]) -> Summary | None:
    """A landed snapshot's summary: its totals with lakewarden's kept work in them, and what was undone (`fields`
    when anything was)."""
    if summary is None:
        return None
    changed = dict(summary.additional_properties)
    for total in TOTALS:
        value = count(summary, total)
        if value is None:
            changed.pop(total, None)
        else:
            changed[total] = str(value + delta[total])
    if fields.get(YIELDED):
        changed |= fields
    return Summary(summary.operation, **changed)


def _writer_chain(
    requirements: Sequence[TableRequirement], updates: Sequence[TableUpdate]
) -> tuple[list[AddSnapshotUpdate], str, AssertRefSnapshotId] | None:
    """New snapshots each on the one before (pyiceberg's delete may make two), moved onto one branch whose head
    the client asserted to be the first one's parent."""
    adds = [u for u in updates if isinstance(u, AddSnapshotUpdate)]
    if not adds or any(b.snapshot.parent_snapshot_id != a.snapshot.snapshot_id for a, b in itertools.pairwise(adds)):
        return None
    ids = {a.snapshot.snapshot_id for a in adds}
    refs = [u for u in updates if isinstance(u, SetSnapshotRefUpdate)]
    if not refs or refs[-1].snapshot_id != adds[-1].snapshot.snapshot_id:
        return None
    if any(
        r.ref_name != refs[-1].ref_name or r.type != SnapshotRefType.BRANCH or r.snapshot_id not in ids for r in refs
    ):
        return None
    assertions = [r for r in requirements if isinstance(r, AssertRefSnapshotId) and r.ref == refs[-1].ref_name]
    if len(assertions) != 1 or assertions[0].snapshot_id != adds[0].snapshot.parent_snapshot_id:
        return None
    return adds, refs[-1].ref_name, assertions[0]


def _summary_fields(snapshot: Snapshot) -> Mapping[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}
