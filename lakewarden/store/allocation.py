"""What dynamic allocation reads of a resource group (domain/dynamic_allocation.py), in one read transaction, and the
records of the optimizers containers started (services/resources/resource_maintainer.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from lakewarden.domain.dynamic_allocation import TableDemand, serviceable_planned
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.states import TASK_ACTIVE, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.store.database import utcnow
from lakewarden.store.models import OptimizerResourceRow, OptimizerRow, ProcessRow, TableRuntimeRow, TaskRow
from lakewarden.store.processes import asked_to_leave


@dataclass(frozen=True)
class RegisteredOptimizer:
    token: str
    resource_id: str | None
    threads: int
    leaving: bool  # asked to leave (draining): it takes no new task


@dataclass(frozen=True)
class GroupFacts:
    optimizers: list[RegisteredOptimizer]
    tasks_by_optimizer: dict[str, int]  # tasks an optimizer holds (handed out, running or committing)
    serviceable: int  # planned tasks more threads could run
    pending_tables: int


def group_facts(session: Session, group: str) -> GroupFacts:
    optimizers = [
        RegisteredOptimizer(row.token, row.resource_id, row.parallelism, asked_to_leave(row))
        for row in session.scalars(select(OptimizerRow).where(OptimizerRow.group_name == group))
    ]
    running = (
        select(TaskRow.process_id, TaskRow.status, TaskRow.optimizer_token, ProcessRow.table_id)
        .join(ProcessRow, ProcessRow.process_id == TaskRow.process_id)
        .where(ProcessRow.group_name == group, ProcessRow.status == ProcessStatus.RUNNING.value)
        .where(TaskRow.status.in_([TaskStatus.PLANNED.value, *(s.value for s in TASK_ACTIVE)]))
    )
    held: Counter[str] = Counter()
    planned: Counter[int] = Counter()
    occupied: Counter[int] = Counter()
    for _, status, token, table_id in session.execute(running):
        if status == TaskStatus.PLANNED.value:
            planned[table_id] += 1
        else:
            occupied[table_id] += 1
            if token is not None:
                held[token] += 1
    configs: dict[int, dict[str, str]] = {}
    if planned:
        query = select(TableRuntimeRow.table_id, TableRuntimeRow.config).where(
            TableRuntimeRow.table_id.in_(list(planned))
        )
        configs = {table_id: config for table_id, config in session.execute(query)}
    demands = [
        TableDemand(count, OptimizingConfig.or_defaults(configs.get(table_id)).quota, occupied[table_id])
        for table_id, count in planned.items()
    ]
    pending = session.scalar(
        select(func.count())
        .select_from(TableRuntimeRow)
        .where(TableRuntimeRow.optimizing_group == group, TableRuntimeRow.status_code == int(TableStatus.PENDING))
    )
    return GroupFacts(optimizers, dict(held), serviceable_planned(demands), int(pending or 0))


def record_resource(session: Session, resource_id: str, group: str, container: str, threads: int, node: str) -> None:
    session.add(
        OptimizerResourceRow(
            resource_id=resource_id,
            group_name=group,
            container=container,
            threads=threads,
            started_by=node,
            started_at=utcnow(),
        )
    )
    session.flush()


def forget_resource(session: Session, resource_id: str) -> None:
    session.execute(delete(OptimizerResourceRow).where(OptimizerResourceRow.resource_id == resource_id))
    session.flush()


def recorded_resources(session: Session, group: str | None = None) -> list[OptimizerResourceRow]:
    """The optimizers containers started, oldest first: of one group, or of every group."""
    query = select(OptimizerResourceRow)
    if group is not None:
        query = query.where(OptimizerResourceRow.group_name == group)
    return list(session.scalars(query.order_by(OptimizerResourceRow.started_at)))


def live_resources(session: Session, resource_ids: list[str], within: timedelta) -> set[str]:
    """Which of these container resources have an optimizer registered that sent a heartbeat within `within`."""
    since = utcnow() - within
    query = select(OptimizerRow.resource_id).where(
        OptimizerRow.resource_id.in_(resource_ids), OptimizerRow.last_heartbeat_at >= since
    )
    return {resource for resource in session.scalars(query) if resource is not None}
