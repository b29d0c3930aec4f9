"""Aggregates over the system database for the overview, the dashboard and the Prometheus metrics.

Everything is counted in the database (process results are summed from their JSON summaries), so
the numbers survive restarts and agree across whatever reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.domain.costs import COST, USAGE_FIELDS
from lakewarden.domain.states import TASK_ACTIVE, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.store.database import as_utc
from lakewarden.store.models import (
    CatalogRow,
    OptimizerRow,
    ProcessRow,
    PrunedProcessTotals,
    ResourceGroupRow,
    TableIdentifierRow,
    TableRuntimeRow,
    TaskRow,
)

# the numbers a process summary may carry, summed per (table, action, type, status)
RESULT_FIELDS = (
    "duration_ms",
    "files_in",
    "files_out",
    "bytes_in",
    "bytes_out",
    "delete_files_removed",
    "snapshots_expired",
    "files_deleted",
    "bytes_freed",
    "data_files_deleted",
    "records_deleted",
    "tags_created",
    "manifests_rewritten",
    "orphan_files_found",
    *USAGE_FIELDS,
    COST,
)


@dataclass(frozen=True)
class ProcessTotals:
    catalog: str
    database: str
    table: str
    action: str
    type: str
    status: str
    count: int
    sums: dict[str, float]  # whole numbers but the cost


def process_totals(
    session: Session, process_ids: list[int] | None = None, table: tuple[str, str, str] | None = None
) -> list[ProcessTotals]:
    """Processes counted, and their results summed, per table, action, type and status: those kept and those
    pruned from history (store/history.py), of every table or of one; or only the given processes."""
    sums = [func.coalesce(func.sum(ProcessRow.summary[f].as_float()), 0) for f in RESULT_FIELDS]
    keys = (
        ProcessRow.catalog_name,
        ProcessRow.db_name,
        ProcessRow.table_name,
        ProcessRow.action,
        ProcessRow.type,
        ProcessRow.status,
    )
    query = select(*keys, func.count(), *sums).group_by(*keys)
    if process_ids is not None:
        query = query.where(ProcessRow.process_id.in_(process_ids))
    pruned = select(PrunedProcessTotals)
    if table is not None:
        query = query.where(*(column == value for column, value in zip(keys[:3], table, strict=True)))
        pruned = pruned.where(
            PrunedProcessTotals.catalog_name == table[0],
            PrunedProcessTotals.db_name == table[1],
            PrunedProcessTotals.table_name == table[2],
        )
    totals: dict[tuple[str, ...], ProcessTotals] = {}
    for r in session.execute(query):
        totals[tuple(r[:6])] = ProcessTotals(
            r[0], r[1], r[2], r[3], r[4], r[5], int(r[6]), dict(zip(RESULT_FIELDS, map(number, r[7:]), strict=True))
        )
    if process_ids is not None:
        return list(totals.values())
    for p in session.scalars(pruned):
        key = (p.catalog_name, p.db_name, p.table_name, p.action, p.type, p.status)
        kept = totals.get(key)
        count = p.count + (kept.count if kept else 0)
        summed = {f: number(p.sums.get(f, 0)) + (kept.sums[f] if kept else 0) for f in RESULT_FIELDS}
        totals[key] = ProcessTotals(*key, count, summed)
    return list(totals.values())


USAGE = (*USAGE_FIELDS, COST)


def usage_of(totals: list[ProcessTotals]) -> dict[str, float]:
    """What processes cost together: Spark's figures (`spark_*`) and their cost."""
    usage: dict[str, float] = dict.fromkeys(USAGE, 0)
    for row in totals:
        for field in USAGE:
            usage[field] += row.sums.get(field, 0)
    return usage


