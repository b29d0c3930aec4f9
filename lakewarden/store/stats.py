"""Aggregates over the system database for the overview, the dashboard and the Prometheus metrics.

Everything is counted in the database (process results are summed from their JSON summaries), so
the numbers survive restarts and agree across whatever reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from lakewarden.domain.costs import COST, USAGE_FIELDS
from lakewarden.domain.states import TASK_ACTIVE, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.store.database import as_utc
from lakewarden.store.models import (
    CatalogRow,
    OptimizerRow,
    ProcessRow,
    ProcessStreakRow,
    ProcessTotalsRow,
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
    "yields",  # kept by count_yield: work of the process undone for writers, and its CPU
    "yielded_cpu_ms",
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


RowT = TypeVar("RowT", ProcessTotalsRow, ProcessStreakRow)
TOTALS_KEY = ("catalog_name", "db_name", "table_name", "action", "type", "status")
_TOTALS_KEYS = tuple(getattr(ProcessRow, key) for key in TOTALS_KEY)
# built once: a sum of a JSON field per result is many expressions, and the table page and metrics ask every time
_RUNNING_TOTALS = select(
    *_TOTALS_KEYS,
    func.count(),
    *(func.coalesce(func.sum(ProcessRow.summary[f].as_float()), 0) for f in RESULT_FIELDS),
).where(ProcessRow.status == ProcessStatus.RUNNING.value)


def process_totals(session: Session, table: tuple[str, str, str] | None = None) -> list[ProcessTotals]:
    """Processes counted, and their results summed, per table, action, type and status, of every table or of one:
    those ended (from their running totals, however many are kept in history) and those running. Reads as many
    rows as there are keys and running processes, not processes ever run."""
    keys, running = _TOTALS_KEYS, _RUNNING_TOTALS
    ended = select(ProcessTotalsRow)
    if table is not None:
        running = running.where(*(column == value for column, value in zip(keys[:3], table, strict=True)))
        ended = ended.where(
            ProcessTotalsRow.catalog_name == table[0],
            ProcessTotalsRow.db_name == table[1],
            ProcessTotalsRow.table_name == table[2],
        )
    totals: dict[tuple[str, ...], ProcessTotals] = {}
    for r in session.execute(running.group_by(*keys)):
        totals[tuple(r[:6])] = ProcessTotals(
            r[0], r[1], r[2], r[3], r[4], r[5], int(r[6]), dict(zip(RESULT_FIELDS, map(number, r[7:]), strict=True))
        )
    for p in session.scalars(ended):  # one row per group that ran the table's processes of a kind
        key = (p.catalog_name, p.db_name, p.table_name, p.action, p.type, p.status)
        known = totals.get(key)
        count = p.count + (known.count if known else 0)
        summed = {f: number(p.sums.get(f, 0)) + (known.sums[f] if known else 0) for f in RESULT_FIELDS}
        totals[key] = ProcessTotals(*key, count, summed)
    return list(totals.values())


def count_yield(session: Session, process_id: int, cpu_ms: float) -> None:
    """Adds one of an ended process's yields (services/processes/yields.py) to its running totals."""
    row = session.execute(
        select(*(getattr(ProcessRow, key) for key in TOTALS_KEY), ProcessRow.group_name).where(
            ProcessRow.process_id == process_id
        )
    ).one()
    key = dict(zip((*TOTALS_KEY, "group_name"), row, strict=True))
    totals = locked_row(session, ProcessTotalsRow, key, count=0, sums={})
    sums = dict(totals.sums)
    sums["yields"] = number(sums.get("yields", 0)) + 1
    sums["yielded_cpu_ms"] = number(sums.get("yielded_cpu_ms", 0)) + cpu_ms
    totals.sums = sums
    session.flush()


def count_ended(session: Session, process_id: int) -> None:
    """Adds an ended process to its running totals (its count and its summary's results). Called in the
    transaction that ends it; the row is locked meanwhile (PostgreSQL; SQLite has one writer)."""
    row = session.execute(
        select(*(getattr(ProcessRow, key) for key in TOTALS_KEY), ProcessRow.group_name, ProcessRow.summary).where(
            ProcessRow.process_id == process_id
        )
    ).one()
    key = dict(zip((*TOTALS_KEY, "group_name"), row[:7], strict=True))
    totals = locked_row(session, ProcessTotalsRow, key, count=0, sums={})
    summary = row[7] or {}
    totals.count += 1
    totals.sums = {f: number(totals.sums.get(f, 0)) + number(summary.get(f, 0)) for f in RESULT_FIELDS}
    session.flush()


def locked_row(session: Session, model: type[RowT], key: dict[str, Any], **initial: Any) -> RowT:
    """The row of `model` with primary key `key`, locked for this transaction; made with `initial` if missing."""
    query = select(model).filter_by(**key).with_for_update()
    found = session.scalars(query).first()
    if found is None:
        try:
            with session.begin_nested():  # another transaction may be adding the same row
                session.add(model(**key, **initial))
        except IntegrityError:
            pass
        found = session.scalars(query).one()
    return found


USAGE = (*USAGE_FIELDS, COST)


def usage_of(totals: list[ProcessTotals]) -> dict[str, float]:
    """What processes cost together: Spark's figures (`spark_*`) and their cost."""
    usage: dict[str, float] = dict.fromkeys(USAGE, 0)
    for row in totals:
        for field in USAGE:
            usage[field] += row.sums.get(field, 0)
    return usage


def group_usage(session: Session) -> dict[str, dict[str, float]]:
    """What each group's ended processes cost, by the group that ran them."""
    per_group: dict[str, dict[str, float]] = {}
    for group, sums_of in session.execute(select(ProcessTotalsRow.group_name, ProcessTotalsRow.sums)):
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
class GroupGauge:
    """A group's optimizers and tasks as its gauges show them (the load dynamic allocation judges is
    domain/dynamic_allocation.GroupLoad)."""

    optimizers: int
    threads: int
    busy: int  # tasks held by its optimizers (scheduled or acked)
    queued: int  # planned tasks of its running processes


def group_load(session: Session) -> dict[str, GroupGauge]:
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
        g: GroupGauge(
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
