"""How each table is read: the scan and commit reports its catalog is told, kept and summed up.

Reports come from clients through the REST catalog's metrics endpoint and from the server's own scan planning
(domain/reads.py says what each holds); any node records them (they are not the leader's work). A table's
summary (its page, `GET /api/v1/tables/…` under `reads`) is taken from its reports of the last week.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from urllib.parse import unquote_plus

from sqlalchemy.exc import SQLAlchemyError

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
from lakewarden.store import reads as store
from lakewarden.store.database import Database, utcnow
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