def group_usage(session: Session) -> dict[str, dict[str, float]]:
    """What each group's ended processes cost: those kept by the group that ran them, those pruned from history
    by the group their table is in now (pruned totals are kept per table)."""
    sums = [func.coalesce(func.sum(ProcessRow.summary[f].as_float()), 0) for f in USAGE]
    per_group: dict[str, dict[str, float]] = {}
    kept = select(ProcessRow.group_name, *sums).where(ProcessRow.end_time.is_not(None))
    for r in session.execute(kept.group_by(ProcessRow.group_name)):
        per_group[r[0]] = dict(zip(USAGE, map(number, r[1:]), strict=True))
    pruned = (
        select(PrunedProcessTotals.sums, TableRuntimeRow.optimizing_group)
        .join(
            TableIdentifierRow,
            (TableIdentifierRow.catalog_name == PrunedProcessTotals.catalog_name)
            & (TableIdentifierRow.db_name == PrunedProcessTotals.db_name)
            & (TableIdentifierRow.table_name == PrunedProcessTotals.table_name),
        )
        .join(TableRuntimeRow, TableRuntimeRow.table_id == TableIdentifierRow.table_id)
    )
    for sums_of, group in session.execute(pruned):
        usage = per_group.setdefault(group, dict.fromkeys(USAGE, 0))
        for field in USAGE:
            usage[field] += number(sums_of.get(field, 0))
    return per_group


def number(value: Any) -> float:
    """A sum as JSON and the metrics like it: whole numbers as ints."""
    as_float = float(value or 0)
    return int(as_float) if as_float.is_integer() else as_float


def table_status_counts(session: Session) -> dict[int, int]:
    query = select(TableRuntimeRow.status_code, func.count()).group_by(TableRuntimeRow.status_code)
    return {int(code): int(n) for code, n in session.execute(query)}


@dataclass(frozen=True)
class TableGauge:
    table_id: int
    catalog: str
    database: str
    table: str
    status_code: int
    group: str
    summary: dict[str, Any]
    status_since: datetime


def table_gauges(session: Session) -> list[TableGauge]:
    """What the metrics show of every managed table."""
    query = select(
        TableIdentifierRow.table_id,
        TableIdentifierRow.catalog_name,
        TableIdentifierRow.db_name,
        TableIdentifierRow.table_name,
        TableRuntimeRow.status_code,
        TableRuntimeRow.optimizing_group,
        TableRuntimeRow.summary,
        TableRuntimeRow.status_changed_at,
    ).join(TableRuntimeRow, TableRuntimeRow.table_id == TableIdentifierRow.table_id)
    return [
        TableGauge(int(r[0]), r[1], r[2], r[3], int(r[4]), r[5], r[6] or {}, as_utc(r[7]))
        for r in session.execute(query)
    ]


@dataclass(frozen=True)
class GroupLoad:
    optimizers: int
    threads: int
    busy: int  # tasks held by its optimizers (scheduled or acked)
    queued: int  # planned tasks of its running processes


def group_load(session: Session) -> dict[str, GroupLoad]:
    per_group = select(OptimizerRow.group_name, func.count(), func.sum(OptimizerRow.parallelism))
    optimizers = {g: (int(n), int(t or 0)) for g, n, t in session.execute(per_group.group_by(OptimizerRow.group_name))}
    tasks: dict[tuple[str, str], int] = {
        (g, s): int(n)
        for g, s, n in session.execute(
            select(ProcessRow.group_name, TaskRow.status, func.count())
            .join(ProcessRow, ProcessRow.process_id == TaskRow.process_id)
            .where(ProcessRow.status == ProcessStatus.RUNNING.value)
            .group_by(ProcessRow.group_name, TaskRow.status)
        )
    }
    groups = set(session.scalars(select(ResourceGroupRow.name))) | set(optimizers) | {g for g, _ in tasks}
    return {
        g: GroupLoad(
            optimizers=optimizers.get(g, (0, 0))[0],
            threads=optimizers.get(g, (0, 0))[1],
            busy=sum(tasks.get((g, s.value), 0) for s in TASK_ACTIVE),
            queued=tasks.get((g, TaskStatus.PLANNED.value), 0),
        )
        for g in groups
    }


def pending_tables(session: Session) -> dict[str, int]:
    """Pending tables per group."""
    query = (
        select(TableRuntimeRow.optimizing_group, func.count())
        .where(TableRuntimeRow.status_code == int(TableStatus.PENDING))
        .group_by(TableRuntimeRow.optimizing_group)
    )
    return {group: int(n) for group, n in session.execute(query)}


def catalog_health(session: Session) -> list[tuple[str, str]]:
    return [(name, health) for name, health in session.execute(select(CatalogRow.name, CatalogRow.health))]
