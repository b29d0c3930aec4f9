"""Scans and commits of tables as reported (domain/reads.py), kept per table. Flush, never commit.

Pruned like the timeline (store/history.prune_reads): by age and by count per table, the newest kept.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, bindparam, case, func, insert, select
from sqlalchemy.orm import Session

from lakewarden.domain.benefits import ReadCost
from lakewarden.domain.processes import Action
from lakewarden.domain.reads import HourOfReads, ReadReport, ReportedRead, ReportKind
from lakewarden.domain.states import ProcessStatus
from lakewarden.store.database import as_utc
from lakewarden.store.models import ProcessRow, TableIdentifierRow, TableReadRow, TableRuntimeRow

Owner = tuple[str, str, str]  # catalog, namespace, table
OPTIMIZING = Action.OPTIMIZING.value
BENEFIT = "benefit"  # a process summary's key: what it bought, once settled (services/tables/reads.py)


def record_read(session: Session, owner: Owner, report: ReadReport, at: datetime) -> None:
    catalog, namespace, table = owner
    session.execute(
        insert(TableReadRow).values(
            catalog_name=catalog,
            namespace=namespace,
            table_name=table,
            reported_at=at,
            kind=report.kind.value,
            source=report.source.value,
            snapshot_id=report.snapshot_id,
            data_files=report.data_files,
            delete_files=report.delete_files,
            data_bytes=report.data_bytes,
            delete_bytes=report.delete_bytes,
            manifests=report.manifests,
            planning_ms=report.planning_ms,
            partition=report.partition,
            filter=report.filter,
            engine=report.engine,
            principal=report.principal,
            operation=report.operation,
        )
    )


def known_partitions(session: Session, owner: Owner) -> list[str]:
    """The partitions of the table the evaluator last listed (the pending ones first); none for a table
    lakewarden does not manage."""
    evaluation = session.scalar(
        select(TableRuntimeRow.evaluation)
        .join(TableIdentifierRow, TableIdentifierRow.table_id == TableRuntimeRow.table_id)
        .where(
            TableIdentifierRow.catalog_name == owner[0],
            TableIdentifierRow.db_name == owner[1],
            TableIdentifierRow.table_name == owner[2],
        )
    )
    return [str(p["partition"]) for p in (evaluation or {}).get("partitions", []) if p.get("partition")]


def _owned() -> ColumnElement[bool]:
    """The rows of one table, named by the parameters `catalog`, `namespace`, `table` (`_owner_parameters`): the
    statements that use it can be built once."""
    row = TableReadRow
    return and_(
        row.catalog_name == bindparam("catalog"),
        row.namespace == bindparam("namespace"),
        row.table_name == bindparam("table"),
    )


def _owner_parameters(owner: Owner) -> dict[str, str]:
    return {"catalog": owner[0], "namespace": owner[1], "table": owner[2]}


def reads_since(session: Session, owner: Owner, since: datetime, limit: int) -> list[ReportedRead]:
    """The table's reports since `since`, newest first, at most `limit`."""
    row = TableReadRow
    rows = session.execute(
        select(
            row.reported_at,
            row.kind,
            row.source,
            row.data_files,
            row.delete_files,
            row.data_bytes,
            row.delete_bytes,
            row.planning_ms,
            row.partition,
            row.engine,
            row.principal,
        )
        .where(_owned(), row.reported_at >= since)
        .order_by(row.read_id.desc())
        .limit(limit),
        _owner_parameters(owner),
    )
    return [ReportedRead(as_utc(r[0]), *r[1:]) for r in rows]


