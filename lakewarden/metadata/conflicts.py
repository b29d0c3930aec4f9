"""Conflict strategies for commits to internal tables, chosen per table by `lakewarden.commit.conflict-strategy`.

`iceberg` (default): the requirements the client sent must hold, as the spec says. `partition` and `file` (LAS
MetaServer's checks): a data commit whose only failed requirement is its branch head is compared with the commits
since its base, by partition or by file; with no overlap it is rebased onto the head on the server and lands
without a client retry, else it gets 409 naming what changed. Format-version 3 tables and multi-table transactions
keep `iceberg`. Before any of them, lakewarden's own work yields to a writer (yielding.py). docs/rest-catalog.md
gives the rules."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile, write_manifest_list
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from lakewarden.domain.errors import CommitFailed, InvalidField
from lakewarden.domain.optimizing_config import OptimizingConfig, optimizing_property
from lakewarden.metadata.manifests import entries as manifest_entries
from lakewarden.metadata.manifests import manifests as snapshot_manifests
from lakewarden.metadata.snapshot_changes import TOTALS, Rebased, count, file_changes, renumbered, since
from lakewarden.metadata.yielding import PastYieldWindow, yield_to_writer, yield_window_ms

log = logging.getLogger(__name__)
CONFLICT_STRATEGY = "lakewarden.commit.conflict-strategy"
STRATEGIES = ("iceberg", "partition", "file")


class PartitionConflict(Exception):
    """Another commit changed a partition this commit changes, since this commit's base snapshot."""


def conflict_strategy(properties: Mapping[str, str]) -> str:
    """The table's strategy; ValueError names the property when its value is not one of STRATEGIES."""
    value = properties.get(CONFLICT_STRATEGY, "iceberg").strip().lower()
    if value not in STRATEGIES:
        raise ValueError(f"{CONFLICT_STRATEGY} must be one of {', '.join(STRATEGIES)}, not {value!r}")
    return value


def check_properties(properties: Mapping[str, str], base: Mapping[str, str] | None = None) -> None:
    """A table's properties as lakewarden reads them (its conflict strategy, its self-optimizing configuration),
    checked: a 400 naming the property. The self-optimizing ones are checked when the commit sets or changes one
    (`base` the properties before it), so a table that already holds a value lakewarden cannot read (written
    through another catalog) still takes its writers' commits; its evaluation says what is wrong."""
    try:
        conflict_strategy(properties)
    except ValueError as exc:
        raise InvalidField(CONFLICT_STRATEGY, str(exc)) from exc
    changed = {k for k, v in properties.items() if base is None or base.get(k) != v}
    if any(optimizing_property(k) for k in changed):
        OptimizingConfig.of(properties)


