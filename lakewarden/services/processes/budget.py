"""A budgeted group's choice among its pending tables (domain/budget.py says the rules): the numbers gathered
from the system database, the table picked, and why each other one waits. The dispatcher picks with it; the
tables API explains a deferral with it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.budget import (
    BudgetConfig,
    Layout,
    RecentReads,
    Spend,
    TableValue,
    by_value,
    chosen_reason,
    deferral,
    may_go,
    value_of,
)
from lakewarden.domain.reads import WEEK
from lakewarden.domain.tables import TableStatus
from lakewarden.store import budget as store
from lakewarden.store import reads as reads_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import as_utc
from lakewarden.store.groups import get_group
from lakewarden.store.tables import TableRecord


@dataclass(frozen=True)
class Weighed:
    """A budgeted group's pending tables by value, and its spend."""

    config: BudgetConfig
    order: list[tuple[TableValue, TableRecord]]
    spend: Spend
    frees_at: datetime
    reads: dict[str, RecentReads]  # by table name

    def pick(self) -> tuple[TableValue, TableRecord] | None:
        """The most valuable table that may go (domain/budget.py's `may_go`): within the budget and scanned since
        its last process; past a hard limit regardless."""
        return next(((v, r) for v, r in self.order if may_go(v, self.spend, self.config)), None)

    def why(self, chosen: TableValue) -> dict[str, Any]:
        """Why the table was picked: kept with its process as `scheduling`, like the other policies' reasons."""
        others = [v for v, _ in self.order if v is not chosen]
        return {
            "policy": "value",
            "candidates": len(self.order),
            "chosen": _numbers(chosen),
            "runner_up": _numbers(others[0]) if others else None,
            "budget": self.config.cpu_seconds_per_hour,
            "window_seconds": self.config.window.total_seconds(),
            "spent": round(self.spend.total, 3),
            "reason": chosen_reason(chosen, self.spend, self.config, len(others)),
        }

    def deferral(self, name: str, now: datetime) -> str | None:
        """Why the table waits; None when it is the one picked next, or not pending here."""
        picked = self.pick()
        for rank, (value, rec) in enumerate(self.order, start=1):
            if value.name != name:
                continue
            if picked is not None and picked[0] is value:
                return None
            small = int((rec.runtime.evaluation or {}).get("small_files", 0))
            last = self.reads[name].last_scan_at
            return deferral(value, rank, self.spend, self.config, small, last, now, self.frees_at)
        return None


def _numbers(value: TableValue) -> dict[str, Any]:
    return {
        "table": value.name,
        "value": round(value.value, 6),
        "scans_per_hour": round(value.scans_per_hour, 4),
        "files_per_scan": round(value.files_per_scan, 3),
        "removed_share": round(value.removed_share, 4),
        "expected_cpu_seconds": round(value.expected_cpu_seconds, 3),
        "hard_limit": value.hard_limit,
    }


def _layout(rec: TableRecord) -> Layout:
    verdict: dict[str, Any] = rec.runtime.evaluation or {}
    return Layout(
        data_files=int(verdict.get("data_files", 0)),
        small_files=int(verdict.get("small_files", 0)),
        delete_files=int(verdict.get("delete_files", 0)),
        pending_partitions=int(verdict.get("pending_partitions", 0)),
        cost_bytes=int(verdict.get("cost_bytes", 0)),
    )


def _optimized_at(rec: TableRecord) -> datetime | None:
    """When the table's last optimizing process (of any type) ended successfully."""
    r = rec.runtime
    ended = [
        as_utc(t) for t in (r.last_minor_optimizing_at, r.last_major_optimizing_at, r.last_full_optimizing_at) if t
    ]
    return max(ended, default=None)


def weigh(session: Session, group: str, config: BudgetConfig, pending: list[TableRecord], now: datetime) -> Weighed:
    """The group's pending tables (those that may be planned now) weighed by value."""
    rates = reads_store.scan_rates(session, now - timedelta(days=1), now - WEEK)
    per_byte = store.cpu_seconds_per_byte(session, group)
    spend, frees_at = store.group_spend(session, group, now, config.window)
    reads: dict[str, RecentReads] = {}
    values = []
    for rec in pending:
        name = str(rec.name)
        scans, files, last = rates.get(
            (rec.identifier.catalog_name, rec.identifier.db_name, rec.identifier.table_name), (0, 0.0, None)
        )
        reads[name] = RecentReads(scans, files, last)
        values.append((value_of(name, _layout(rec), reads[name], per_byte, config, _optimized_at(rec)), rec))
    ranked = by_value([v for v, _ in values])
    records = {v.name: rec for v, rec in values}
    return Weighed(config, [(v, records[v.name]) for v in ranked], spend, frees_at, reads)


def budget_of(session: Session, group: str) -> BudgetConfig | None:
    return BudgetConfig.of(get_group(session, group).properties)


def deferral_of(session: Session, rec: TableRecord, now: datetime) -> str | None:
    """Why a pending table of a budgeted group waits (None: not pending, no budget, or it goes next)."""
    if rec.runtime.status_code != TableStatus.PENDING:
        return None
    config = budget_of(session, rec.runtime.optimizing_group)
    if config is None:
        return None
    pending = table_store.list_tables(session, status=TableStatus.PENDING, group=rec.runtime.optimizing_group)
    return weigh(session, rec.runtime.optimizing_group, config, pending, now).deferral(str(rec.name), now)
