"""Self-optimizing on an optimizer: rewrite exactly the files a task names, with Iceberg's own machinery.

For each file group of the task:
- the data files to rewrite are found in the planned snapshot as Iceberg scan tasks (which carry the
  delete files that apply to them), staged with Iceberg's ScanTaskSetManager and read and written by
  Spark the way Iceberg's bin-pack rewrite runner does it; FileRewriteCoordinator hands back the files
  written, uncommitted;
- for the data files whose deletes are rewritten, Spark reads which of their rows the deletes remove
  (Iceberg's `_deleted` metadata column) and each such file gets one position-delete file of its own,
  naming it alone (Amoro turns equality deletes into position deletes this way); on format version 3,
  one deletion vector instead, replacing the vector the file has.
Groups are rewritten concurrently (up to MAX_CONCURRENT_GROUPS Spark jobs, as Iceberg's action runs its
groups), and the position deletes of all groups are found in one Spark job. Then one commit: Iceberg's
RewriteFiles replaces the rewritten data files and the delete files the task removes, validated against
everything committed since the planned snapshot, the new data files keeping that snapshot's sequence number
(so deletes committed meanwhile still apply to them). Files written by a task that cannot commit are
deleted again.

The optimizer trusts no plan blindly: a planned file missing from the planned snapshot, or a delete file
Iceberg applies that the plan did not name, fails the task (the plan and Iceberg disagree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from lakewarden.optimizer.runners import (
    StalePlan,
    deletion_vectors_of,
    rewrite_groups,
    rewrite_positions,
    write_deletion_vectors,
)
from lakewarden.protocol import MAX_LISTED, FileGroupInput, OptimizingInput, OptimizingResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class TaskRevoked(RuntimeError):
    """The server took the task back before it committed (its process was canceled): it commits nothing."""


class PlanMismatch(RuntimeError):
    """The plan names files the planned snapshot does not have as planned."""


def run_optimizing(
    spark: SparkSession,
    table: Any,
    work: OptimizingInput,
    properties: dict[str, str],
    gate: Callable[[], None] | None = None,
) -> OptimizingResult:
    """Rewrite the task's file groups and commit them; `gate` is asked right before the commit (it raises
    when the task may no longer commit), and files written by a task that does not commit are deleted."""
    jvm: Any = spark._jvm
    properties = {
        **properties,
        "lakewarden.optimizing-type": work.type,
        "lakewarden.planned-snapshot-id": str(work.snapshot_id),
    }
    table.refresh()  # Spark's catalog may hand out a cached table older than the plan
    snapshot = table.snapshot(work.snapshot_id) if work.snapshot_id is not None else None
    if snapshot is None:
        raise StalePlan(f"the planned snapshot {work.snapshot_id} is no longer in the table")
    done = _committed_before(table, int(snapshot.snapshotId()), properties, work.branch)
    if done is not None:  # an earlier attempt committed and its report was lost (a server restart): not twice
        return done
    tasks = _scan_tasks(jvm, table, work)
    removed = _delete_files_to_remove(jvm, table, snapshot, set(work.remove_deletes), tasks)
    # a v3 table's position deletes are deletion vectors: a segment's deletes become one vector, replacing the
    # one the segment has
    v3 = int(table.operations().current().formatVersion()) >= 3
    written_data: list[Any] = []
    written_deletes: list[Any] = []
    rewritten: list[Any] = []
    pos_rewritten = 0
    replaced: list[Any] = []  # deletion vectors the new ones replace, beside the delete files the plan removes
    unreduced: dict[str, list[str]] = {}
    clustered: dict[str, list[str]] = {}
    try:
        jobs = [(g, [tasks[p] for p in g.rewrite]) for g in work.groups]
        for group, group_tasks, written in rewrite_groups(spark, table, [(g, t) for g, t in jobs if t]):
            if group.clustering is not None:
                # files of an older spec land in other partitions: clustered again at the next full optimizing
                if int(group_tasks[0].spec().specId()) == int(table.spec().specId()):
                    clustered[group.partition.key] = [str(f.location()) for f in written]
            elif len(written) >= len(group_tasks) and not group.rewrite_pos and not group.deletes:
                unreduced.setdefault(group.partition.key, []).extend(str(f.location()) for f in written)
            written_data += written
            rewritten += [t.file() for t in group_tasks]
        # every group's segments whose deletes are rewritten: read in one Spark job
        positions = [tasks[p] for g in work.groups for p in g.rewrite_pos]
        if positions and v3:
            written_deletes += write_deletion_vectors(spark, table, positions)
            removing = {_identity(f) for f in removed.values()}
            replaced = [d for d in deletion_vectors_of(positions) if _identity(d) not in removing]
            pos_rewritten += len(positions)
        elif positions:
            written_deletes += rewrite_positions(spark, table, positions)
            pos_rewritten += len(positions)
        if gate is not None:
            gate()
        committed = _commit(
            jvm,
            table,
            snapshot,
            rewritten,
            written_data,
            list(removed.values()),
            written_deletes,
            properties,
            replaced,
            work.branch,
        )
    except BaseException as exc:
        if not _commit_state_unknown(exc):
            for f in (*written_data, *written_deletes):
                table.io().deleteFile(f.location())
        raise
    return OptimizingResult(
        files_in=len(rewritten),
        bytes_in=sum(int(f.fileSizeInBytes()) for f in rewritten),
        files_out=len(written_data),
        bytes_out=sum(int(f.fileSizeInBytes()) for f in written_data),
        rewrite_pos_files=pos_rewritten,
        delete_files_removed=len(removed) + len(replaced),
        delete_bytes_removed=sum(_delete_bytes(f) for f in (*removed.values(), *replaced)),
        delete_files_added=len(written_deletes),
        delete_bytes_added=sum(_delete_bytes(f) for f in written_deletes),
        snapshot_id=committed,
        rewritten_files=_paths(rewritten),
        added_files=_paths(written_data),
        removed_delete_files=sorted(removed)[:MAX_LISTED],
        added_delete_files=_paths(written_deletes),
        unreduced=unreduced if committed is not None else {},
        clustered=clustered if committed is not None else {},
    )


def _identity(delete: Any) -> tuple[str, int | None]:
    """What tells delete files apart: deletion vectors share a Puffin file, each at an offset of its own."""
    offset = delete.contentOffset()
    return str(delete.location()), None if offset is None else int(offset)


def _delete_bytes(delete: Any) -> int:
    """A delete file's own bytes: a deletion vector's within its Puffin file."""
    size = delete.contentSizeInBytes()
    return int(size) if size is not None else int(delete.fileSizeInBytes())


_SUMMARY_COUNTS = (
    "deleted-data-files",
    "added-data-files",
    "added-files-size",
    "removed-delete-files",
    "added-delete-files",
)


def _head(table: Any, branch: str | None) -> Any:
    """The snapshot at the head of `branch` (None: main), or None."""
    return table.currentSnapshot() if branch is None else table.snapshot(branch)


def _committed_before(
    table: Any, planned: int, properties: dict[str, str], branch: str | None = None
) -> OptimizingResult | None:
    """The result of an earlier attempt of this task that committed: a snapshot after the planned one, on the
    task's branch, whose summary names this process and task."""
    wanted = {k: properties[k] for k in ("lakewarden.process-id", "lakewarden.task-id")}
    snapshot = _head(table, branch)
    for _ in range(10_000):
        if snapshot is None or int(snapshot.snapshotId()) == planned:
            return None
        summary = snapshot.summary()
        if all(summary.get(k) == v for k, v in wanted.items()):
            count = {k: int(summary.getOrDefault(k, "0")) for k in _SUMMARY_COUNTS}
            return OptimizingResult(
                files_in=count["deleted-data-files"],
                files_out=count["added-data-files"],
                bytes_out=count["added-files-size"],
                delete_files_removed=count["removed-delete-files"],
                delete_files_added=count["added-delete-files"],
                snapshot_id=int(snapshot.snapshotId()),
            )
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    return None