def _has_live_files(manifest: ManifestFile) -> bool:
    """Whether a manifest lists files a table still has (added or existing ones), by its counts; unknown
    counts count as live."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added is None or existing is None or added + existing > 0


def rebase_on_partitions(
    io: FileIO,
    current: TableMetadata,
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
    strategy: str = "partition",
) -> Rebased | None:
    """The commit rebased onto its branch head, or None when it is not a data commit that can be rebased.

    Raises PartitionConflict when a commit since its base snapshot changed what this one depends on: a
    partition it changes (`partition`), or a file it removes or its position deletes point at (`file`)."""
    shape = _data_commit(requirements, updates)
    if shape is None or current.format_version != 2:
        return None
    add, ref_name, assertion = shape
    snapshot = add.snapshot
    head_ref = current.refs.get(ref_name)
    if head_ref is None:
        return None
    # a commit to a branch that had no snapshot yet (the first append of a table) has every snapshot since
    between, base = since(current, head_ref.snapshot_id, snapshot.parent_snapshot_id)
    if base is None and snapshot.parent_snapshot_id is not None:
        raise PartitionConflict(
            f"the commit's base snapshot {snapshot.parent_snapshot_id} is no longer an ancestor of {ref_name!r}"
        )
    if strategy == "file":
        _check_files(io, snapshot, between)
    else:
        mine = _touched(io, snapshot)
        for other in between:
            overlap = mine.keys() & _touched(io, other).keys()
            if overlap:
                where = ", ".join(sorted(_describe(current, mine[key]) for key in overlap)[:5])
                raise PartitionConflict(
                    f"partition conflict ({CONFLICT_STRATEGY}=partition): {where} changed by snapshot "
                    f"{other.snapshot_id} since this commit's base snapshot {snapshot.parent_snapshot_id}"
                )
    head = current.snapshot_by_id(head_ref.snapshot_id)
    assert head is not None
    own = snapshot_manifests(io, snapshot)
    base_manifests = snapshot_manifests(io, base) if base is not None else []
    replaced = {m.manifest_path for m in base_manifests} - {m.manifest_path for m in own}
    head_manifests = snapshot_manifests(io, head)
    # a manifest of deleted entries only is dropped by the next commit of any writer (Java and pyiceberg alike):
    # two writers dropping the same one do not conflict
    live = {m.manifest_path for m in base_manifests if m.manifest_path in replaced and _has_live_files(m)}
    if not live <= {m.manifest_path for m in head_manifests}:
        raise PartitionConflict("manifests this commit rewrote were rewritten by another commit meanwhile")

    sequence = current.last_sequence_number + 1
    new = [renumbered(m, snapshot, sequence) for m in own if m.added_snapshot_id == snapshot.snapshot_id]
    kept = [m for m in head_manifests if m.manifest_path not in replaced]
    location = f"{current.location.rstrip('/')}/metadata/snap-{snapshot.snapshot_id}-rebased-{uuid.uuid4()}.avro"
    with write_manifest_list(
        2, io.new_output(location), snapshot.snapshot_id, head.snapshot_id, sequence, "deflate"
    ) as writer:
        writer.add_manifests(new + kept)
    rebased = snapshot.model_copy(
        update={
            "parent_snapshot_id": head.snapshot_id,
            "sequence_number": sequence,
            "manifest_list": location,
            "timestamp_ms": max(snapshot.timestamp_ms, current.last_updated_ms + 1, int(time.time() * 1000)),
            "summary": _summary(snapshot, base, head),
        }
    )
    return Rebased(
        requirements=[
            AssertRefSnapshotId(ref=ref_name, snapshot_id=head.snapshot_id) if r is assertion else r
            for r in requirements
        ],
        updates=[AddSnapshotUpdate(snapshot=rebased) if u is add else u for u in updates],
        written=[location],
    )


def _data_commit(
    requirements: Sequence[TableRequirement], updates: Sequence[TableUpdate]
) -> tuple[AddSnapshotUpdate, str, AssertRefSnapshotId] | None:
    """One new snapshot, moved onto one branch whose head the client asserted to be the snapshot's parent."""
    adds = [u for u in updates if isinstance(u, AddSnapshotUpdate)]
    if len(adds) != 1:
        return None
    snapshot = adds[0].snapshot
    refs = [u for u in updates if isinstance(u, SetSnapshotRefUpdate) and u.snapshot_id == snapshot.snapshot_id]
    if len(refs) != 1 or refs[0].type != SnapshotRefType.BRANCH:
        return None
    assertions = [r for r in requirements if isinstance(r, AssertRefSnapshotId) and r.ref == refs[0].ref_name]
    if len(assertions) != 1 or assertions[0].snapshot_id != snapshot.parent_snapshot_id:
        return None
    return adds[0], refs[0].ref_name, assertions[0]


