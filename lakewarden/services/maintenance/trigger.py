"""The maintenance trigger: which table's maintenance is due, and when.

The trigger checks each table and action once per interval (the server's, or the table's own
`<prefix>.interval`) and never starts an action on a table where one of its kind is running. An action
whose processes failed several times in a row backs off: the interval doubles with each failure, up to a
day (domain/maintenance.after_failures); a success, or a run by hand that succeeds, ends the streak. The
processes themselves are planned by factories.py's factories, through the process engine.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import Conflict, InvalidField, NothingToDo
from lakewarden.domain.maintenance import (
    MAINTENANCE_ACTIONS,
    after_failures,
    enabled,
    forbidding_setting,
    interval_override,
)
from lakewarden.domain.processes import Action
from lakewarden.services.loop import LoopService
from lakewarden.services.processes.engine import ProcessEngine
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as store
from lakewarden.store import service_state
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)


def schedules_fingerprint(schedules: dict[Action, tuple[bool, timedelta]]) -> dict[str, Any]:
    """The schedules as the trigger remembers them across restarts (service_state)."""
    return {a.value: [on, interval.total_seconds()] for a, (on, interval) in sorted(schedules.items())}


class MaintenanceTrigger(LoopService):
    """Creates the maintenance processes that are due: per table and action, at most once per interval, and only
    when work can have come since the last look.

    Each look is remembered on the table (`table_runtime.maintenance`): when, and when work may come with no
    change to the table (an expiry when its oldest snapshot ages past the keep duration, a tag at the next
    period's trigger; never, for dangling deletes or manifests). A new snapshot or configuration makes every
    action due again once its interval since the last look has passed (store.tables.record_table_snapshot). The
    table's `next_maintenance_at` is the earliest of these, so each pass reads a range of that index: a million
    tables that do not change cost nothing between their due times."""

    name = "maintenance-trigger"
    BATCH = 500  # tables read per query; a pass goes on until none is due
    STATE = "maintenance-schedules"  # service_state: the schedules the due times were computed with

    def __init__(self, db: Database, engine: ProcessEngine, schedules: dict[Action, tuple[bool, timedelta]]) -> None:
        shortest = min((interval for on, interval in schedules.values() if on), default=timedelta(minutes=1))
        super().__init__(max(1.0, min(shortest.total_seconds(), 30.0)))
        self.db = db
        self.engine = engine
        self.schedules = schedules
        self._schedules_known = False
        self._warned: set[tuple[int, str, str]] = set()

    def _fingerprint(self) -> dict[str, Any]:
        return schedules_fingerprint(self.schedules)

    def _check_schedules(self) -> None:
        """Once per start: if the schedules differ from those the due times were computed with, every table is
        looked at once (an action turned on, or an interval shortened, would otherwise wait for a change)."""
        if self._schedules_known:
            return
        with self.db.write() as session:
            if service_state.get_state(session, self.STATE) != self._fingerprint():
                count = table_store.make_all_maintenance_due(session)
                service_state.put_state(session, self.STATE, self._fingerprint())
                log.info("maintenance schedules changed: %d table(s) due for a look", count)
        self._schedules_known = True

    def run_once(self) -> None:
        if not any(on for on, _ in self.schedules.values()):  # every action off: no table to look at
            return
        self._check_schedules()
        while not self.stopping:
            now = utcnow()
            with self.db.read() as session:
                tables = table_store.due_for_maintenance(session, now, self.BATCH)
                ids = [rec.runtime.table_id for rec in tables]
                specs = {row.name: catalog_store.spec_of(row) for row in catalog_store.list_catalogs(session)}
                last = store.last_plan_times(session, ids)
                running = {(p.table_id, p.action) for p in store.running_processes(session, table_ids=ids)}
                failing = store.failure_streaks(session, [a.value for a in MAINTENANCE_ACTIONS], table_ids=ids)
            looks = []
            for rec in tables:
                if self.stopping:
                    break
                entries, next_at = self._look(rec, specs.get(rec.identifier.catalog_name), now, last, running, failing)
                looks.append((rec.runtime, entries, next_at))
            with self.db.write() as session:  # a look lost to a crash is only looked again
                table_store.record_maintenance(session, looks)
            if len(tables) < self.BATCH or self.stopping:
                return

    def _look(
        self,
        rec: TableRecord,
        spec: CatalogSpec | None,
        now: datetime,
        last: dict[tuple[int, str], datetime],
        running: set[tuple[int, str]],
        failing: dict[tuple[int, str], tuple[int, datetime]],
    ) -> tuple[dict[str, dict[str, str | None]], datetime | None]:
        """Creates the table's due maintenance processes; what each action's look found, and when the table is
        next due (None: when it changes)."""
        entries: dict[str, dict[str, str | None]] = dict(rec.runtime.maintenance or {})
        if spec is None:
            return entries, None
        table: Any = None
        upcoming: list[datetime] = []
        for action in MAINTENANCE_ACTIONS:
            key = (rec.runtime.table_id, action.value)
            on, interval = self.schedules.get(action, (False, timedelta(0)))
            if not on:
                continue
            try:
                if not enabled(rec.runtime.config, action) or forbidding_setting(rec.runtime.config, action):
                    entries.pop(action.value, None)  # off for this table until its configuration changes
                    continue
                interval = interval_override(rec.runtime.config, action) or interval
            except InvalidField as exc:
                self._warn(rec, action, str(exc))
                entries.pop(action.value, None)
                continue
            interval = after_failures(interval, failing.get(key, (0, now))[0])
            due = self._due(entries.get(action.value), last.get(key), interval)
            if key in running and due is not None and due <= now:  # one of its kind still runs: an interval later
                due = now + max(interval, timedelta(seconds=self.interval_seconds))
            if due is not None and due > now:
                upcoming.append(due)
                continue
            if due is None:
                continue
            work_at: datetime | None = now  # when work may come without a change: after the interval
            try:
                if table is None:
                    table = self.engine.load(rec, spec)
                self.engine.create_process(rec, spec, action, "scheduled", {}, table=table, running_checked=True)
            except NothingToDo as why:
                log.debug("%s on %s: nothing to do: %s", action, rec.name, why)
                work_at = why.at if why.on_change else now
            except Conflict:
                work_at = now
            except InvalidField as exc:
                self._warn(rec, action, str(exc))
                work_at = None  # misconfigured: until the configuration changes
            except Exception as exc:
                log.warning("cannot plan %s on %s: %s", action, rec.name, exc)
            entries[action.value] = {
                "checked": now.isoformat(),
                "next": None if work_at is None else work_at.isoformat(),
            }
            following = self._due(entries[action.value], now, interval)
            if following is not None:
                upcoming.append(following)
        return entries, min(upcoming, default=None)

    @staticmethod
    def _due(entry: dict[str, str | None] | None, planned: datetime | None, interval: timedelta) -> datetime | None:
        """When an action is next due: never looked at, at once; else when work may come (None: only with a
        change), but not within the interval after its last look or its last process (a manual run's too)."""
        if entry is None:
            return as_utc(planned) + interval if planned is not None else datetime.min.replace(tzinfo=UTC)
        if entry.get("next") is None:
            return None
        times = [datetime.fromisoformat(str(entry["next"])), datetime.fromisoformat(str(entry["checked"])) + interval]
        if planned is not None:
            times.append(as_utc(planned) + interval)
        return max(times)

    def backoff(self, session: Session, rec: TableRecord) -> dict[Action, tuple[int, datetime]]:
        """The table's actions that are backing off: failed processes in a row, and when the trigger tries
        again."""
        found = {}
        for (_, action), (failures, planned) in store.failure_streaks(
            session, [a.value for a in MAINTENANCE_ACTIONS], rec.runtime.table_id
        ).items():
            kind = Action(action)
            on, interval = self.schedules.get(kind, (False, timedelta(0)))
            if not on:
                continue
            try:
                interval = interval_override(rec.runtime.config, kind) or interval
            except InvalidField:
                continue
            found[kind] = (failures, planned + after_failures(interval, failures))
        return found

    def _warn(self, rec: TableRecord, action: Action, message: str) -> None:
        key = (rec.runtime.table_id, action.value, message)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s on %s is misconfigured: %s", action, rec.name, message)
