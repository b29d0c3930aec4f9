"""The planner: turns a table's pending partitions into tasks, bins of partitions up to the task size.

Each task carries the options of Iceberg's `rewrite_data_files` (bin-pack) that select exactly the
file classes its type rewrites, so the optimizer runs Iceberg's own machinery, scoped and tuned:

  minor  the fragments (size <= fragment threshold), at least two to a group
  major  also undersized segments, and segments whose deleted rows pass the duplicate ratio
  full   every file (self-optimizing.full.rewrite-all-files), or every file that is small or has deletes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lakewarden.domain.evaluator import OptimizingType, PartitionEvaluation, TableEvaluation
from lakewarden.domain.optimizing_config import OptimizingConfig

NEVER = str(2**62)  # a file-size bound no file reaches
MAX_INT = str(2**31 - 1)


def _input_bytes(p: PartitionEvaluation, kind: OptimizingType, config: OptimizingConfig) -> int:
    deletes = p.position_delete_bytes + p.equality_delete_bytes
    if kind is OptimizingType.MINOR:
        return p.fragment_bytes + deletes
    if kind is OptimizingType.MAJOR or not config.full_rewrite_all_files:
        return p.fragment_bytes + p.undersized_bytes + p.rewrite_segment_bytes + deletes
    return p.fragment_bytes + p.undersized_bytes + p.segment_bytes + deletes


def rewrite_options(kind: OptimizingType, config: OptimizingConfig) -> dict[str, str]:
    """Options of Iceberg's RewriteDataFiles that make its bin-pack rewrite exactly what `kind` plans."""
    options = {
        "target-file-size-bytes": str(config.target_size),
        "max-file-size-bytes": NEVER,
        "min-input-files": "2",
        "remove-dangling-deletes": "true",
        "partial-progress.enabled": "false",
    }
    if kind is OptimizingType.MINOR:
        options.update(
            {
                "min-file-size-bytes": str(config.fragment_threshold + 1),
                "delete-file-threshold": MAX_INT,
                "delete-ratio-threshold": "1.0",
            }
        )
    elif kind is OptimizingType.MAJOR or not config.full_rewrite_all_files:
        options.update(
            {
                "min-file-size-bytes": str(config.undersized_threshold + 1),
                # Iceberg rewrites at >= the ratio; the evaluator plans at > it: the next float up
                "delete-ratio-threshold": repr(max(config.major_duplicate_ratio, 1e-9)),
                "delete-file-threshold": "1" if kind is OptimizingType.FULL else MAX_INT,
            }
        )
        if kind is OptimizingType.FULL:
            options["min-input-files"] = "1"
    else:
        options["rewrite-all"] = "true"
    return options


@dataclass(frozen=True)
class TaskPlan:
    type: OptimizingType
    partitions: list[dict[str, Any]]  # {"spec_id", "path", "values"} of each partition
    input_bytes: int
    cost_bytes: int
    options: dict[str, str]
    # rewrite the position-delete files too (Iceberg's rewrite_position_delete_files): combines them and
    # drops the deletes of data files the rewrite replaced
    rewrite_position_deletes: bool
    reasons: list[str] = field(default_factory=list)


def plan_tasks(verdict: TableEvaluation, config: OptimizingConfig) -> list[TaskPlan]:
    """Bins of the pending partitions, one type per task, first-fit by decreasing size up to max-task-size-bytes.

    A partition bigger than a task on its own gets a task of its own (Iceberg splits it into file groups).
    """
    tasks: list[TaskPlan] = []
    for kind in sorted({p.type for p in verdict.pending if p.type is not None}, reverse=True):
        members = sorted(
            (p for p in verdict.pending if p.type is kind),
            key=lambda p: (-_input_bytes(p, kind, config), str(p.partition)),
        )
        bins: list[list[PartitionEvaluation]] = []
        sizes: list[int] = []
        for p in members:
            size = _input_bytes(p, kind, config)
            for i, used in enumerate(sizes):
                if used + size <= config.max_task_size:
                    bins[i].append(p)
                    sizes[i] += size
                    break
            else:
                bins.append([p])
                sizes.append(size)
        options = rewrite_options(kind, config)
        for members_of_bin, size in zip(bins, sizes, strict=True):
            members_of_bin.sort(key=lambda p: str(p.partition))
            tasks.append(
                TaskPlan(
                    type=kind,
                    partitions=[
                        {"spec_id": p.partition.spec_id, "path": p.partition.path, "values": list(p.partition.values)}
                        for p in members_of_bin
                    ],
                    input_bytes=size,
                    cost_bytes=sum(p.cost for p in members_of_bin),
                    options=dict(options),
                    # also where data files with position deletes are rewritten: Iceberg keeps the rewritten
                    # files' sequence number, so their deletes only go when the delete files are rewritten
                    rewrite_position_deletes=any(
                        p.combine_position_segments or p.position_delete_files for p in members_of_bin
                    ),
                    reasons=[f"{p.partition}: {'; '.join(p.reasons)}" for p in members_of_bin],
                )
            )
    return tasks
