"""Self-optimizing on an optimizer: rewrite exactly the files a task names, with Iceberg's own machinery.

Each file group's data files are found in the planned snapshot as Iceberg scan tasks and rewritten as Iceberg's
bin-pack runner does; files whose deletes are rewritten get one position-delete file (or deletion vector) each.
One RewriteFiles commit, validated against everything since the planned snapshot, or the files staged for the
process's commit task. The per-file bookkeeping runs in Java (PlannedFiles, PlannedRewrite), a py4j call per task
or group. A plan that disagrees with the snapshot fails its task. docs/self-optimizing.md describes the path."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakewarden.optimizer.runners import (
    StalePlan,
    rewrite_groups,
    rewrite_positions,
    write_deletion_vectors,
)
from lakewarden.protocol.inputs import OptimizingInput, StagedFiles
from lakewarden.protocol.results import MAX_FILES, OptimizingResult
from lakewarden.spark.classes import java_class

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
    when the task may no longer commit), and files written by a task that does not commit are deleted.
    `table` is as its catalog has it now (the executor refreshed it)."""
    jvm: Any = spark._jvm
    properties = {
        **properties,
        "lakewarden.optimizing-type": work.type,
        "lakewarden.planned-snapshot-id": str(work.snapshot_id),
    }
    snapshot = table.snapshot(work.snapshot_id) if work.snapshot_id is not None else None
    if snapshot is None:
        raise StalePlan(f"the planned snapshot {work.snapshot_id} is no longer in the table")
    if work.commit_staged:
        return _commit_staged(jvm, table, snapshot, work, properties, gate)
    if not work.stage_only:
        done = _committed_before(table, int(snapshot.snapshotId()), properties, work.branch)
        if done is not None:  # an earlier attempt committed and its report was lost (a server restart): not twice
            return done
    plan = _planned(jvm, table, snapshot, work)
    unreduced: dict[str, list[str]] = {}
    clustered: dict[str, list[str]] = {}
    committed: int | None = None
    try:
        jobs = [(i, g) for i, g in enumerate(work.groups) if g.rewrite]
        written = rewrite_groups(spark, table, plan, [g for _, g in jobs])
        current_spec = int(table.spec().specId())
        for index, group in jobs:
            paths = written[index]
            if group.clustering is not None:
                # files of an older spec land in other partitions: clustered again at the next full optimizing
                if int(plan.specId(index)) == current_spec:
                    clustered[group.partition.key] = paths
            elif len(paths) >= len(group.rewrite) and not group.rewrite_pos and not group.deletes:
                unreduced.setdefault(group.partition.key, []).extend(paths)
        # every group's segments whose deletes are rewritten: read in one Spark job; a v3 table's position
        # deletes are deletion vectors, each replacing the one its segment has
        if any(g.rewrite_pos for g in work.groups):
            positions = plan.positionTasks()
            if int(table.operations().current().formatVersion()) >= 3:
                plan.rewrotePositions(write_deletion_vectors(spark, table, positions), True)
            else:
                plan.rewrotePositions(rewrite_positions(spark, table, positions, plan.task), False)
        if work.stage_only:  # the process commits: the files are listed by its commit
            return OptimizingResult(
                **json.loads(plan.summary(0)),
                unreduced=unreduced,
                clustered=clustered,
                staged=StagedFiles.model_validate_json(plan.staged()),
            )
        if gate is not None:
            gate()
        if plan.changes():
            committed = _checked(lambda: plan.commit(properties, work.branch))
    except BaseException as exc:
        if not _commit_state_unknown(exc):
            plan.deleteWritten()
        _raise_mismatch(plan, exc)
        raise
    yielded = json.loads(plan.yieldedGroups())
    if yielded:  # a writer changed these groups' files meanwhile: what they wrote is not the partition's
        left_out = {work.groups[i].partition.key for i in yielded}
        unreduced = {k: v for k, v in unreduced.items() if k not in left_out}
        clustered = {k: v for k, v in clustered.items() if k not in left_out}
    return OptimizingResult(
        **json.loads(plan.summary(MAX_FILES)),
        snapshot_id=committed,
        unreduced=unreduced if committed is not None else {},
        clustered=clustered if committed is not None else {},
        groups_yielded=len(yielded),
    )


