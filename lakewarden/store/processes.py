"""Store functions for optimizers, optimizing processes and tasks. Every status change is a compare-and-swap."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from lakewarden.domain.errors import NotFound
from lakewarden.domain.processes import ProcessPlan
from lakewarden.domain.states import TASK_ACTIVE, TASK_RUNNING, ProcessStatus, TaskStatus, check_process, check_task
from lakewarden.store import stats
from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import (
    OptimizerRow,
    ProcessRow,
    ProcessStreakRow,
    ResourceGroupRow,
    TaskRow,
)
from lakewarden.store.tables import TableRecord

# ---- optimizers


def register_optimizer(
    session: Session, group: str, parallelism: int, resource_id: str | None, host: str | None, container: str | None
) -> OptimizerRow:
    now = utcnow()
    row = OptimizerRow(
        token=secrets.token_hex(16),
        group_name=group,
        container=container,
        resource_id=resource_id,
        parallelism=parallelism,
        host=host,
        properties={},
        registered_at=now,
        last_heartbeat_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_optimizer(session: Session, token: str) -> OptimizerRow:
    row = session.get(OptimizerRow, token)
    if row is None:
        raise NotFound("unknown optimizer token (lost or never registered): register again")
    return row


def active_task_holders(session: Session, catalog: str, database: str, table: str) -> list[str]:
    """The optimizer tokens that hold a scheduled or acked task on the table now."""
    query = (
        select(TaskRow.optimizer_token)
        .join(ProcessRow, ProcessRow.process_id == TaskRow.process_id)
        .where(
            ProcessRow.catalog_name == catalog,
            ProcessRow.db_name == database,
            ProcessRow.table_name == table,
            TaskRow.status.in_([s.value for s in TASK_ACTIVE]),
            TaskRow.optimizer_token.is_not(None),
        )
    )
    return [str(token) for token in session.scalars(query)]


def find_task(session: Session, process_id: int, task_id: int) -> TaskRow | None:
    return session.get(TaskRow, (process_id, task_id))


def task_is(session: Session, process_id: int, task_id: int, status: TaskStatus, attempt: int, token: str) -> bool:
    """Whether the task is in `status` for this attempt and optimizer (a request sent again is answered the same)."""
    task = find_task(session, process_id, task_id)
    return task is not None and (task.status, task.attempt, task.optimizer_token) == (status.value, attempt, token)


def find_optimizer(session: Session, token: str) -> OptimizerRow | None:
    return session.get(OptimizerRow, token)


def touch_optimizer(session: Session, token: str) -> OptimizerRow:
    row = get_optimizer(session, token)
    row.last_heartbeat_at = utcnow()
    session.flush()
    return row


LEAVE = "asked_to_leave_at"  # in OptimizerRow.properties: when its container asked it to leave


def registered_resources(session: Session, resource_ids: list[str]) -> set[str]:
    """Which of these container resources have an optimizer registered now."""
    query = select(OptimizerRow.resource_id).where(OptimizerRow.resource_id.in_(resource_ids))
    return {resource for resource in session.scalars(query) if resource is not None}


def ask_to_leave(session: Session, resource_id: str) -> int:
    """Ask the optimizers of a container's resource to leave at their next heartbeat; how many there are."""
    rows = list(session.scalars(select(OptimizerRow).where(OptimizerRow.resource_id == resource_id)))
    for row in rows:
        row.properties = {**(row.properties or {}), LEAVE: utcnow().isoformat()}
    session.flush()
    return len(rows)


def asked_to_leave(row: OptimizerRow) -> bool:
    return LEAVE in (row.properties or {})


def list_optimizers(session: Session, group: str | None = None) -> list[OptimizerRow]:
    query = select(OptimizerRow).order_by(OptimizerRow.group_name, OptimizerRow.registered_at)
    if group is not None:
        query = query.where(OptimizerRow.group_name == group)
    return list(session.scalars(query))


