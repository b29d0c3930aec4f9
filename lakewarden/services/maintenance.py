"""Table maintenance on the process framework: one factory per action, and the trigger that runs them.

Each factory reads the table's properties (Amoro's names and defaults, domain/maintenance.py),
looks at the table's current metadata to see whether there is work and why, and plans a process
of one task for an optimizer of the table's group, which runs it on Spark
(optimizer/maintenance.py). A scheduled trigger with nothing to do creates no process; a manual
run always does (its reasons say what the metadata showed), except an auto tag with no tag due.

The trigger checks each table and action once per interval (the server's, or the table's own
`<prefix>.interval`) and never starts an action on a table where one of its kind is running. An action
whose processes failed several times in a row backs off: the interval doubles with each failure, up to a
day (domain/maintenance.after_failures); a success, or a run by hand that succeeds, ends the streak.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import ActionForbidden, Conflict, InvalidField, NothingToDo
from lakewarden.domain.maintenance import (
    MAINTENANCE_ACTIONS,
    AutoTagConfig,
    DataExpireConfig,
    ExpireSnapshotsConfig,
    OrphanFilesConfig,
    RewriteManifestsConfig,
    SnapshotInfo,
    after_failures,
    dangling_delete_files,
    enabled,
    expirable_snapshots,
    forbidding_setting,
    interval_override,
    next_expirable_at,
    next_tag_trigger,
    tag_due,
)
from lakewarden.domain.processes import Action, ProcessPlan, TaskSpec
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.protocol import TASK_INPUT, TaskInput
from lakewarden.services.loop import LoopService
from lakewarden.services.process_engine import ProcessEngine
from lakewarden.services.processes import ProcessFactory
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as store
from lakewarden.store import service_state
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)
SUPPORTED_EXPIRE_TYPES = ("timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns", "date", "long", "int", "string")


# what a factory sees in a table's metadata: the task's parameters, the reasons, and whether there is work
Inspection = tuple[dict[str, Any], list[str], bool]


class MaintenanceFactory(ProcessFactory):
    """A process of one task; `inspect` returns the task's parameters, the reasons, and whether
    the metadata shows work (without work a scheduled trigger creates nothing)."""

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        raise NotImplementedError

    def work_at(self, config: dict[str, Any], table: Any) -> datetime | None:
        """When work may come to a table that showed none, with no change to it (None: only a change brings it)."""
        return None

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        forbidden = forbidding_setting(table.metadata.properties, self.action)
        if forbidden is not None:  # Iceberg would refuse it: no process, whoever asks
            raise ActionForbidden(forbidden)
        params, reasons, has_work = self.inspect(rec.runtime.config, table, options)
        if not has_work and trigger != "manual":
            raise NothingToDo("; ".join(reasons), on_change=True, at=self.work_at(rec.runtime.config, table))
        name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
        work = TASK_INPUT.validate_python({"action": self.action.value, "table": name, **params})
        summary: dict[str, Any] = {"reasons": reasons}
        if params.get("dry_run"):
            summary["dry_run"] = True
        return ProcessPlan(trigger, table.metadata.current_snapshot_id, [TaskSpec(self.action.value, work)], summary)


def _snapshots(table: Any) -> list[SnapshotInfo]:
    return [SnapshotInfo(s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms) for s in table.metadata.snapshots]


def _refs(table: Any) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in table.metadata.refs.items()}


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


class ExpireSnapshotsFactory(MaintenanceFactory):
    action = Action.EXPIRE_SNAPSHOTS

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        cfg = ExpireSnapshotsConfig.of(config)
        keep_ms = int(cfg.keep_duration.total_seconds() * 1000)
        refs = _refs(table)
        expirable = expirable_snapshots(
            _snapshots(table), refs, refs.get("main"), _now_ms() - keep_ms, cfg.min_count, set()
        )
        beyond = f"older than {cfg.keep_duration} beyond the newest {cfg.min_count}"
        reason = f"{len(expirable)} snapshot(s) {beyond}" if expirable else f"no snapshot is {beyond}"
        return {"keep_duration_ms": keep_ms, "min_count": cfg.min_count}, [reason], bool(expirable)

    def work_at(self, config: dict[str, Any], table: Any) -> datetime | None:
        cfg = ExpireSnapshotsConfig.of(config)
        refs = _refs(table)
        keep_ms = int(cfg.keep_duration.total_seconds() * 1000)
        at_ms = next_expirable_at(_snapshots(table), refs, refs.get("main"), keep_ms, cfg.min_count)
        return None if at_ms is None else datetime.fromtimestamp(at_ms / 1000, UTC)

    def dispatch_input(self, session: Session, process: ProcessRow, task_input: TaskInput) -> TaskInput:
        # never expire the snapshot a running optimizing process was planned on (its rewrite starts there)
        running = store.running_processes(session, table_id=process.table_id, action=Action.OPTIMIZING.value)
        protected = sorted({p.target_snapshot_id for p in running if p.target_snapshot_id is not None})
        return task_input.model_copy(update={"protected_snapshot_ids": protected})


class CleanOrphanFilesFactory(MaintenanceFactory):
    action = Action.CLEAN_ORPHAN_FILES

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        cfg = OrphanFilesConfig.of(config)
        dry_run = bool(options.get("dry_run", False))
        minutes = int(cfg.min_existing.total_seconds() // 60)
        reason = (
            f"{'list' if dry_run else 'delete'} files under {table.metadata.location} older than {minutes} "
            "min that no snapshot or metadata file references"
        )
        return (
            {"min_existing_ms": minutes * 60000, "dry_run": dry_run, "location": table.metadata.location},
            [reason],
            True,
        )

    def may_dispatch(self, session: Session, process: ProcessRow) -> bool:
        # the files of a process still running on the table are not referenced yet: wait for it
        others = store.running_processes(session, table_id=process.table_id)
        return all(p.process_id == process.process_id for p in others)


class CleanDanglingDeleteFilesFactory(MaintenanceFactory):
    action = Action.CLEAN_DANGLING_DELETE_FILES

    def __init__(self, cache: ManifestCache) -> None:
        self.cache = cache

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        files = snapshot_files(table, self.cache, None)
        dangling = dangling_delete_files(files.data, files.deletes)
        partitions = len({d.partition for d in dangling})
        reason = (
            f"{len(dangling)} delete file(s) in {partitions} partition(s) apply to no live data file"
            if dangling
            else "every delete file still applies to a live data file"
        )
        return {}, [reason], bool(dangling)


class ExpireDataFactory(MaintenanceFactory):
    action = Action.EXPIRE_DATA

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        cfg = DataExpireConfig.of(config)
        try:
            column = table.schema().find_field(cfg.field)
        except ValueError:
            raise InvalidField("data-expire.field", f"the table has no column {cfg.field!r}") from None
        kind = str(column.field_type)
        if kind not in SUPPORTED_EXPIRE_TYPES:
            raise InvalidField(
                "data-expire.field", f"{cfg.field} is {kind}; expected one of {', '.join(SUPPORTED_EXPIRE_TYPES)}"
            )
        params = {
            "field": cfg.field,
            "field_type": kind,
            "retention_ms": int(cfg.retention.total_seconds() * 1000),
            "level": cfg.level,
            "string_pattern": cfg.string_pattern,
            "number_format": cfg.number_format,
            "base_on_rule": cfg.base_on_rule,
        }
        unit = "partitions" if cfg.level == "partition" else "files"
        base = "the last commit" if cfg.base_on_rule == "LAST_COMMIT_TIME" else "now"
        reason = f"delete whole {unit} whose {cfg.field} is older than {cfg.retention} before {base}"
        return params, [reason], table.metadata.current_snapshot_id is not None


class AutoCreateTagsFactory(MaintenanceFactory):
    action = Action.AUTO_CREATE_TAGS

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        cfg = AutoTagConfig.of(config)
        refs = _refs(table)
        ancestry: list[int] = []
        current = refs.get("main")
        parents = {s.snapshot_id: s.parent_id for s in _snapshots(table)}
        while current is not None and current in parents and len(ancestry) < 100_000:
            ancestry.append(current)
            current = parents[current]
        now = datetime.now(UTC)
        plan = tag_due(cfg, _snapshots(table), ancestry, refs, now)
        if plan is None:  # the next period's trigger may bring one, or a snapshot before this one's
            raise NothingToDo(
                f"no {cfg.period} tag is due (it exists, no snapshot precedes it, or it is past the max delay)",
                on_change=True,
                at=next_tag_trigger(cfg, now),
            )
        reason = f"tag {plan.name} for the {cfg.period} period from {plan.period_start:%Y-%m-%d %H:%M} UTC"
        return {"tag": plan.name, "snapshot_id": plan.snapshot_id, "max_age_ms": cfg.max_age_ms}, [reason], True


class RewriteManifestsFactory(MaintenanceFactory):
    action = Action.REWRITE_MANIFESTS

    def __init__(self, cache: ManifestCache) -> None:
        self.cache = cache  # the manifest list, as the evaluator read it

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        cfg = RewriteManifestsConfig.of(config)
        snapshot = table.current_snapshot()
        count = 0 if snapshot is None else len(self.cache.manifests(table.io, snapshot))
        reason = f"{count} manifests ({'at least' if count >= cfg.min_count else 'fewer than'} {cfg.min_count})"
        return {}, [reason], count >= cfg.min_count


def maintenance_factories(cache: ManifestCache) -> list[MaintenanceFactory]:
    return [
        ExpireSnapshotsFactory(),
        CleanOrphanFilesFactory(),
        CleanDanglingDeleteFilesFactory(cache),
        ExpireDataFactory(),
        AutoCreateTagsFactory(),
        RewriteManifestsFactory(cache),
    ]


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