def _paths(files: Iterable[Any]) -> list[str]:
    return sorted(str(f.location()) for f in files)[:MAX_LISTED]


def _scan_tasks(jvm: Any, table: Any, work: OptimizingInput) -> dict[str, Any]:
    """The planned data files as Iceberg scan tasks of the planned snapshot, checked against the plan."""
    planned: dict[str, FileGroupInput] = {p: g for g in work.groups for p in (*g.rewrite, *g.rewrite_pos)}
    if not planned:
        return {}
    expression = jvm.org.apache.iceberg.expressions.ExpressionParser.fromJson(work.filter)
    scan = table.newScan().useSnapshot(work.snapshot_id).filter(expression).ignoreResiduals()
    found: dict[str, Any] = {}
    files = scan.planFiles()
    try:
        iterator = files.iterator()
        while iterator.hasNext():
            task = iterator.next()
            path = str(task.file().location())
            if path in planned:
                found[path] = task
    finally:
        files.close()
    missing = sorted(set(planned) - set(found))
    if missing:
        raise PlanMismatch(f"{len(missing)} planned data file(s) are not in snapshot {work.snapshot_id}: {missing[:3]}")
    for path, task in found.items():
        applied = {str(d.location()) for d in task.deletes()}
        unplanned = applied - set(planned[path].deletes)
        if unplanned:
            raise PlanMismatch(
                f"Iceberg applies delete files to {path} that the plan did not name: {sorted(unplanned)[:3]}"
            )
    return found


