"""How each table is read: the scan and commit reports its catalog is told, kept and summed up.

Reports come from clients through the REST catalog's metrics endpoint and from the server's own scan planning
(domain/reads.py says what each holds); any node records them (they are not the leader's work). A table's
summary (its page, `GET /api/v1/tables/…` under `reads`) is taken from its reports of the last week.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from urllib.parse import unquote_plus

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from lakewarden.domain.benefits import (
    BENEFIT_WINDOW,
    Benefit,
    NetBenefit,
    benefit_from_json,
    benefit_json,
    benefit_of,
)
from lakewarden.domain.costs import cpu_seconds
from lakewarden.domain.processes import Action
from lakewarden.domain.reads import (
    SAMPLED,
    SANITIZED,
    WEEK,
    ReadReport,
    ReadSummary,
    day_of_hours,
    resolve_partition,
    summarize,
)
from lakewarden.domain.states import ProcessStatus
from lakewarden.store import reads as store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.reads import Owner

log = logging.getLogger(__name__)


class TableReads:
    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    def record(self, owner: Owner, report: ReadReport) -> None:
        """Keeps the report; a partition a client's sanitized filter pinned is named again from the table's
        known partitions where exactly one fits (domain/reads.resolve_partition)."""
        now = self.clock()
        if report.partition is not None and SANITIZED in unquote_plus(report.partition):
            with self.db.read() as session:
                known = store.known_partitions(session, owner)
            report = replace(report, partition=resolve_partition(report.partition, known, now.date()))
        with self.db.write(any_node=True) as session:
            store.record_read(session, owner, report, now)

    def record_quietly(self, owner: Owner, report: ReadReport) -> None:
        """For the server's own plans: a plan is answered even when its record cannot be written (a database
        that is busy or away loses the record, never the scan)."""
        try:
            self.record(owner, report)
        except SQLAlchemyError as exc:
            log.warning("the scan of %s was not recorded: %s", ".".join(owner), exc)

    def summary(self, owner: Owner) -> ReadSummary:
        now = self.clock()
        with self.db.read() as session:
            sample = store.reads_since(session, owner, now - WEEK, SAMPLED)
            hourly = store.hourly_counts(session, owner, day_of_hours(now))
            week = store.scans_since(session, owner, now - WEEK)
        return summarize(sample, hourly, week)

    # ---- what optimizing bought

    def benefit(self, session: Session, process: ProcessRow, now: datetime | None = None) -> Benefit | None:
        """What a successful optimizing process bought (domain/benefits.Benefit): kept in its summary once settled,
        else measured from the reads kept; None for another process, or one that ended a week ago unsettled."""
        return self.benefits(session, [process], now)[0]

    def benefits(
        self, session: Session, processes: Sequence[ProcessRow], now: datetime | None = None
    ) -> list[Benefit | None]:
        """`benefit` of each process, in their order: a query for the next plans of all their tables, and one
        per process measured (a process list shows many)."""
        now = now or self.clock()
        found: list[Benefit | None] = [None] * len(processes)
        measured: list[tuple[int, ProcessRow, datetime]] = []  # with when it ended
        for i, process in enumerate(processes):
            optimized = process.action == Action.OPTIMIZING and process.status == ProcessStatus.SUCCESS
            if not optimized or process.end_time is None:
                continue
            kept = (process.summary or {}).get(store.BENEFIT)
            ended = as_utc(process.end_time)
            if kept is not None:
                found[i] = benefit_from_json(kept)
            elif ended >= now - WEEK:
                measured.append((i, process, ended))
            # else never settled (it ended before reads were kept, or while no leader pruned): not judged
        if not measured:
            return found
        starts = store.optimizing_starts(session, {p.table_id for _, p, _ in measured}, min(e for _, _, e in measured))
        for i, process, ended in measured:
            planned = as_utc(process.plan_time)
            until = ended + BENEFIT_WINDOW
            planned_after = starts[process.table_id]  # in order
            later = bisect_right(planned_after, ended)
            following = planned_after[later] if later < len(planned_after) else None
            settled = now >= until or following is not None
            if following is not None:
                until = min(until, following)
            owner = (process.catalog_name, process.db_name, process.table_name)
            before, after = store.read_costs(
                session, owner, (planned - BENEFIT_WINDOW, planned), (ended, min(until, now))
            )
            found[i] = benefit_of(before, after, cpu_seconds(process.summary, "spark_"), settled)
        return found

    def settle_benefits(self, now: datetime | None = None) -> int:
        """Keeps in each successful optimizing process's summary what it bought once the window after it is
        closed, before its table's reads are pruned; returns how many were settled. The history pruner calls it
        on the leader."""
        now = now or self.clock()
        settled = 0
        with self.db.write() as session:
            unsettled = [
                p for p in store.judged_processes(session, now - WEEK) if store.BENEFIT not in (p.summary or {})
            ]
            for process, found in zip(unsettled, self.benefits(session, unsettled, now), strict=True):
                if found is not None and found.settled:
                    store.keep_benefit(session, process.process_id, benefit_json(found))
                    settled += 1
        return settled

    def net(self, session: Session, processes: list[ProcessRow]) -> NetBenefit:
        """What the processes bought, added up."""
        return NetBenefit.of([b for b in self.benefits(session, processes) if b is not None])
