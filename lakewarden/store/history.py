"""Pruning the server's history: ended processes and their tasks, the commit timeline, reported reads, the
event outbox and the charts' samples, each by age and by count.

Never deleted: a process not ended, the newest process of each action on a table (the maintenance schedule reads
them), each table's newest timeline entry, and the newest event (on SQLite its id could be reused, and readers
follow ids). Each call deletes at most `batch` rows in one short transaction, leaving room for commits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from lakewarden.domain.states import ProcessStatus
from lakewarden.store.models import (
    CommitRow,
    EventRow,
    GroupLoadRow,
    ProcessFileRow,
    ProcessRow,
    TableReadRow,
    TableShapeRow,
    TaskRow,
)

ENDED = [ProcessStatus.SUCCESS.value, ProcessStatus.FAILED.value, ProcessStatus.CANCELED.value]


def prune_processes(session: Session, before: datetime, keep_count: int, batch: int = 5_000) -> int:
    """Deletes ended processes (with their tasks and files) that ended before `before` or are beyond the newest
    `keep_count` of their table and action, the newest of each always kept; returns how many processes were
    deleted."""
    newest_first = func.row_number().over(
        partition_by=(ProcessRow.table_id, ProcessRow.action), order_by=ProcessRow.process_id.desc()
    )
    ranked = select(
        ProcessRow.process_id,
        ProcessRow.status,
        func.coalesce(ProcessRow.end_time, ProcessRow.plan_time).label("at"),
        newest_first.label("n"),
    ).subquery()
    old = (
        select(ranked.c.process_id)
        .where(ranked.c.n > 1, ranked.c.status.in_(ENDED), or_(ranked.c.at < before, ranked.c.n > keep_count))
        .order_by(ranked.c.process_id)
        .limit(batch)
    )
    ids = list(session.scalars(old))
    if ids:  # what they counted stays in the running totals they were added to when they ended (store/stats.py)
        session.execute(delete(ProcessFileRow).where(ProcessFileRow.process_id.in_(ids)))
        session.execute(delete(TaskRow).where(TaskRow.process_id.in_(ids)))
        session.execute(delete(ProcessRow).where(ProcessRow.process_id.in_(ids)))
    return len(ids)


def prune_timeline(session: Session, before: datetime, keep_count: int, batch: int = 20_000) -> int:
    """Deletes timeline entries committed before `before` or beyond the newest `keep_count` of their table, the
    newest of each table always kept; returns how many were deleted."""
    owner = (CommitRow.catalog_name, CommitRow.namespace, CommitRow.table_name)
    return _prune_ranked(session, CommitRow.commit_id, CommitRow.committed_at, owner, before, keep_count, batch)


def prune_reads(session: Session, before: datetime, keep_count: int, batch: int = 20_000) -> int:
    """Deletes the reports of scans and commits (store/reads.py) made before `before` or beyond the newest
    `keep_count` of their table; the newest of each table is always kept."""
    row = TableReadRow
    owner = (row.catalog_name, row.namespace, row.table_name)
    return _prune_ranked(session, row.read_id, row.reported_at, owner, before, keep_count, batch)


def prune_table_shapes(session: Session, before: datetime, keep_count: int, batch: int = 20_000) -> int:
    """Deletes the charts' samples of table shapes (store/shapes.py) taken before `before` or beyond the newest
    `keep_count` of their table; the newest of each table is always kept."""
    row = TableShapeRow
    return _prune_ranked(session, row.sample_id, row.sampled_at, (row.table_id,), before, keep_count, batch)


def prune_group_loads(session: Session, before: datetime, keep_count: int, batch: int = 20_000) -> int:
    """The same for the samples of each group's load."""
    row = GroupLoadRow
    return _prune_ranked(session, row.sample_id, row.sampled_at, (row.group_name,), before, keep_count, batch)


def _prune_ranked(
    session: Session, key: Any, at: Any, owner: tuple[Any, ...], before: datetime, keep_count: int, batch: int
) -> int:
    """Deletes up to `batch` rows (by their id column `key`) whose time `at` is before `before` or that are beyond
    the newest `keep_count` of their `owner`; the newest of each owner stays."""
    newest_first = func.row_number().over(partition_by=owner, order_by=key.desc())
    ranked = select(key.label("id"), at.label("at"), newest_first.label("n")).subquery()
    old = (
        select(ranked.c.id)
        .where(ranked.c.n > 1, or_(ranked.c.at < before, ranked.c.n > keep_count))
        .order_by(ranked.c.id)
        .limit(batch)
    )
    ids = list(session.scalars(old))
    if ids:
        session.execute(delete(key.class_).where(key.in_(ids)))
    return len(ids)


def prune_events(session: Session, before: datetime, keep_count: int, batch: int = 50_000) -> int:
    """Deletes the events created before `before`, and all but the newest `keep_count`; the newest is always kept.
    Events are in id order, oldest first: the boundary is found from the low end, where pruning left off."""
    newest = session.scalar(select(func.max(EventRow.event_id)))
    if newest is None:
        return 0
    young = session.scalar(
        select(EventRow.event_id).where(EventRow.created_at >= before).order_by(EventRow.event_id).limit(1)
    )
    # ids below `end` go: those beyond the newest keep_count, and those older than `before`; never the newest
    end = min(newest, max(newest - keep_count + 1, young if young is not None else newest))
    oldest = session.scalar(select(func.min(EventRow.event_id)))
    if oldest is None or oldest >= end:
        return 0
    end = min(end, oldest + batch)
    result = session.execute(delete(EventRow).where(EventRow.event_id < end))
    return int(result.rowcount)  # type: ignore[attr-defined]