def _delete_files_to_remove(
    jvm: Any, table: Any, snapshot: Any, paths: set[str], tasks: dict[str, Any]
) -> dict[str, Any]:
    """The delete files a task removes: those that apply to its data files come with their scan tasks; only
    the others (a last stage's shared ones) are looked up in the snapshot's delete manifests."""
    found: dict[str, Any] = {}
    for task in tasks.values():
        for delete in task.deletes():
            path = str(delete.location())
            if path in paths:
                found[path] = delete
    if len(found) < len(paths):
        found.update(_live_delete_files(jvm, table, snapshot, paths - set(found)))
    return found


def _live_delete_files(jvm: Any, table: Any, snapshot: Any, paths: set[str]) -> dict[str, Any]:
    """The delete files of the planned snapshot named by `paths`, read from its delete manifests."""
    if not paths:
        return {}
    found: dict[str, Any] = {}
    manifests = snapshot.deleteManifests(table.io())
    for i in range(manifests.size()):
        reader = jvm.org.apache.iceberg.ManifestFiles.readDeleteManifest(manifests.get(i), table.io(), table.specs())
        try:
            iterator = reader.iterator()
            while iterator.hasNext():
                delete = iterator.next()
                path = str(delete.location())
                if path in paths:
                    found[path] = delete.copy()
        finally:
            reader.close()
    missing = sorted(paths - set(found))
    if missing:
        raise PlanMismatch(
            f"{len(missing)} delete file(s) to remove are not live in the planned snapshot: {missing[:3]}"
        )
    return found


def _commit(
    jvm: Any,
    table: Any,
    snapshot: Any,
    rewritten: list[Any],
    written: list[Any],
    removed: list[Any],
    added_deletes: list[Any],
    properties: dict[str, str],
    replaced: list[Any] | None = None,
    branch: str | None = None,
) -> int | None:
    """One snapshot (Amoro's UnKeyedTableCommit): the rewritten data files and the removed delete files
    replaced by the new files, validated from the planned snapshot. Iceberg's RewriteFiles cannot add
    delete files without removing one, so then the new position deletes go in a RowDelta of the same
    transaction, which checks that the data files they name still exist. New deletion vectors always go in
    the RowDelta, with the vectors they replace: it also checks that no writer added a vector for one of
    their data files meanwhile (a data file has one at most) and that the replaced ones are still there.
    Both commit to `branch` (None: main) and validate against its history since the planned snapshot."""
    replaced = replaced or []
    if not (rewritten or removed or added_deletes):
        return None
    vectors = any(str(f.format()) == "PUFFIN" for f in added_deletes)
    deletes_in_rewrite = bool(removed) and not vectors
    planned = int(snapshot.snapshotId())
    transaction = table.newTransaction()
    if rewritten or removed:
        rewrite = transaction.newRewrite().validateFromSnapshot(planned).dataSequenceNumber(snapshot.sequenceNumber())
        if branch is not None:
            rewrite = rewrite.toBranch(branch)
        for f in rewritten:
            rewrite = rewrite.deleteFile(f)
        for f in written:
            rewrite = rewrite.addFile(f)
        for f in removed:
            rewrite = rewrite.deleteFile(f)
        if deletes_in_rewrite:
            for f in added_deletes:
                rewrite = rewrite.addFile(f)
        for key, value in properties.items():
            rewrite = rewrite.set(key, value)
        _checked(rewrite.commit)
    if added_deletes and not deletes_in_rewrite:
        delta = transaction.newRowDelta().validateFromSnapshot(planned)
        if branch is not None:
            delta = delta.toBranch(branch)
        referenced = jvm.java.util.ArrayList()
        for f in added_deletes:
            delta = delta.addDeletes(f)
            referenced.add(f.referencedDataFile())
        for f in replaced:
            delta = delta.removeDeletes(f)
        if replaced:
            delta = delta.validateDeletedFiles()
        delta = delta.validateDataFilesExist(referenced)
        for key, value in properties.items():
            delta = delta.set(key, value)
        _checked(delta.commit)
    _checked(transaction.commitTransaction)
    head = _head(table, branch)
    return None if head is None else int(head.snapshotId())


def _checked(commit: Any) -> None:
    """Run a commit; a validation failure means the table changed under the plan (a writer deleted rows of
    a file being rewritten, a delete file to remove is gone): retrying the same files cannot pass."""
    try:
        commit()
    except Exception as exc:
        from lakewarden.optimizer.failures import cause_chain

        for name, message in cause_chain(exc):
            if name == "org.apache.iceberg.exceptions.ValidationException":
                raise StalePlan(f"the table changed since the planned snapshot: {message}") from exc
        raise


def _commit_state_unknown(exc: BaseException) -> bool:
    from lakewarden.optimizer.failures import cause_chain

    return any(name.endswith("CommitStateUnknownException") for name, _ in cause_chain(exc))
