"""What another optimizing policy would have done to a table, beside what the current one did: the table's
recorded commits and scans replayed (domain/what_if.py), for the what-if of a table and the shadow of a group."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.what_if import Policy, Projection, Table, replay
from lakewarden.store import budget as budget_store
from lakewarden.store import what_if as store
from lakewarden.store.tables import TableRecord


@dataclass(frozen=True)
class WhatIf:
    table: str
    since: datetime
    until: datetime
    commits: int  # writers' commits replayed (lakewarden's own left out)
    actual: Projection  # what the current policy did: its processes, and the scans as they were
    projections: list[Projection]
    note: str | None = None


def what_if(session: Session, rec: TableRecord, policies: list[Policy], since: datetime, until: datetime) -> WhatIf:
    name = rec.identifier
    owner = (name.catalog_name, name.db_name, name.table_name)
    commits = store.commits(session, owner, since, until)
    scans = store.scans(session, owner, since, until)
    config = OptimizingConfig.of(rec.runtime.config)
    interval = config.minor_trigger_interval_ms
    table = Table(
        target_size=config.target_size,
        fragment_threshold=config.fragment_threshold,
        minor_trigger_file_count=config.minor_trigger_file_count,
        minor_trigger_interval=None if interval < 0 else timedelta(milliseconds=interval),
        cpu_seconds_per_byte=budget_store.cpu_seconds_per_byte(session, rec.runtime.optimizing_group),
    )
    done = store.optimizing_done(session, rec.runtime.table_id, since, until)
    actual = Projection(
        "actual",
        processes=done.processes,
        cpu_seconds=done.cpu_seconds,
        bytes_rewritten=done.bytes_rewritten,
        scans=len(scans),
        files_per_scan=sum(s.files for s in scans) / len(scans) if scans else 0.0,
        delete_files_per_scan=sum(s.delete_files for s in scans) / len(scans) if scans else 0.0,
    )
    note = None
    if not commits:
        note = (
            "no commits to replay: the commit timeline is kept for the tables of lakewarden's own catalogs "
            "(and those it forwards to), from their first commit through it"
        )
    return WhatIf(
        table=str(rec.name),
        since=since,
        until=until,
        commits=sum(1 for c in commits[1:] if not c.own),
        actual=actual,
        projections=[replay(p, table, commits, scans, until) for p in policies],
        note=note,
    )


SHADOW_TABLES = 200  # a group's tables a shadow report replays at most (the first by name)


@dataclass(frozen=True)
class Totals:
    processes: int
    cpu_seconds: float
    bytes_rewritten: int
    scans: int
    files_per_scan: float  # over every table's scans

    @staticmethod
    def of(projections: list[Projection]) -> Totals:
        scans = sum(p.scans for p in projections)
        files = sum(p.files_per_scan * p.scans for p in projections)
        return Totals(
            processes=sum(p.processes for p in projections),
            cpu_seconds=sum(p.cpu_seconds for p in projections),
            bytes_rewritten=sum(p.bytes_rewritten for p in projections),
            scans=scans,
            files_per_scan=files / scans if scans else 0.0,
        )


@dataclass(frozen=True)
class Shadow:
    """A group's shadow policy over its period, beside what the group's own policy did, table by table."""

    group: str
    policy: str
    since: datetime
    until: datetime
    actual: Totals
    shadow: Totals
    tables: list[WhatIf]
    tables_omitted: int


def shadow(
    session: Session, group: str, policy: Policy, tables: list[TableRecord], since: datetime, until: datetime
) -> Shadow:
    replayed = [what_if(session, rec, [policy], since, until) for rec in tables[:SHADOW_TABLES]]
    return Shadow(
        group=group,
        policy=policy.name,
        since=since,
        until=until,
        actual=Totals.of([w.actual for w in replayed]),
        shadow=Totals.of([w.projections[0] for w in replayed]),
        tables=replayed,
        tables_omitted=max(0, len(tables) - SHADOW_TABLES),
    )