def _commit_staged(
    jvm: Any,
    table: Any,
    snapshot: Any,
    work: OptimizingInput,
    properties: dict[str, str],
    gate: Callable[[], None] | None,
) -> OptimizingResult:
    """The process's one commit: the files its tasks staged replace the files of their groups (all in `work`),
    with the delete files the tasks removed and shared, validated from the planned snapshot. When the table
    changed under the plan the staged files are deleted (no retry can commit them); after any other failure
    they stay for the retry."""
    done = _committed_before(table, int(snapshot.snapshotId()), properties, work.branch)
    if done is not None:
        return done.model_copy(update={"process_commit": True})
    plan = _planned(jvm, table, snapshot, work)
    plan.restage((work.staged or StagedFiles()).model_dump_json())
    committed: int | None = None
    try:
        if gate is not None:
            gate()  # the process was canceled before its commit: nobody commits what its tasks staged
        if plan.changes():
            committed = _checked(lambda: plan.commit(properties, work.branch))
    except Exception as exc:
        if isinstance(exc, (StalePlan, TaskRevoked)):
            plan.deleteWritten()
        _raise_mismatch(plan, exc)
        raise
    return OptimizingResult(
        **json.loads(plan.summary(MAX_FILES)),
        snapshot_id=committed,
        process_commit=True,
        groups_yielded=len(json.loads(plan.yieldedGroups())),
    )


def _planned(jvm: Any, table: Any, snapshot: Any, work: OptimizingInput) -> Any:
    """The task's planned files as Iceberg scan tasks of the planned snapshot, checked against the plan, with
    the delete files it removes (lakewarden's PlannedRewrite: per file, where py4j would cost round trips)."""
    try:
        return java_class(jvm, "io.lakewarden.iceberg.PlannedRewrite").of(table, snapshot, work.model_dump_json())
    except Exception as exc:
        mismatch = _mismatch(exc)
        if mismatch is not None:
            raise mismatch from exc
        raise


def _mismatch(exc: BaseException) -> PlanMismatch | None:
    """Java's refusal of a plan (PlanMismatchException) among an error's causes, as a PlanMismatch."""
    from lakewarden.optimizer.failures import cause_chain

    for name, message in cause_chain(exc):
        if name == "io.lakewarden.iceberg.PlanMismatchException":
            return PlanMismatch(message)
    return None


def _raise_mismatch(plan: Any, failure: BaseException) -> None:
    """After a task failed: a plan whose files were taken as it describes them (unchecked, for speed) is checked
    against its snapshot now, and raises PlanMismatch when the snapshot disagrees, whatever Spark or the commit
    made of it. A revoked task, or a check that cannot run, leaves the failure as it was."""
    if isinstance(failure, TaskRevoked) or not isinstance(failure, Exception):
        return
    try:
        plan.verify()
    except Exception as exc:
        mismatch = _mismatch(exc)
        if mismatch is not None:
            raise mismatch from failure


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


def _checked(commit: Callable[[], int | None]) -> int | None:
    """Run a commit; a validation failure means the table changed under the plan (a writer deleted rows of
    a file being rewritten, a delete file to remove is gone): retrying the same files cannot pass."""
    try:
        return commit()
    except Exception as exc:
        from lakewarden.optimizer.failures import cause_chain

        for name, message in cause_chain(exc):
            if name == "org.apache.iceberg.exceptions.ValidationException":
                raise StalePlan(f"the table changed since the planned snapshot: {message}") from exc
        raise


def _commit_state_unknown(exc: BaseException) -> bool:
    from lakewarden.optimizer.failures import cause_chain

    return any(name.endswith("CommitStateUnknownException") for name, _ in cause_chain(exc))