def _touched(io: FileIO, snapshot: Snapshot) -> dict[tuple[int, tuple[Any, ...]], tuple[int, Any]]:
    """The partitions in which the snapshot added or removed files: (spec, values) -> (spec, record)."""
    touched: dict[tuple[int, tuple[Any, ...]], tuple[int, Any]] = {}
    for manifest in snapshot_manifests(io, snapshot):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue  # carried over unchanged from the parent
        for entry in manifest_entries(io, manifest, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id or entry.status == ManifestEntryStatus.EXISTING:
                continue
            record = entry.data_file.partition
            values = tuple(record[i] for i in range(len(record)))
            touched.setdefault((manifest.partition_spec_id, values), (manifest.partition_spec_id, record))
    if len({spec for spec, _ in touched}) > 1:  # specs evolved: partitions of different specs may overlap
        return {(-1, ()): (-1, None)} | touched
    return touched


def _check_files(io: FileIO, snapshot: Snapshot, between: Sequence[Snapshot]) -> None:
    """The `file` strategy's test (see the module's docstring); raises PartitionConflict naming the file."""
    mine = file_changes(io, snapshot)
    for other in between:
        theirs = file_changes(io, other)
        gone = theirs.removed
        clash = sorted(set(mine.removed) & gone.keys()) or sorted(mine.targets & gone.keys())
        if not clash and mine.untargeted:
            clash = sorted(path for path, where in gone.items() if where in mine.untargeted)
        if clash:
            raise PartitionConflict(
                f"file conflict ({CONFLICT_STRATEGY}=file): {clash[0]}"
                f"{f' and {len(clash) - 1} more' if len(clash) > 1 else ''} removed by snapshot "
                f"{other.snapshot_id} since this commit's base snapshot {snapshot.parent_snapshot_id}"
            )


def _describe(current: TableMetadata, touched: tuple[int, Any]) -> str:
    spec_id, record = touched
    spec = current.specs().get(spec_id)
    if spec is None or record is None or not spec.fields:
        return "the table's only partition" if spec is not None and not spec.fields else "partitions of several specs"
    return f"partition {spec.partition_to_path(record, current.schema())}"


def _summary(snapshot: Snapshot, base: Snapshot | None, head: Snapshot) -> Summary | None:
    """The commit's summary with its totals moved onto the head: head + (commit - base)."""
    if snapshot.summary is None:
        return None
    fields = dict(snapshot.summary.additional_properties)
    for total in TOTALS:
        values = [count(s.summary, total) if s is not None else 0 for s in (snapshot, base, head)]
        if None in values:
            fields.pop(total, None)  # unknown on one side: leave it out rather than state a wrong total
        else:
            mine, before, now = (v or 0 for v in values)
            fields[total] = str(now + mine - before)
    return Summary(snapshot.summary.operation, **fields)


def checked_updates(
    io: FileIO,
    base: TableMetadata,
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
    single: bool,
    label: str,
    rebase: bool = True,
) -> tuple[Sequence[TableUpdate], list[str]]:
    """The commit's requirements checked against `base`; when they fail, lakewarden's own work yields to the
    commit (yielding.py), and a single table's commit is rebased under the table's conflict strategy. Without
    `rebase` nothing is read or written: a failed requirement is a CommitFailed at once.

    Returns the updates to apply (rebased onto the branch head where the
    `partition` strategy allows it) and the files written for them; raises CommitFailed."""
    try:
        for requirement in requirements:
            requirement.validate(base)
        return updates, []
    except CommitFailedException as exc:
        if not rebase:
            raise CommitFailed(f"{label}{exc}") from exc
        failure = exc
    window = yield_window_ms(base.properties)
    if window is not None:
        try:
            yielded = yield_to_writer(io, base, requirements, updates, window, int(time.time() * 1000))
        except PastYieldWindow as exc:
            raise CommitFailed(f"{label}{exc}") from exc
        if yielded is not None:
            return _validated(io, base, yielded, "lakewarden's work yielded to the commit")
    if not single:
        raise CommitFailed(f"{label}{failure}") from failure
    try:
        strategy = conflict_strategy(base.properties)
    except ValueError as exc:
        raise InvalidField(CONFLICT_STRATEGY, str(exc)) from exc
    if strategy == "iceberg":
        raise CommitFailed(str(failure)) from failure
    try:
        rebased = rebase_on_partitions(io, base, requirements, updates, strategy)
    except PartitionConflict as exc:
        raise CommitFailed(str(exc)) from exc
    if rebased is None:
        raise CommitFailed(str(failure)) from failure
    return _validated(io, base, rebased, f"commit rebased onto the branch head ({strategy} strategy: no conflict)")


def _validated(io: FileIO, base: TableMetadata, rebased: Rebased, what: str) -> tuple[Sequence[TableUpdate], list[str]]:
    """A rebased commit's updates, once its other requirements hold too (else a real conflict: CommitFailed)."""
    try:
        for requirement in rebased.requirements:
            requirement.validate(base)
    except CommitFailedException as exc:
        for path in rebased.written:
            with contextlib.suppress(OSError):
                io.delete(path)
        raise CommitFailed(str(exc)) from exc
    log.info("%s: %s", what, ", ".join(rebased.written))
    return rebased.updates, rebased.written
