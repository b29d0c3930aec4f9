"""Processes: what lakewarden does to a table is an Action carried out by a process; what a process
is made of when it is created (its type, base snapshot, tasks and summary)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from lakewarden.protocol.inputs import TaskInput


class Action(enum.StrEnum):
    """What a process does to a table."""

    OPTIMIZING = "optimizing"
    EXPIRE_SNAPSHOTS = "expire-snapshots"
    CLEAN_ORPHAN_FILES = "clean-orphan-files"
    CLEAN_DANGLING_DELETE_FILES = "clean-dangling-delete-files"
    EXPIRE_DATA = "expire-data"
    AUTO_CREATE_TAGS = "auto-create-tags"
    REWRITE_MANIFESTS = "rewrite-manifests"


# maintenance actions during which a table is not planned for optimizing (their files must stay put)
BLOCKS_OPTIMIZING = frozenset({Action.EXPIRE_SNAPSHOTS.value, Action.CLEAN_ORPHAN_FILES.value})


@dataclass(frozen=True)
class TaskSpec:
    """One planned task: its type, what the optimizer needs to run it, and what it covers."""

    type: str
    input: TaskInput
    partitions: list[Any] = field(default_factory=list)
    cost_bytes: int = 0
    # a task is handed out only when every task of a lower stage of its process has succeeded
    stage: int = 0


@dataclass(frozen=True)
class ProcessPlan:
    """A process to create: its type (minor/major/full; for maintenance, what triggered it), the
    snapshot it was planned on, its tasks, and the summary shown while it runs (e.g. its reasons)."""

    type: str
    target_snapshot_id: int | None
    tasks: list[TaskSpec]
    summary: dict[str, Any] = field(default_factory=dict)