def active_tasks(session: Session) -> list[TaskRow]:
    """Tasks held by an optimizer: SCHEDULED, ACKED or COMMITTING."""
    active = [s.value for s in TASK_ACTIVE]
    return list(session.scalars(select(TaskRow).where(TaskRow.status.in_(active))))


def revoked_tasks(session: Session, token: str, running: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Of the (process, task, attempt) an optimizer says it runs, those that are no longer its to run."""
    revoked = []
    for process_id, task_id, attempt in running:
        task = session.get(TaskRow, (process_id, task_id))
        if (
            task is None
            or task.attempt != attempt
            or task.optimizer_token != token
            or TaskStatus(task.status) not in TASK_RUNNING
        ):
            revoked.append((process_id, task_id, attempt))
    return revoked


def forget_optimizers(session: Session, tokens: list[str]) -> None:
    session.execute(delete(OptimizerRow).where(OptimizerRow.token.in_(tokens)))
    session.flush()


def group_policy(session: Session, group: str) -> str:
    row = session.get(ResourceGroupRow, group)
    return str((row.properties if row else {}).get("scheduling-policy", "quota"))


def group_threads(session: Session, group: str) -> int:
    return int(session.scalar(select(func.sum(OptimizerRow.parallelism)).where(OptimizerRow.group_name == group)) or 0)


# ---- processes and tasks


def create_process(session: Session, rec: TableRecord, group: str, action: str, plan: ProcessPlan) -> ProcessRow:
    """A process and all its tasks, PLANNED, in the caller's transaction."""
    process = ProcessRow(
        table_id=rec.identifier.table_id,
        catalog_name=rec.identifier.catalog_name,
        db_name=rec.identifier.db_name,
        table_name=rec.identifier.table_name,
        group_name=group,
        action=action,
        type=plan.type,
        status=ProcessStatus.RUNNING.value,
        target_snapshot_id=plan.target_snapshot_id,
        plan_time=utcnow(),
        summary=dict(plan.summary),
    )
    session.add(process)
    session.flush()
    for task_id, task in enumerate(plan.tasks, start=1):
        session.add(
            TaskRow(
                process_id=process.process_id,
                task_id=task_id,
                status=TaskStatus.PLANNED.value,
                type=task.type,
                attempt=0,
                retry_count=0,
                partitions=list(task.partitions),
                input=task.input.model_dump(mode="json"),
                cost_bytes=task.cost_bytes,
                stage=task.stage,
            )
        )
    session.flush()
    return process


def get_process(session: Session, process_id: int) -> ProcessRow:
    row = session.get(ProcessRow, process_id)
    if row is None:
        raise NotFound(f"process {process_id} does not exist")
    return row


YIELDS_KEPT = 20  # a process keeps its newest yields; the counts keep them all


def record_yield(session: Session, process_id: int, entry: dict[str, Any], cpu_ms: float) -> bool:
    """One yield of an ended process's work (services/processes/yields.py): listed in its summary and counted;
    False when the process is gone (its history was trimmed)."""
    process = session.get(ProcessRow, process_id)
    if process is None:
        return False
    summary = dict(process.summary or {})
    summary["yielded"] = [*summary.get("yielded", []), entry][-YIELDS_KEPT:]
    summary["yields"] = int(summary.get("yields", 0)) + 1
    summary["yielded_cpu_ms"] = round(float(summary.get("yielded_cpu_ms", 0)) + cpu_ms, 1)
    process.summary = summary
    stats.count_yield(session, process_id, cpu_ms)
    return True


def task_usage(session: Session, process_id: int, task_id: int) -> tuple[dict[str, Any] | None, str] | None:
    """A task's kept usage and its process's group; None for a task that is gone."""
    found = session.execute(
        select(TaskRow.usage, ProcessRow.group_name)
        .join(ProcessRow, ProcessRow.process_id == TaskRow.process_id)
        .where(TaskRow.process_id == process_id, TaskRow.task_id == task_id)
    ).first()
    return None if found is None else (found[0], found[1])


def tasks_of(session: Session, process_id: int) -> list[TaskRow]:
    return list(session.scalars(select(TaskRow).where(TaskRow.process_id == process_id).order_by(TaskRow.task_id)))


def tasks_of_each(session: Session, process_ids: list[int]) -> dict[int, list[TaskRow]]:
    """The tasks of each process, in one query (a list page)."""
    tasks: dict[int, list[TaskRow]] = {pid: [] for pid in process_ids}
    query = select(TaskRow).where(TaskRow.process_id.in_(process_ids)).order_by(TaskRow.process_id, TaskRow.task_id)
    for task in session.scalars(query):
        tasks[task.process_id].append(task)
    return tasks


def first_planned_task(session: Session, process_id: int) -> TaskRow | None:
    """The first PLANNED task of the process that is not waiting out a retry back-off, nor for a task of an
    earlier stage to succeed (or be canceled: a partial commit commits the others)."""
    earlier = aliased(TaskRow)
    waiting = (
        select(earlier.task_id)
        .where(
            earlier.process_id == TaskRow.process_id,
            earlier.stage < TaskRow.stage,
            earlier.status.notin_((TaskStatus.SUCCESS.value, TaskStatus.CANCELED.value)),
        )
        .exists()
    )
    return session.scalars(
        select(TaskRow)
        .where(
            TaskRow.process_id == process_id,
            TaskRow.status == TaskStatus.PLANNED.value,
            or_(TaskRow.retry_after.is_(None), TaskRow.retry_after <= utcnow()),
            ~waiting,
        )
        .order_by(TaskRow.task_id)
        .limit(1)
    ).first()


def task_status_counts(session: Session, process_id: int) -> dict[TaskStatus, int]:
    rows = session.execute(
        select(TaskRow.status, func.count()).where(TaskRow.process_id == process_id).group_by(TaskRow.status)
    )
    return {TaskStatus(status): int(count) for status, count in rows}


def _filtered(query: Any, **equal: Any) -> Any:
    """The query limited to processes whose columns equal the given values (None: no limit)."""
    for column, value in equal.items():
        if value is not None:
            query = query.where(getattr(ProcessRow, column) == value)
    return query


def running_processes(
    session: Session,
    group: str | None = None,
    table_id: int | None = None,
    action: str | None = None,
    table_ids: list[int] | None = None,
) -> list[ProcessRow]:
    query = select(ProcessRow).where(ProcessRow.status == ProcessStatus.RUNNING.value).order_by(ProcessRow.plan_time)
    if table_ids is not None:
        query = query.where(ProcessRow.table_id.in_(table_ids))
    return list(session.scalars(_filtered(query, group_name=group, table_id=table_id, action=action)))


def list_processes(
    session: Session,
    table_id: int | None = None,
    limit: int = 100,
    action: str | None = None,
    status: str | None = None,
) -> list[ProcessRow]:
    query = select(ProcessRow).order_by(ProcessRow.process_id.desc()).limit(limit)
    return list(session.scalars(_filtered(query, table_id=table_id, action=action, status=status)))


def recent_summaries(session: Session, table_id: int, action: str, limit: int) -> list[dict[str, Any]]:
    """The summaries of the table's last `limit` successful processes of the action, newest first."""
    done = list_processes(session, table_id=table_id, limit=limit, action=action, status=ProcessStatus.SUCCESS.value)
    return [dict(p.summary or {}) for p in done]


def last_plan_times(session: Session, table_ids: list[int] | None = None) -> dict[tuple[int, str], datetime]:
    """When each (table, action) last had a process created (of these tables, when given)."""
    query = select(ProcessRow.table_id, ProcessRow.action, func.max(ProcessRow.plan_time)).group_by(
        ProcessRow.table_id, ProcessRow.action
    )
    if table_ids is not None:
        query = query.where(ProcessRow.table_id.in_(table_ids))
    return {(table_id, action): moment for table_id, action, moment in session.execute(query)}


def failure_streaks(
    session: Session,
    actions: list[str],
    table_id: int | None = None,
    depth: int = 8,
    table_ids: list[int] | None = None,
) -> dict[tuple[int, str], tuple[int, datetime]]:
    """Per (table, action) whose newest ended process failed: how many of its newest ended processes failed in a
    row (up to `depth`), and when the newest was planned."""
    query = select(ProcessStreakRow).where(ProcessStreakRow.action.in_(actions), ProcessStreakRow.failed_in_a_row > 0)
    if table_id is not None:
        query = query.where(ProcessStreakRow.table_id == table_id)
    if table_ids is not None:
        query = query.where(ProcessStreakRow.table_id.in_(table_ids))
    return {
        (r.table_id, r.action): (min(r.failed_in_a_row, depth), as_utc(r.newest_planned_at))
        for r in session.scalars(query)
    }


def transition_task(
    session: Session,
    process_id: int,
    task_id: int,
    expected: TaskStatus,
    new: TaskStatus,
    *,
    expected_attempt: int | None = None,
    expected_token: str | None = None,
    **fields: Any,
) -> bool:
    """CAS on (status, and the attempt and optimizer when given); False when the task moved on meanwhile."""
    check_task(expected, new)
    query = update(TaskRow).where(
        TaskRow.process_id == process_id, TaskRow.task_id == task_id, TaskRow.status == expected.value
    )
    if expected_attempt is not None:
        query = query.where(TaskRow.attempt == expected_attempt)
    if expected_token is not None:
        query = query.where(TaskRow.optimizer_token == expected_token)
    result = session.execute(query.values(status=new.value, **fields).execution_options(synchronize_session=False))
    session.flush()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def transition_process(
    session: Session, process_id: int, expected: ProcessStatus, new: ProcessStatus, **fields: Any
) -> bool:
    """Moves the process from `expected` to `new` (False if it was not in `expected`); a process that ends is added to
    its running totals in the same transaction."""
    check_process(expected, new)
    result = session.execute(
        update(ProcessRow)
        .where(ProcessRow.process_id == process_id, ProcessRow.status == expected.value)
        .values(status=new.value, **fields)
        .execution_options(synchronize_session=False)
    )
    session.flush()
    moved = bool(result.rowcount == 1)  # type: ignore[attr-defined]
    if moved and new is not ProcessStatus.RUNNING:
        stats.count_ended(session, process_id)
        _count_streak(session, process_id)
    return moved


def _count_streak(session: Session, process_id: int) -> None:
    """Adds an ended process to its table's streak of the action (failures in a row; `failure_streaks`)."""
    table_id, action, status, planned = session.execute(
        select(ProcessRow.table_id, ProcessRow.action, ProcessRow.status, ProcessRow.plan_time).where(
            ProcessRow.process_id == process_id
        )
    ).one()
    streak = stats.locked_row(
        session,
        ProcessStreakRow,
        {"table_id": table_id, "action": action},
        failed_in_a_row=0,
        newest_planned_at=planned,
    )
    streak.failed_in_a_row = streak.failed_in_a_row + 1 if status == ProcessStatus.FAILED.value else 0
    streak.newest_planned_at = planned
    session.flush()


def task_seconds_since(session: Session, table_id: int, since: datetime) -> float:
    """Seconds of optimizer-thread time the table's tasks used since `since` (for the quota policy)."""
    rows = session.execute(
        select(TaskRow.acked_at, TaskRow.ended_at)
        .join(ProcessRow, ProcessRow.process_id == TaskRow.process_id)
        .where(ProcessRow.table_id == table_id, TaskRow.acked_at.is_not(None))
    )
    now = utcnow()
    total = 0.0
    for acked, ended in rows:
        if acked is None:
            continue
        start = max(as_utc(acked), since)
        end = as_utc(ended) if ended is not None else now
        if end > start:
            total += (end - start).total_seconds()
    return total
