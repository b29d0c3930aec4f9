"""What a what-if replay (domain/what_if.py) reads: a table's commits and scans in a window, and what its own
optimizing processes did in it. Reads only."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.domain.costs import cpu_seconds
from lakewarden.domain.processes import Action
from lakewarden.domain.reads import ReportKind
from lakewarden.domain.retention import OWN_COMMIT
from lakewarden.domain.states import ProcessStatus
from lakewarden.domain.what_if import Commit, Scan
from lakewarden.store.database import as_utc
from lakewarden.store.models import CommitRow, ProcessRow, TableReadRow

Owner = tuple[str, str, str]


def commits(session: Session, owner: Owner, since: datetime, until: datetime) -> list[Commit]:
    """The table's commits in [since, until), after the newest one before `since` (the state the window starts
    from), oldest first; those without a snapshot (schema and property changes) left out."""
    row = CommitRow
    mine = (row.catalog_name == owner[0], row.namespace == owner[1], row.table_name == owner[2])
    has_snapshot = row.snapshot_id.is_not(None)
    before = session.execute(
        select(row.committed_at, row.summary)
        .where(*mine, has_snapshot, row.committed_at < since)
        .order_by(row.commit_id.desc())
        .limit(1)
    ).all()
    inside = session.execute(
        select(row.committed_at, row.summary)
        .where(*mine, has_snapshot, row.committed_at >= since, row.committed_at < until)
        .order_by(row.commit_id)
    ).all()
    return [
        Commit.of(as_utc(at), {k: str(v) for k, v in (summary or {}).items()}, OWN_COMMIT in (summary or {}))
        for at, summary in [*before, *inside]
    ]


def scans(session: Session, owner: Owner, since: datetime, until: datetime) -> list[Scan]:
    row = TableReadRow
    rows = session.execute(
        select(row.reported_at, row.data_files, row.delete_files)
        .where(
            row.catalog_name == owner[0],
            row.namespace == owner[1],
            row.table_name == owner[2],
            row.kind == ReportKind.SCAN.value,
            row.reported_at >= since,
            row.reported_at < until,
        )
        .order_by(row.read_id)
    )
    return [Scan(as_utc(at), data + deletes, deletes) for at, data, deletes in rows]


class Done(NamedTuple):
    processes: int
    cpu_seconds: float
    bytes_rewritten: int


def optimizing_done(session: Session, table_id: int, since: datetime, until: datetime) -> Done:
    """The table's successful optimizing processes that ended in the window: how many, their CPU, their bytes."""
    summaries = list(
        session.scalars(
            select(ProcessRow.summary).where(
                ProcessRow.table_id == table_id,
                ProcessRow.action == Action.OPTIMIZING.value,
                ProcessRow.status == ProcessStatus.SUCCESS.value,
                ProcessRow.end_time >= since,
                ProcessRow.end_time < until,
            )
        )
    )
    cpu = sum(cpu_seconds(s, "spark_") for s in summaries)
    return Done(len(summaries), cpu, sum(int((s or {}).get("bytes_in", 0)) for s in summaries))
