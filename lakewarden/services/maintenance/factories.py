"""Table maintenance on the process framework: one process factory per action (services/processes/factories.py).

Each factory reads the table's properties (Amoro's names and defaults, domain/maintenance.py), looks at the
table's current metadata to see whether there is work and why, and plans a process of one task for an
optimizer of the table's group, which runs it on Spark (optimizer/maintenance.py). A scheduled look with nothing
to do creates no process; a manual run always does (its reasons say what the metadata showed), except an auto
tag with no tag due. When the actions run is trigger.py's.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.errors import ActionForbidden, InvalidField, NothingToDo
from lakewarden.domain.maintenance import (
    AutoTagConfig,
    DataExpireConfig,
    ExpireSnapshotsConfig,
    OrphanFilesConfig,
    RewriteManifestsConfig,
    dangling_delete_files,
    forbidding_setting,
    next_tag_trigger,
    tag_due,
)
from lakewarden.domain.processes import Action, ProcessPlan, TaskSpec
from lakewarden.domain.retention import Ref, Snapshot, next_expiry_at, plan_expiry
from lakewarden.domain.tables import TableStatus
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.protocol.inputs import TASK_INPUT, TaskInput
from lakewarden.services.processes.factories import ProcessFactory
from lakewarden.store import processes as store
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


def _snapshots(table: Any) -> list[Snapshot]:
    """The table's snapshots in metadata order, with their summaries (pyiceberg's metadata)."""
    return [
        Snapshot(
            s.snapshot_id,
            s.parent_snapshot_id,
            s.timestamp_ms,
            dict(s.summary.additional_properties) if s.summary is not None else {},
        )
        for s in table.metadata.snapshots
    ]


def _refs(table: Any) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in table.metadata.refs.items()}


def _retention_refs(table: Any) -> list[Ref]:
    return [
        Ref(
            name,
            ref.snapshot_id,
            str(ref.snapshot_ref_type) == "branch",
            ref.min_snapshots_to_keep,
            ref.max_snapshot_age_ms,
            ref.max_ref_age_ms,
        )
        for name, ref in table.metadata.refs.items()
    ]


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


LOOK_AHEAD_MS = 366 * 24 * 3_600_000  # how far ahead an expiry that will come with no change is looked for


class ExpireSnapshotsFactory(MaintenanceFactory):
    action = Action.EXPIRE_SNAPSHOTS

    def inspect(self, config: dict[str, Any], table: Any, options: dict[str, Any]) -> Inspection:
        cfg = ExpireSnapshotsConfig.of(config)
        plan = plan_expiry(_snapshots(table), _retention_refs(table), cfg.policy(), _now_ms())
        beyond = f"older than {cfg.keep_duration} beyond the newest {cfg.min_count}"
        reasons = [f"{len(plan.expired)} snapshot(s) {beyond}" if plan.expired else f"no snapshot is {beyond}"]
        reasons += [f"keeps {kept}" for kept in plan.needed]
        if plan.expired_refs:
            reasons.append(f"drops refs past their max-ref-age-ms: {', '.join(plan.expired_refs)}")
        if plan.blocked:
            reasons.append(
                "not run: a branch's own max-snapshot-age-ms would expire "
                + "; ".join(str(kept) for kept in plan.blocked)
            )
        params = {
            "keep_duration_ms": int(cfg.keep_duration.total_seconds() * 1000),
            "min_count": cfg.min_count,
            "flink_retention_ms": int(cfg.flink_retention.total_seconds() * 1000),
            "wap_retention_ms": int(cfg.wap_retention.total_seconds() * 1000),
            "yield_window_ms": int(cfg.yield_window.total_seconds() * 1000),
        }
        return params, reasons, bool(plan.expired) and not plan.blocked

    def work_at(self, config: dict[str, Any], table: Any) -> datetime | None:
        cfg = ExpireSnapshotsConfig.of(config)
        at_ms = next_expiry_at(_snapshots(table), _retention_refs(table), cfg.policy(), _now_ms(), LOOK_AHEAD_MS)
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

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        # While a self-optimizing process runs on the table, rewriting its manifests would make that process's
        # commit start over (Iceberg retries it on the new manifests) and take cores from it, and its commit
        # rewrites the manifests of the files it replaces anyway (merging them, with Iceberg's default
        # commit.manifest-merge.enabled, once commit.manifest.min-count-to-merge are small). The next look decides.
        # A table the evaluator has not judged yet may turn pending at its first look, a moment later: the same.
        status = TableStatus(rec.runtime.status_code)
        if trigger != "manual":
            if status < TableStatus.PENDING:
                raise NothingToDo(f"deferred: self-optimizing is {status.label}")
            if rec.runtime.evaluated_at is None:
                raise NothingToDo("deferred: self-optimizing has not evaluated the table yet")
        return super().create(rec, table, trigger, options)

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
