"""State machines of tables, optimizing processes and tasks: which transitions exist at all.

The store applies each one as a compare-and-swap on the expected state; these tables say which
(expected, new) pairs are legal, so an impossible transition is a bug caught at once, not a row
silently rewritten.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from lakewarden.domain.errors import IllegalTransition
from lakewarden.domain.evaluator import OptimizingType
from lakewarden.domain.tables import TableStatus

S = TypeVar("S")


class TaskStatus(enum.StrEnum):
    PLANNED = "planned"
    SCHEDULED = "scheduled"
    ACKED = "acked"
    # the optimizer was granted its commit: a cancel from now on no longer stops it
    COMMITTING = "committing"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELED = "canceled"


class ProcessStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELED = "canceled"


TASK_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.PLANNED: frozenset({TaskStatus.SCHEDULED, TaskStatus.CANCELED}),
    # back to PLANNED when the optimizer is lost or a timeout passes
    TaskStatus.SCHEDULED: frozenset({TaskStatus.ACKED, TaskStatus.PLANNED, TaskStatus.CANCELED}),
    TaskStatus.ACKED: frozenset(
        {TaskStatus.COMMITTING, TaskStatus.SUCCESS, TaskStatus.FAILED, TaskStatus.PLANNED, TaskStatus.CANCELED}
    ),
    TaskStatus.COMMITTING: frozenset({TaskStatus.SUCCESS, TaskStatus.FAILED, TaskStatus.PLANNED, TaskStatus.CANCELED}),
    # a failed task is retried (PLANNED) until execute.num-retries, then its process fails
    TaskStatus.FAILED: frozenset({TaskStatus.PLANNED, TaskStatus.CANCELED}),
    TaskStatus.SUCCESS: frozenset(),
    TaskStatus.CANCELED: frozenset(),
}
TASK_ACTIVE = frozenset({TaskStatus.SCHEDULED, TaskStatus.ACKED, TaskStatus.COMMITTING})
# held by an optimizer that has acked them: what it reports done, or what is taken back when it is lost
TASK_RUNNING = frozenset({TaskStatus.ACKED, TaskStatus.COMMITTING})

PROCESS_TRANSITIONS: dict[ProcessStatus, frozenset[ProcessStatus]] = {
    ProcessStatus.RUNNING: frozenset({ProcessStatus.SUCCESS, ProcessStatus.FAILED, ProcessStatus.CANCELED}),
    ProcessStatus.SUCCESS: frozenset(),
    ProcessStatus.FAILED: frozenset(),
    ProcessStatus.CANCELED: frozenset(),
}

OPTIMIZING_STATUS = {
    OptimizingType.MINOR: TableStatus.MINOR_OPTIMIZING,
    OptimizingType.MAJOR: TableStatus.MAJOR_OPTIMIZING,
    OptimizingType.FULL: TableStatus.FULL_OPTIMIZING,
}
_OPTIMIZING = frozenset(OPTIMIZING_STATUS.values())

TABLE_TRANSITIONS: dict[TableStatus, frozenset[TableStatus]] = {
    TableStatus.IDLE: frozenset({TableStatus.PENDING}),
    TableStatus.PENDING: frozenset({TableStatus.IDLE, TableStatus.PLANNING}),
    # planning ends optimizing, or back where it came from when there was nothing to plan after all
    TableStatus.PLANNING: _OPTIMIZING | {TableStatus.PENDING, TableStatus.IDLE},
    **{s: frozenset({TableStatus.COMMITTING, TableStatus.IDLE}) for s in _OPTIMIZING},
    TableStatus.COMMITTING: frozenset({TableStatus.IDLE}),
}


def _check(kind: str, transitions: Mapping[S, frozenset[S]], expected: S, new: S) -> None:
    if new not in transitions.get(expected, frozenset()):
        raise IllegalTransition(f"{kind}: {expected} -> {new} is not a transition")


def check_task(expected: TaskStatus, new: TaskStatus) -> None:
    _check("task", TASK_TRANSITIONS, expected, new)


def check_process(expected: ProcessStatus, new: ProcessStatus) -> None:
    _check("process", PROCESS_TRANSITIONS, expected, new)


def check_table(expected: TableStatus, new: TableStatus) -> None:
    _check("table", TABLE_TRANSITIONS, expected, new)