@functools.cache  # a table page asks every time, and the expressions cost more to build than the query to run
def _hourly_statement(count: int) -> Any:
    """Scans, commits and planned files per hour and kind of `count` contiguous hours starting at the parameters
    `h0`… (the table named by `catalog`, `namespace`, `table`), the hour of a row found by a CASE."""
    row = TableReadRow
    starts = [bindparam(f"h{i}", type_=row.reported_at.type) for i in range(count + 1)]  # the last: the end
    # the index of the hour a row falls in: the latest start it is not before
    hour = case(*((row.reported_at >= starts[i], i) for i in reversed(range(count))), else_=-1)
    rows = (
        select(hour.label("hour"), row.kind.label("kind"), (row.data_files + row.delete_files).label("files"))
        .where(_owned(), row.reported_at >= starts[0], row.reported_at < starts[-1])
        .subquery()
    )
    return select(rows.c.hour, rows.c.kind, func.count(), func.sum(rows.c.files)).group_by(rows.c.hour, rows.c.kind)


def hourly_counts(session: Session, owner: Owner, hours: list[datetime]) -> list[HourOfReads]:
    """Scans, commits and the files scans planned in each hour starting at `hours` (ascending, contiguous): one
    query grouping the rows by their hour and kind, a few rows back."""
    bounds = [*hours, hours[-1] + timedelta(hours=1)]
    params = {f"h{i}": start for i, start in enumerate(bounds)}
    counts = session.execute(_hourly_statement(len(hours)), {**params, **_owner_parameters(owner)})
    scans, planned, commits = [0] * len(hours), [0] * len(hours), [0] * len(hours)
    for index, kind, count, files in counts:
        if kind == ReportKind.SCAN.value:
            scans[index], planned[index] = int(count), int(files or 0)
        elif kind == ReportKind.COMMIT.value:
            commits[index] = int(count)
    return [
        HourOfReads(start, scans[i], planned[i] / scans[i] if scans[i] else 0.0, commits[i])
        for i, start in enumerate(hours)
    ]


def scans_since(session: Session, owner: Owner, since: datetime) -> int:
    row = TableReadRow
    return int(
        session.scalar(
            select(func.count()).where(_owned(), row.kind == ReportKind.SCAN.value, row.reported_at >= since),
            _owner_parameters(owner),
        )
        or 0
    )


class ScanGauge(NamedTuple):
    catalog: str
    namespace: str
    table: str
    scans: int
    files: float  # data and delete files per scan, on average
    delete_files: float


def scan_gauges(session: Session, since: datetime) -> list[ScanGauge]:
    """Per table with scans since `since`: how many, and the files they planned on average."""
    row = TableReadRow
    rows = session.execute(
        select(
            row.catalog_name,
            row.namespace,
            row.table_name,
            func.count(),
            func.avg(row.data_files + row.delete_files),
            func.avg(row.delete_files),
        )
        .where(row.kind == ReportKind.SCAN.value, row.reported_at >= since)
        .group_by(row.catalog_name, row.namespace, row.table_name)
    )
    return [ScanGauge(r[0], r[1], r[2], int(r[3]), float(r[4] or 0), float(r[5] or 0)) for r in rows]


def _windows_statement() -> Any:
    """What the table's scans (`catalog`, `namespace`, `table`) read on average in two windows, [before_start,
    before_end) and [after_start, after_end), among the rows in [first, last)."""
    row = TableReadRow
    files, bytes_ = row.data_files + row.delete_files, row.data_bytes + row.delete_bytes
    columns: list[Any] = []
    for window in ("before", "after"):
        start, end = (bindparam(f"{window}_{edge}", type_=row.reported_at.type) for edge in ("start", "end"))
        inside = and_(row.reported_at >= start, row.reported_at < end)
        columns += [
            func.count(case((inside, 1))),
            func.avg(case((inside, files))),
            func.avg(case((inside, row.delete_files))),
            func.avg(case((inside, bytes_))),
        ]
    return select(*columns).where(
        _owned(),
        row.kind == ReportKind.SCAN.value,
        row.reported_at >= bindparam("first", type_=row.reported_at.type),
        row.reported_at < bindparam("last", type_=row.reported_at.type),
    )


