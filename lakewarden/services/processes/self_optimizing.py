"""Self-optimizing as an action of the process framework: planning minor / major / full processes,
and what their end and a restart mean for the table's status."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from typing import Any, Literal

from sqlalchemy.orm import Session

from lakewarden.domain.budget import READ_TRIGGERED, read_triggered
from lakewarden.domain.clustering import merged_marks
from lakewarden.domain.errors import NothingToDo
from lakewarden.domain.evaluator import OptimizingClock, evaluate_table
from lakewarden.domain.file_groups import FileGroup
from lakewarden.domain.files import group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.planning import output_sizing, plan_tasks
from lakewarden.domain.processes import Action, ProcessPlan, TaskSpec
from lakewarden.domain.states import OPTIMIZING_STATUS, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.metadata.clustering import table_clustering
from lakewarden.metadata.expressions import partition_filter_json
from lakewarden.metadata.files import SnapshotFiles, optimized_branches, snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.protocol.inputs import (
    ClusteringInput,
    FileGroupInput,
    OptimizingInput,
    PartitionRef,
    PlannedFile,
    StagedFiles,
    TaskInput,
)
from lakewarden.services.processes.factories import ProcessFactory
from lakewarden.store import processes as process_store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import ProcessRow, TaskRow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)
LAST_OPTIMIZED = {
    "minor": "last_minor_optimizing_at",
    "major": "last_major_optimizing_at",
    "full": "last_full_optimizing_at",
}


class SelfOptimizingFactory(ProcessFactory):
    action = Action.OPTIMIZING

    def __init__(self, cache: ManifestCache) -> None:
        self.cache = cache  # shared with the evaluator: manifests are parsed once

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        """Plan on the table's current snapshot: the pending partitions' file groups binned into tasks, at most
        `options["max_input_bytes"]` of Amoro's cost estimate (the rest waits for the next process). When main has
        nothing to do, the first branch of `self-optimizing.branches` that has is planned on its head."""
        max_input = options.get("max_input_bytes")
        config = read_triggered(
            OptimizingConfig.of(rec.runtime.config), (rec.runtime.evaluation or {}).get(READ_TRIGGERED)
        )
        clock = OptimizingClock(
            now_ms=int(time.time() * 1000),
            last_minor_ms=_ms(rec.runtime.last_minor_optimizing_at or rec.identifier.created_at),
            last_full_ms=_ms(rec.runtime.last_full_optimizing_at or rec.identifier.created_at),
        )
        name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
        nothing: NothingToDo | None = None
        for branch in optimized_branches(table, config.branches):
            files = snapshot_files(table, self.cache, config.filter, branch)
            try:
                if branch is None:
                    return plan_process(
                        name,
                        table,
                        files,
                        config,
                        clock,
                        rec.runtime.unreduced,
                        rec.runtime.clustered,
                        max_input=max_input,
                    )
                return plan_process(name, table, files, config, clock, branch=branch, max_input=max_input)
            except NothingToDo as exc:
                nothing = nothing or exc  # main's reasons, when no branch has anything either
        assert nothing is not None  # main is always among the branches planned
        raise nothing

    def dispatch_input(self, session: Session, process: ProcessRow, task_input: TaskInput) -> TaskInput:
        """The commit task gets what the tasks that succeeded staged, and the table is COMMITTING while it runs."""
        if not isinstance(task_input, OptimizingInput) or not task_input.commit_staged:
            return task_input
        work = commit_input(process_store.tasks_of(session, process.process_id), task_input)
        runtime = table_store.runtime_of(session, process.table_id)
        if runtime is not None and TableStatus(runtime.status_code) in OPTIMIZING_STATUS.values():
            runtime_store.transition_table(
                session, process.table_id, TableStatus(runtime.status_code), TableStatus.COMMITTING
            )
        return work

    def on_end(self, session: Session, process: ProcessRow, status: ProcessStatus) -> None:
        """The table goes IDLE (the evaluator looks again); a success records when it was optimized."""
        runtime = table_store.runtime_of(session, process.table_id)
        if runtime is None:
            return
        tasks = process_store.tasks_of(session, process.process_id)
        fields: dict[str, Any] = {"optimizing_process_id": None, "next_evaluation_at": utcnow()}
        # a table's records of what rewrites wrote, and when it was last optimized, are main's
        on_main = all((t.input or {}).get("branch") is None for t in tasks)
        if on_main:
            fields["unreduced"] = _unreduced(tasks, runtime)
            fields["clustered"] = _clustered(tasks, runtime)
        if status is ProcessStatus.SUCCESS and on_main:
            fields[LAST_OPTIMIZED[process.type]] = utcnow()
            if process.type == "full":  # a full optimizing also did everything a minor would
                fields["last_minor_optimizing_at"] = utcnow()
        current = TableStatus(runtime.status_code)
        if current in (*OPTIMIZING_STATUS.values(), TableStatus.COMMITTING):
            runtime_store.transition_table(session, process.table_id, current, TableStatus.IDLE, **fields)
        else:  # the table is not optimizing (any more): record the outcome, leave its status alone
            for key, value in fields.items():
                setattr(runtime, key, value)

    def recover_tables(self, session: Session, running: set[int]) -> list[str]:
        """Planning is not persisted half-way (a process and its tasks are written in one transaction),
        so a table still PLANNING goes back to PENDING. A table optimizing for a process that is no
        longer running goes IDLE."""
        done: list[str] = []
        stuck = (TableStatus.PLANNING, *OPTIMIZING_STATUS.values(), TableStatus.COMMITTING)
        for rec in table_store.list_tables(session, statuses=stuck):
            status = TableStatus(rec.runtime.status_code)
            if status is TableStatus.PLANNING:
                runtime_store.transition_table(session, rec.runtime.table_id, status, TableStatus.PENDING)
                done.append(f"{rec.name}: planning interrupted, pending again")
            elif status in (*OPTIMIZING_STATUS.values(), TableStatus.COMMITTING) and (
                rec.runtime.optimizing_process_id not in running
            ):
                runtime_store.transition_table(
                    session,
                    rec.runtime.table_id,
                    status,
                    TableStatus.IDLE,
                    optimizing_process_id=None,
                    next_evaluation_at=utcnow(),
                )
                done.append(f"{rec.name}: its process is over, idle again")
        return done


def plan_process(
    name: str,
    table: Any,
    files: SnapshotFiles,
    config: OptimizingConfig,
    clock: OptimizingClock,
    unreduced: Mapping[str, Collection[str]] | None = None,
    clustered: Mapping[str, Any] | None = None,
    branch: str | None = None,
    max_input: int | None = None,
) -> ProcessPlan:
    """A self-optimizing process of table `name` (a loaded pyiceberg table) on the snapshot its files are
    of: one task per bin of file groups, and when there are several, a last task committing what they staged
    and removing the delete files they shared.
    `unreduced` and `clustered` are the table's records of what its earlier rewrites wrote. The process commits
    once to `branch` (None: main), whose head the files are of: a single task itself, else a last task.
    `max_input` bounds the partitions taken (plan_tasks).
    Raises NothingToDo (with the evaluator's reasons) when no partition has a group that changes anything."""
    clustering = table_clustering(table, config, clustered)
    partitions = group_by_partition(files.data, files.deletes)
    verdict = evaluate_table(files.snapshot_id, partitions, config, clock, unreduced, clustering)
    plan = plan_tasks(verdict, config, max_input)
    if not plan.tasks or verdict.type is None:
        raise NothingToDo("; ".join(verdict.reasons) or "no partition needs optimizing")
    kind = max(t.type for t in plan.tasks)  # of the partitions taken, as Amoro types a bounded plan
    # with no delete file in the snapshot none applies to a planned file: the optimizer may take the files as the
    # plan describes them instead of reading every manifest again (format version 3 keeps row lineage the plan
    # does not know)
    describe = not files.deletes and table.metadata.format_version < 3
    # a process of several tasks commits once (Amoro's): its tasks stage their files, its last task commits them
    once = len(plan.tasks) > 1 or bool(plan.shared_deletes)
    tasks = [
        TaskSpec(
            task.type.label,
            OptimizingInput(
                table=name,
                snapshot_id=files.snapshot_id,
                type=task.type.label,
                partitions=[PartitionRef(**p) for p in task.partitions],
                filter=partition_filter_json(table, task.partitions),
                groups=[group_input(g, config.target_size, describe) for g in task.groups],
                remove_deletes=task.remove_deletes,
                reasons=task.reasons,
                branch=branch,
                stage_only=once,
            ),
            task.partitions,
            task.cost_bytes,
        )
        for task in plan.tasks
    ]
    if once:  # the groups and staged files of the tasks come at hand-out (commit_input)
        shared = (
            [f"remove {len(plan.shared_deletes)} delete file(s) shared by the tasks"] if plan.shared_deletes else []
        )
        tasks.append(
            TaskSpec(
                kind.label,
                OptimizingInput(
                    table=name,
                    snapshot_id=files.snapshot_id,
                    type=kind.label,
                    partitions=[PartitionRef(**p) for p in plan.partitions],
                    filter=partition_filter_json(table, plan.partitions),
                    remove_deletes=plan.shared_deletes,
                    reasons=[f"commit the files of {len(plan.tasks)} task(s) at once", *shared],
                    branch=branch,
                    commit_staged=True,
                ),
                plan.partitions,
                0,
                stage=1,
            )
        )
    return ProcessPlan(kind.label, files.snapshot_id, tasks, {"branch": branch} if branch else {})


def commit_input(tasks: list[TaskRow], planned: OptimizingInput) -> OptimizingInput:
    """The input of a process's commit task (`planned`, as it was planned): the groups and removed delete files of
    every task that staged its files, with what they staged; the delete files the tasks shared only when all of
    them did (a partial commit leaves them to the files that still need them)."""
    stagers = [t for t in tasks if (t.input or {}).get("stage_only")]
    done = [t for t in stagers if t.status == TaskStatus.SUCCESS]
    groups: list[FileGroupInput] = []
    removed: list[str] = []
    written: list[list[dict[str, Any]]] = []
    deletes: list[dict[str, Any]] = []
    vectors = False
    for task in done:
        work = OptimizingInput.model_validate(task.input)
        files = StagedFiles.model_validate((task.output or {}).get("staged") or {})
        groups += work.groups
        removed += work.remove_deletes
        written += files.groups
        deletes += files.deletes
        vectors |= files.vectors
    if len(done) == len(stagers):
        removed += planned.remove_deletes
    staged = StagedFiles(groups=written, deletes=deletes, vectors=vectors)
    return planned.model_copy(update={"groups": groups, "remove_deletes": removed, "staged": staged})


def _committed(task: TaskRow, tasks: list[TaskRow]) -> bool:
    """Whether a task's files are in the table: its own commit, or its process's (a staging task's are only when
    the process's commit task succeeded)."""
    if task.status != TaskStatus.SUCCESS or not task.output:
        return False
    if not (task.input or {}).get("stage_only"):
        return True
    return any((t.input or {}).get("commit_staged") and t.status == TaskStatus.SUCCESS for t in tasks)


def _unreduced(tasks: list[Any], runtime: Any) -> dict[str, Any] | None:
    """The table's record of files rewritten without being reduced, after this process: the partitions it
    optimized forget theirs, and those where a task could not reduce its files remember what it wrote."""
    marks = dict(runtime.unreduced or {})
    for task in tasks:
        for partition in task.partitions:
            if isinstance(partition, dict):
                marks.pop(f"{partition.get('spec_id')}:{partition.get('path')}", None)
    for task in tasks:
        if _committed(task, tasks):
            for key, paths in (task.output.get("unreduced") or {}).items():
                marks.setdefault(key, []).extend(paths)
    return marks or None


def _clustered(tasks: list[Any], runtime: Any) -> dict[str, Any] | None:
    """The table's record of clustered partitions, after this process: each partition a task clustered
    remembers the files it wrote, under the clustering the task was given."""
    done: dict[str, tuple[str, list[str]]] = {}
    for task in tasks:
        if not _committed(task, tasks) or not task.output.get("clustered"):
            continue
        labels = {
            PartitionRef(**g["partition"]).key: g["clustering"]["label"]
            for g in (task.input or {}).get("groups", [])
            if g.get("clustering")
        }
        for key, paths in task.output["clustered"].items():
            if key in labels:
                done[key] = (labels[key], paths)
    return merged_marks(runtime.clustered, done) if done else runtime.clustered


def group_input(group: FileGroup, target_size: int, describe: bool = False) -> FileGroupInput:
    """One file group as an optimizer runs it: its files by path (`describe`: and as the plan found them, when
    every file's format is known), and how Iceberg sizes its output."""
    sizing = output_sizing(sum(f.size for f in group.rewrite), target_size)
    p = group.partition
    c = group.clustering
    return FileGroupInput(
        partition=PartitionRef(spec_id=p.spec_id, path=p.path, values=list(p.values)),
        rewrite=[f.path for f in group.rewrite],
        files=_described(group) if describe else [],
        rewrite_pos=[f.path for f in group.rewrite_pos],
        deletes=[d.path for d in group.deletes],
        split_size=sizing.split_size,
        max_file_size=sizing.max_file_size,
        expected_files=sizing.expected_files,
        clustering=None
        if c is None
        else ClusteringInput(kind=c.kind, label=c.label, sort_order_id=c.sort_order_id, columns=list(c.columns)),
    )


# the formats Iceberg tells by a file's name (FileFormat.fromFileName)
FORMATS_BY_SUFFIX: dict[str, Literal["parquet", "orc", "avro"]] = {
    ".parquet": "parquet",
    ".orc": "orc",
    ".avro": "avro",
}


def _described(group: FileGroup) -> list[PlannedFile]:
    """The group's files as the plan found them; none when a file's format is not known."""
    described = []
    for f in group.rewrite:
        file_format = FORMATS_BY_SUFFIX.get(f.path[f.path.rfind(".") :].lower())
        if file_format is None:
            return []
        described.append(
            PlannedFile(
                path=f.path,
                format=file_format,
                spec_id=f.partition.spec_id,
                partition=list(f.partition.values),
                size=f.size,
                records=f.records,
            )
        )
    return described


def _ms(moment: Any) -> int:
    return int(as_utc(moment).timestamp() * 1000)
