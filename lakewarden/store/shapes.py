"""Samples over time for the dashboard's charts: each table's shape and each group's load. Flush, never commit.

A table's shape is sampled when the evaluator records a verdict that differs from the newest sample (another
snapshot, or another health), at most once per interval: a change inside the interval is deferred, and the
evaluator looks at the table again when the interval is over (`Sampling.deferred_until`), so the newest state
is always sampled soon, and a table committing every second costs one row per interval. A group's load is
sampled by the leader every interval. Both are pruned by age and count
(store/history.py), the newest of each table (group) kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from lakewarden.domain.tables import TableHealth
from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import GroupLoadRow, TableShapeRow
from lakewarden.store.stats import GroupGauge


@dataclass(frozen=True)
class Shape:
    snapshot_id: int | None
    data_files: int
    delete_files: int
    small_files: int
    total_bytes: int
    health: str


def shape_of(evaluation: dict[str, Any], summary: dict[str, Any]) -> Shape | None:
    """A table's shape from the evaluator's verdict (files, small files, health) and its snapshot summary
    (bytes); None when the verdict counted no files (it failed, or a property is invalid)."""
    if "data_files" not in evaluation:
        return None
    return Shape(
        snapshot_id=evaluation.get("snapshot_id"),
        data_files=int(evaluation["data_files"]),
        delete_files=int(evaluation.get("delete_files", 0)),
        small_files=int(evaluation.get("small_files", 0)),
        total_bytes=int(summary.get("files-size-bytes", 0) or 0),
        health=TableHealth.of(evaluation).label,
    )


@dataclass(frozen=True)
class Sampling:
    sampled: bool
    deferred_until: datetime | None = None  # a change inside the interval: when it may be sampled


def sample_table_shape(session: Session, table_id: int, shape: Shape, interval: timedelta) -> Sampling:
    """Records the shape unless it is the newest sample's, or the newest is younger than `interval`."""
    return sample_table_shapes(session, {table_id: shape}, interval)[table_id]


def sample_table_shapes(session: Session, shapes: dict[int, Shape], interval: timedelta) -> dict[int, Sampling]:
    """`sample_table_shape` for many tables: one query for their newest samples, one insert of the new ones."""
    newest_ids = (
        select(func.max(TableShapeRow.sample_id))
        .where(TableShapeRow.table_id.in_(list(shapes)))
        .group_by(TableShapeRow.table_id)
        .scalar_subquery()
    )
    newest = {
        row.table_id: row
        for row in session.scalars(select(TableShapeRow).where(TableShapeRow.sample_id.in_(newest_ids)))
    }
    now = utcnow()
    found: dict[int, Sampling] = {}
    rows: list[dict[str, Any]] = []
    for table_id, shape in shapes.items():
        last = newest.get(table_id)
        if last is not None:
            same = (last.snapshot_id, last.health, last.data_files, last.delete_files) == (
                shape.snapshot_id,
                shape.health,
                shape.data_files,
                shape.delete_files,
            )
            if same:
                found[table_id] = Sampling(False)
                continue
            if now - as_utc(last.sampled_at) < interval:
                found[table_id] = Sampling(False, as_utc(last.sampled_at) + interval)
                continue
        rows.append({"table_id": table_id, "sampled_at": now, **shape.__dict__})
        found[table_id] = Sampling(True)
    if rows:
        session.execute(insert(TableShapeRow), rows)
    session.flush()
    return found


def table_shapes(session: Session, table_id: int, limit: int) -> list[TableShapeRow]:
    """The table's newest `limit` samples, oldest first."""
    query = (
        select(TableShapeRow)
        .where(TableShapeRow.table_id == table_id)
        .order_by(TableShapeRow.sample_id.desc())
        .limit(limit)
    )
    return list(reversed(session.scalars(query).all()))


def sample_group_load(session: Session, load: dict[str, GroupGauge], pending: dict[str, int]) -> int:
    now = utcnow()
    for group, g in sorted(load.items()):
        session.add(
            GroupLoadRow(
                group_name=group,
                sampled_at=now,
                optimizers=g.optimizers,
                threads=g.threads,
                busy=g.busy,
                queued=g.queued,
                pending_tables=pending.get(group, 0),
            )
        )
    session.flush()
    return len(load)


def group_loads(session: Session, group: str, limit: int) -> list[GroupLoadRow]:
    """The group's newest `limit` samples, oldest first."""
    query = (
        select(GroupLoadRow)
        .where(GroupLoadRow.group_name == group)
        .order_by(GroupLoadRow.sample_id.desc())
        .limit(limit)
    )
    return list(reversed(session.scalars(query).all()))
