"""What a budgeted group (domain/budget.py) weighs: its spend over the last hour, and what its processes cost per
byte. Flush, never commit."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.domain.budget import DEFAULT_CPU_SECONDS_PER_GIB, SPEND_WINDOW, Spend
from lakewarden.domain.costs import cpu_seconds
from lakewarden.domain.processes import Action
from lakewarden.domain.states import TASK_ACTIVE, ProcessStatus
from lakewarden.store.database import as_utc
from lakewarden.store.models import ProcessRow, TaskRow

RATE_FROM = 50  # the group's newest successful optimizing processes its cost per byte is taken from


def _tasks(
    session: Session, group: str, since: datetime
) -> list[tuple[str, datetime | None, datetime | None, dict[str, Any]]]:
    rows = session.execute(
        select(TaskRow.status, TaskRow.acked_at, TaskRow.ended_at, TaskRow.usage)
        .join(ProcessRow, ProcessRow.process_id == TaskRow.process_id)
        .where(
            ProcessRow.group_name == group,
            ProcessRow.action == Action.OPTIMIZING.value,
            (TaskRow.ended_at >= since) | TaskRow.status.in_([s.value for s in TASK_ACTIVE]),
        )
    )
    return [(s, a, e, u or {}) for s, a, e, u in rows]


def group_spend(
    session: Session, group: str, now: datetime, window: timedelta = SPEND_WINDOW
) -> tuple[Spend, datetime]:
    """The group's optimizing spend over the window before `now`, and when it drops below what it is now by the
    spend of the oldest task that ended in the window (the next time the budget may free)."""
    since = now - window
    ended: list[tuple[datetime, float]] = []
    running = 0.0
    for status, acked, ended_at, usage in _tasks(session, group, since):
        if status in {s.value for s in TASK_ACTIVE}:
            if acked is not None:
                running += max(0.0, (now - max(as_utc(acked), since)).total_seconds())
        elif ended_at is not None:
            ended.append((as_utc(ended_at), cpu_seconds(usage)))
    ended.sort()
    frees_at = ended[0][0] + window if ended else now + window
    return Spend(sum(cpu for _, cpu in ended), running), frees_at


def cpu_seconds_per_byte(session: Session, group: str) -> float:
    """CPU-seconds per byte read of the group's newest successful optimizing processes (a default before any)."""
    summaries = session.scalars(
        select(ProcessRow.summary)
        .where(
            ProcessRow.group_name == group,
            ProcessRow.action == Action.OPTIMIZING.value,
            ProcessRow.status == ProcessStatus.SUCCESS.value,
        )
        .order_by(ProcessRow.process_id.desc())
        .limit(RATE_FROM)
    )
    cpu, read = 0.0, 0
    for summary in summaries:
        cpu += cpu_seconds(summary, "spark_")
        read += int((summary or {}).get("bytes_in", 0))
    if cpu <= 0 or read <= 0:
        return DEFAULT_CPU_SECONDS_PER_GIB / 1024**3
    return cpu / read
