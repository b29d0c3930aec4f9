"""The planner: turns a table's pending partitions into tasks that name every file they touch.

The evaluator has cut each pending partition into file groups; the planner bins the groups of one type into tasks
of at most `max-task-size-bytes`, so a large partition spreads over optimizer threads and small ones share a task.
It also decides which delete files each task's commit removes: only one whose every live data file this plan
rewrites; when those are spread over tasks, a last task removes it once all of them committed."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from lakewarden.domain.evaluator import OptimizingType, PartitionEvaluation, TableEvaluation
from lakewarden.domain.file_groups import FileGroup, first_fit
from lakewarden.domain.files import is_global
from lakewarden.domain.optimizing_config import OptimizingConfig

# Iceberg's SizeBasedFileRewritePlanner defaults: output files may grow to 1.8 x target (the writer rolls at
# halfway between), and a remainder below 0.75 x target is spread over the other files
MIN_FILE_SIZE_RATIO = 0.75
MAX_FILE_SIZE_RATIO = 1.80
SPLIT_OVERHEAD = 5 * 1024


@dataclass(frozen=True)
class OutputSizing:
    """How Iceberg's bin-pack runner sizes the rewrite of one group: each read split becomes one file."""

    split_size: int
    max_file_size: int
    expected_files: int


def output_sizing(input_bytes: int, target: int) -> OutputSizing:
    """Iceberg's SizeBasedFileRewritePlanner (expectedOutputFiles, inputSplitSize, writeMaxFileSize)."""
    min_size = int(target * MIN_FILE_SIZE_RATIO)
    write_max = int(target + (target * MAX_FILE_SIZE_RATIO - target) * 0.5)
    if input_bytes < target:
        expected = 1
    else:
        with_remainder = math.ceil(input_bytes / target)
        without_remainder = input_bytes // target
        if input_bytes % target > min_size:
            expected = with_remainder
        elif input_bytes / without_remainder < min(1.1 * target, write_max):
            expected = without_remainder
        else:
            expected = with_remainder
    estimated = input_bytes // expected + SPLIT_OVERHEAD
    split = target if estimated < target else min(estimated, write_max)
    return OutputSizing(split, write_max, expected)


@dataclass(frozen=True)
class TaskPlan:
    type: OptimizingType
    groups: list[FileGroup]
    # delete files this task's commit removes (every data file they apply to is in this task)
    remove_deletes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def partitions(self) -> list[dict[str, Any]]:
        """The partitions the task touches: {"spec_id", "path", "values"} of each."""
        seen = {g.partition: None for g in self.groups}
        return [{"spec_id": p.spec_id, "path": p.path, "values": list(p.values)} for p in seen]

    @property
    def input_bytes(self) -> int:
        return sum(g.data_bytes for g in self.groups)

    @property
    def cost_bytes(self) -> int:
        return sum(g.cost for g in self.groups)


@dataclass(frozen=True)
class OptimizingPlan:
    tasks: list[TaskPlan]
    # delete files whose data files are spread over several tasks: removed once all of them committed
    shared_deletes: list[str] = field(default_factory=list)

    @property
    def partitions(self) -> list[dict[str, Any]]:
        return list({str(p): p for t in self.tasks for p in t.partitions}.values())


def taken_partitions(verdict: TableEvaluation, max_input: int | None) -> list[PartitionEvaluation]:
    """The pending partitions a process takes (Amoro's AbstractOptimizingPlanner.planTasks): the costliest first,
    until their cost passes `max_input` (the group's threads × max-input-file-size-per-thread; the partition that
    passes it is taken too, so a process always has one). None: every pending partition."""
    pending = verdict.pending
    if max_input is None:
        return pending
    taken: list[PartitionEvaluation] = []
    total = 0
    for partition in sorted(pending, key=lambda p: (-p.cost, str(p.partition))):
        taken.append(partition)
        total += partition.cost
        if total > max_input:
            break
    return taken


def plan_tasks(verdict: TableEvaluation, config: OptimizingConfig, max_input: int | None = None) -> OptimizingPlan:
    """Bins of the taken partitions' file groups (taken_partitions), one type per task, first-fit by decreasing
    size up to max-task-size-bytes (a group bigger than that on its own gets a task of its own)."""
    tasks: list[TaskPlan] = []
    pending = taken_partitions(verdict, max_input)
    for kind in sorted({p.type for p in pending if p.type is not None}, reverse=True):
        groups = [g for p in pending if p.type is kind for g in p.groups]
        groups.sort(key=lambda g: (-g.data_bytes, str(g.partition), [f.path for f in (*g.rewrite, *g.rewrite_pos)][:1]))
        bins = first_fit(groups, lambda g: g.data_bytes, config.max_task_size)
        reasons = {p.partition: f"{p.partition}: {'; '.join(p.reasons)}" for p in pending}
        for members in bins:
            members.sort(key=lambda g: str(g.partition))
            tasks.append(TaskPlan(kind, members, reasons=list({reasons[g.partition]: None for g in members})))
    return _assign_deletes(verdict, tasks)


def _assign_deletes(verdict: TableEvaluation, tasks: list[TaskPlan]) -> OptimizingPlan:
    """Which task removes which delete file: a delete file applying to any data file the plan does not take
    is reserved; one whose data files are all in one task is removed by it; the others are shared."""
    task_of: dict[str, int] = {}
    for i, task in enumerate(tasks):
        for group in task.groups:
            for f in (*group.rewrite, *group.rewrite_pos):
                task_of[f.path] = i
    owners: dict[str, set[int]] = defaultdict(set)
    reserved: set[str] = set()
    for partition in verdict.partitions:
        files = partition.files
        if files is None or not files.delete_files:
            continue
        if verdict.filtered:  # files outside self-optimizing.filter were not read: a global delete may apply there
            reserved.update(d.path for d in files.delete_files if is_global(d))
        for data in files.data:
            owner = task_of.get(data.path)
            for delete in files.deletes_for(data):
                if owner is None:
                    reserved.add(delete.path)
                else:
                    owners[delete.path].add(owner)
    removed: dict[int, list[str]] = defaultdict(list)
    shared: list[str] = []
    for path in sorted(owners):
        if path in reserved:
            continue
        if len(owners[path]) == 1:
            removed[next(iter(owners[path]))].append(path)
        else:
            shared.append(path)
    planned = [
        TaskPlan(t.type, t.groups, remove_deletes=removed.get(i, []), reasons=t.reasons) for i, t in enumerate(tasks)
    ]
    return OptimizingPlan(planned, shared)