_WINDOWS = _windows_statement()  # built once: a process list measures every process it shows


def read_costs(
    session: Session, owner: Owner, before: tuple[datetime, datetime], after: tuple[datetime, datetime]
) -> tuple[ReadCost, ReadCost]:
    """What the table's scans in the window `before` and in the window `after` ([start, end) each) read, on
    average: one query."""
    params = {
        **_owner_parameters(owner),
        "before_start": before[0],
        "before_end": before[1],
        "after_start": after[0],
        "after_end": after[1],
        "first": min(before[0], after[0]),
        "last": max(before[1], after[1]),
    }
    found = session.execute(_WINDOWS, params).one()
    return (
        ReadCost(int(found[0]), float(found[1] or 0), float(found[2] or 0), float(found[3] or 0)),
        ReadCost(int(found[4]), float(found[5] or 0), float(found[6] or 0), float(found[7] or 0)),
    )


def optimizing_starts(session: Session, table_ids: Collection[int], after: datetime) -> dict[int, list[datetime]]:
    """When each table's optimizing processes planned after `after` were planned, per table, in order."""
    starts: dict[int, list[datetime]] = {table_id: [] for table_id in table_ids}
    if not starts:
        return starts
    rows = session.execute(
        select(ProcessRow.table_id, ProcessRow.plan_time)
        .where(ProcessRow.table_id.in_(starts), ProcessRow.action == OPTIMIZING, ProcessRow.plan_time > after)
        .order_by(ProcessRow.plan_time)
    )
    for table_id, planned in rows:
        starts[table_id].append(as_utc(planned))
    return starts


def judged_processes(session: Session, ended_after: datetime, group: str | None = None) -> list[ProcessRow]:
    """Successful optimizing processes that ended after `ended_after` (of one group), oldest first."""
    query = select(ProcessRow).where(
        ProcessRow.action == OPTIMIZING,
        ProcessRow.status == ProcessStatus.SUCCESS.value,
        ProcessRow.end_time >= ended_after,
    )
    if group is not None:
        query = query.where(ProcessRow.group_name == group)
    return list(session.scalars(query.order_by(ProcessRow.process_id)))


def keep_benefit(session: Session, process_id: int, benefit: dict[str, object]) -> None:
    """Writes a settled benefit into the process's summary."""
    process = session.get(ProcessRow, process_id)
    if process is not None:
        process.summary = {**(process.summary or {}), BENEFIT: benefit}


def settled_benefits(session: Session, ended_after: datetime) -> dict[str, list[dict[str, Any]]]:
    """Per group: the settled benefits of its successful optimizing processes that ended after `ended_after`."""
    rows = session.execute(
        select(ProcessRow.group_name, ProcessRow.summary).where(
            ProcessRow.action == OPTIMIZING,
            ProcessRow.status == ProcessStatus.SUCCESS.value,
            ProcessRow.end_time >= ended_after,
        )
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for group, summary in rows:
        kept = (summary or {}).get(BENEFIT)
        if kept is not None:
            found.setdefault(group, []).append(kept)
    return found


def scan_rates(session: Session, day_ago: datetime, since: datetime) -> dict[Owner, tuple[int, float, datetime]]:
    """Per table scanned since `since`: its scans since `day_ago`, their files per scan on average, and its last
    scan."""
    row = TableReadRow
    recent = row.reported_at >= day_ago
    files = row.data_files + row.delete_files
    rows = session.execute(
        select(
            row.catalog_name,
            row.namespace,
            row.table_name,
            func.sum(case((recent, 1), else_=0)),
            func.avg(case((recent, files), else_=None)),
            func.max(row.reported_at),
        )
        .where(row.kind == ReportKind.SCAN.value, row.reported_at >= since)
        .group_by(row.catalog_name, row.namespace, row.table_name)
    )
    return {(c, n, t): (int(scans or 0), float(avg or 0), as_utc(last)) for c, n, t, scans, avg, last in rows}
