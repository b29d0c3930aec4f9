"""The evaluator service: re-evaluates tables whose snapshot or configuration changed, and those whose time
triggers can now fire (`table_runtime.next_evaluation_at`, set from each verdict): a table that does not change
is not read again until then.

A verdict with something to optimize turns an IDLE table PENDING; a verdict with nothing turns a
PENDING table IDLE. Both are compare-and-swaps, so a table another service moved meanwhile
(e.g. into PLANNING) is left alone. The verdict and its reasons are stored for the API and CLI.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.budget import READ_RECENTLY, READ_TRIGGER, READ_TRIGGERED, BudgetConfig, read_triggered
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.evaluator import OptimizingClock, TableEvaluation, evaluate_table
from lakewarden.domain.files import group_by_partition
from lakewarden.domain.groups import group_engines
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.processes import Action
from lakewarden.domain.service_runs import LAST_RUNS, LastRun
from lakewarden.domain.tables import TableStatus
from lakewarden.domain.writer_cadence import Cadence
from lakewarden.metadata.clustering import table_clustering
from lakewarden.metadata.files import optimized_branches, snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.metadata.writers import row_level_writers
from lakewarden.services.loop import LoopService
from lakewarden.services.tables.catalog_access import FORMAT_ONLY, InternalTables, PassCatalogs
from lakewarden.services.tables.formats import format_verdict
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import groups as group_store
from lakewarden.store import processes as process_store
from lakewarden.store import reads as reads_store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import shapes
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.runtime import Verdict
from lakewarden.store.shapes import shape_of
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)
MAX_PARTITIONS_SHOWN = 200
BATCH = 200  # verdicts stored in one transaction at most
FLUSH_SECONDS = 1.0  # a long pass stores its verdicts at least this often: tables turn pending as it goes
LOOK_SECONDS = 0.25  # a pass looks for tables changed under it (a wake) at most this often
LOOK_SLACK = timedelta(seconds=1)  # a change stored just as the pass read the due tables is looked for again
RETRY_FAILED = timedelta(minutes=1)  # a failed evaluation (an unreachable store, a broken file) is tried again


def _ms(moment: datetime | None) -> int:
    return 0 if moment is None else int(as_utc(moment).timestamp() * 1000)


def _config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode(), usedforsecurity=False).hexdigest()[:16]


def evaluation_document(verdict: TableEvaluation) -> dict[str, Any]:
    """What is stored and shown: the verdict, and its partitions (those pending first)."""
    ordered = sorted(verdict.partitions, key=lambda p: (p.type is None, -(p.type or 0), str(p.partition)))
    return {
        **verdict.summary(),
        "partitions": [p.to_dict() for p in ordered[:MAX_PARTITIONS_SHOWN]],
        "partitions_omitted": max(0, len(ordered) - MAX_PARTITIONS_SHOWN),
    }


def _format_document(rec: TableRecord, context: tuple[tuple[str, ...], LastRun]) -> dict[str, Any]:
    document = format_verdict(rec, *context)
    document["config_hash"] = _config_hash(rec.runtime.config)
    return document


@dataclass(frozen=True)
class ReadTrigger:
    """A table of a budgeted group scanned lately: the small files that make it pending (domain/budget.py)."""

    file_count: int
    scans: int


def _urgency(rec: TableRecord) -> tuple[bool, bool, datetime]:
    """Tables with a new snapshot or configuration before the re-checks of time-based triggers, tables that
    self-optimize before those only shown, then the longest due first."""
    runtime = rec.runtime
    changed = (
        runtime.evaluated_at is None
        or runtime.current_snapshot_id != runtime.evaluated_snapshot_id
        or (runtime.evaluation or {}).get("config_hash") != _config_hash(runtime.config)
    )
    optimizes = OptimizingConfig.enabled_in(runtime.config) is not False
    due = (
        as_utc(runtime.next_evaluation_at)
        if runtime.next_evaluation_at is not None
        else datetime.min.replace(tzinfo=UTC)
    )
    return (not changed, not optimizes, due)


def read_triggers(session: Session, records: list[TableRecord], now: datetime) -> dict[int, ReadTrigger]:
    """By table id, the read triggers of those of the tables that have one: the tables of budgeted groups scanned
    within READ_RECENTLY."""
    budgets = {g.name: c for g in group_store.list_groups(session) if (c := BudgetConfig.of(g.properties))}
    if not any(rec.runtime.optimizing_group in budgets for rec in records):
        return {}
    since = now - READ_RECENTLY
    rates = reads_store.scan_rates(session, since, since)
    triggers = {}
    for rec in records:
        config = budgets.get(rec.runtime.optimizing_group)
        found = rates.get((rec.identifier.catalog_name, rec.identifier.db_name, rec.identifier.table_name))
        if config is not None and found is not None:
            triggers[rec.runtime.table_id] = ReadTrigger(config.read_trigger_file_count, found[0])
    return triggers


class TableEvaluator(LoopService):
    name = "table-evaluator"

    def __init__(
        self,
        db: Database,
        interval_seconds: float,
        thread_count: int,
        recheck_seconds: float | None = None,
        internal: InternalTables | None = None,
        on_pending: Callable[[], None] | None = None,
        cache: ManifestCache | None = None,
        shape_interval: timedelta | None = None,
    ) -> None:
        super().__init__(interval_seconds)
        # a table's shape is sampled for the charts on a change, at most this often (store/shapes.py)
        self.shape_interval = shape_interval
        self.db = db
        self.internal = internal  # internal catalogs' tables are read in process
        self.thread_count = thread_count
        # a table that does not change is evaluated again when its verdict says a time-based trigger can fire
        # (next_evaluation_at), and at the latest after `recheck` when one is configured
        self.recheck = None if recheck_seconds is None else timedelta(seconds=recheck_seconds)
        self.cache = cache if cache is not None else ManifestCache()  # the server's, shared with scan planning
        self.on_pending = on_pending  # called when a table turns pending (wakes the optimizers' polls)
        # set when a verdict of the running pass is made or the evaluator is woken: what the pass waits on
        self._progress = threading.Event()

    def wake(self) -> None:
        super().wake()
        self._progress.set()

    def _made(self, _verdict: Future[dict[str, Any]]) -> None:
        self._progress.set()

    def _finished(self, running: Mapping[Future[dict[str, Any]], TableRecord], looked: float) -> list[Future[Any]]:
        """The running verdicts that are made, waiting until one is, or a wake may be looked at (LOOK_SECONDS after
        the pass's last look), or at most LOOK_SECONDS: a table changed during the pass is taken in as soon as the
        looks' pace allows, not when a verdict being made ends (a large table's may take seconds)."""
        deadline = time.monotonic() + LOOK_SECONDS
        while running:
            self._progress.clear()  # before looking: a verdict made or a wake from here on sets it again
            finished = [future for future in running if future.done()]
            now = time.monotonic()
            look_at = looked + LOOK_SECONDS
            if finished or now >= deadline or (self.woken() and now >= look_at):
                return finished
            self._progress.wait((min(deadline, look_at) if self.woken() else deadline) - now)
        return []

    def _due(self, rec: TableRecord, now: datetime) -> bool:
        runtime = rec.runtime
        if TableStatus(runtime.status_code) not in (TableStatus.IDLE, TableStatus.PENDING):
            return False
        if runtime.evaluated_at is None or runtime.current_snapshot_id != runtime.evaluated_snapshot_id:
            return True
        # a changed configuration (table properties) deserves a new verdict too; other new metadata
        # without a new snapshot (a commit of schema, tags, unrelated properties) cannot change it
        if (runtime.evaluation or {}).get("config_hash") != _config_hash(runtime.config):
            return True
        # a table of another format has no snapshot id: its change token moves
        if (
            rec.identifier.format != "iceberg"
            and (runtime.evaluation or {}).get("metadata_location") != runtime.metadata_location
        ):
            return True
        # a commit to a branch leaves main's snapshot as it is: a table optimizing branches looks at new metadata
        if (runtime.config or {}).get("self-optimizing.branches") and (runtime.evaluation or {}).get(
            "metadata_location"
        ) != runtime.metadata_location:
            return True
        return runtime.next_evaluation_at is not None and as_utc(runtime.next_evaluation_at) <= now

    def run_once(self) -> None:
        """One pass: each due table evaluated on the pool, those with a new snapshot or configuration first. A pass
        can be long (many changed tables, or one of many manifests); a table that changes meanwhile (a wake) goes
        to the front of it rather than waiting for the next pass, so a commit is not kept behind other tables."""
        began = utcnow()
        due, triggers, specs = self._due_now(began, None)
        records = {rec.runtime.table_id: rec for rec in due}
        read_at = dict.fromkeys(records, began)  # when each record was read
        queue = deque(records)
        running: dict[Future[dict[str, Any]], TableRecord] = {}
        done: list[tuple[TableRecord, dict[str, Any]]] = []
        urgent: set[int] = set()  # changed during the pass: stored as soon as evaluated
        changed_again = False
        catalogs = PassCatalogs(specs, self.internal)
        looked = stored = time.monotonic()
        with catalogs, ThreadPoolExecutor(self.thread_count, thread_name_prefix="evaluator") as pool:
            while (queue or running) and not self.stopping:
                if time.monotonic() - looked >= LOOK_SECONDS and self.take_wake():
                    looked, look = time.monotonic(), utcnow()
                    fresh, fresh_triggers, catalogs.specs = self._due_now(look, began - LOOK_SLACK)
                    triggers.update(fresh_triggers)
                    # a verdict being made or not stored yet: the database still shows the table as due
                    unsettled = {rec.runtime.table_id for rec in (*running.values(), *(rec for rec, _ in done))}
                    for rec in reversed(fresh):
                        table_id = rec.runtime.table_id
                        if table_id in unsettled:
                            changed_again = True  # if it changed again, the next pass takes that at once
                            continue
                        if table_id in records and table_id in queue:
                            queue.remove(table_id)
                        records[table_id], read_at[table_id] = rec, look
                        queue.appendleft(table_id)
                        urgent.add(table_id)
                while queue and len(running) < self.thread_count:
                    rec = records[queue.popleft()]
                    catalog = catalogs.of(rec.identifier.catalog_name)
                    if catalog is FORMAT_ONLY:
                        done.append((rec, _format_document(rec, self._format_context(rec))))
                    elif catalog is not None:
                        trigger = triggers.get(rec.runtime.table_id)
                        future = pool.submit(self._charged_verdict, catalog, rec, trigger)
                        future.add_done_callback(self._made)
                        running[future] = rec
                finished = self._finished(running, looked)
                for future in finished:
                    rec = running.pop(future)
                    try:
                        done.append((rec, future.result()))
                    except Exception as exc:
                        log.warning("evaluating %s failed: %s", rec.name, exc)
                last = not queue and not running
                due_now = len(done) >= BATCH or time.monotonic() - stored >= FLUSH_SECONDS
                if done and (last or due_now or any(rec.runtime.table_id in urgent for rec, _ in done)):
                    with self.charged():
                        self._record(done, read_at)
                    done, stored = [], time.monotonic()
        if changed_again:
            self.wake()

    def _due_now(
        self, now: datetime, since: datetime | None
    ) -> tuple[list[TableRecord], dict[int, ReadTrigger], dict[str, CatalogSpec]]:
        """The tables due for a verdict (those whose due moment came after `since`), the most urgent first, their
        read triggers, and the catalogs by name."""
        with self.db.read() as session:
            due = [rec for rec in table_store.due_for_evaluation(session, now, since) if self._due(rec, now)]
            specs = {row.name: catalog_store.spec_of(row) for row in catalog_store.list_catalogs(session)}
            triggers = read_triggers(session, due, now)
        due.sort(key=_urgency)
        return due, triggers, specs

    def _charged_verdict(self, catalog: Any, rec: TableRecord, trigger: ReadTrigger | None) -> dict[str, Any]:
        with self.charged():  # on a thread of the pool
            return self._verdict(catalog, rec, trigger)

    def evaluate(self, catalog: Any, rec: TableRecord) -> dict[str, Any]:
        """Evaluate one table now and move it between IDLE and PENDING accordingly."""
        read_at = utcnow()  # the caller read `rec` just before: a change stored from here on keeps it due
        with self.db.read() as session:
            trigger = read_triggers(session, [rec], read_at).get(rec.runtime.table_id)
        document = self._verdict(catalog, rec, trigger)
        self._record([(rec, document)], {rec.runtime.table_id: read_at})
        return document

    def _format_context(self, rec: TableRecord) -> tuple[tuple[str, ...], LastRun]:
        """For a table of another format: the engines its group carries (none: its services are not run), and
        what lakewarden's last successful run of its services found."""
        with self.db.read() as session:
            engines: tuple[str, ...] = ()
            if group_store.group_exists(session, rec.runtime.optimizing_group):
                engines = group_engines(group_store.group_properties(session, rec.runtime.optimizing_group))
            done = process_store.recent_summaries(session, rec.runtime.table_id, Action.OPTIMIZING.value, LAST_RUNS)
        return engines, LastRun.of(done)

    def _verdict(self, catalog: Any, rec: TableRecord, trigger: ReadTrigger | None = None) -> dict[str, Any]:
        if rec.identifier.format != "iceberg":
            return _format_document(rec, self._format_context(rec))
        started = time.monotonic()
        runtime = rec.runtime
        snapshot_id = runtime.current_snapshot_id
        read_note = None
        writers: Cadence | None = None
        try:
            config = OptimizingConfig.of(runtime.config)
            if trigger is not None and trigger.file_count < config.minor_trigger_file_count:
                read_note = (
                    f"scanned {trigger.scans} time(s) in the last hour: in budgeted group "
                    f"{runtime.optimizing_group}, pending at {READ_TRIGGER} {trigger.file_count} small files "
                    f"instead of minor.trigger.file-count {config.minor_trigger_file_count}"
                )
                config = read_triggered(config, trigger.file_count)
            table = catalog.load_table((*rec.identifier.db_name.split("."), rec.identifier.table_name))
            writers = row_level_writers(table.metadata)
            # a table never optimized counts its minor and full intervals from when lakewarden took it on
            managed_since = rec.identifier.created_at
            clock = OptimizingClock(
                now_ms=_ms(utcnow()),
                last_minor_ms=_ms(runtime.last_minor_optimizing_at or managed_since),
                last_full_ms=_ms(runtime.last_full_optimizing_at or managed_since),
            )
            document = {}
            for branch in optimized_branches(table, config.branches):  # main first, then the branches named
                files = snapshot_files(table, self.cache, config.filter, branch)
                main = branch is None
                verdict = evaluate_table(
                    files.snapshot_id,
                    group_by_partition(files.data, files.deletes),
                    config,
                    clock,
                    runtime.unreduced if main else None,  # what earlier rewrites wrote: main's records
                    table_clustering(table, config, runtime.clustered if main else None),
                )
                if main:
                    snapshot_id = files.snapshot_id
                    document = evaluation_document(verdict)
                    document["manifests_read"] = files.manifests_read
                elif verdict.type is not None:
                    # main has nothing to do and this branch has: the table is pending for it (its layout as
                    # shown and charted stays main's)
                    document["type"], document["branch"] = verdict.type.label, branch
                    document["branch_snapshot_id"] = files.snapshot_id
                    document["branch_pending_partitions"] = len(verdict.pending)
                    document["reasons"] = [*document["reasons"], *(f"branch {branch}: {r}" for r in verdict.reasons)]
                if document["type"] is not None:
                    break
        except InvalidField as exc:
            document = {
                "snapshot_id": snapshot_id,
                "type": None,
                "reasons": [f"invalid table property {exc}"],
                "partitions": [],
                "pending_partitions": 0,
            }
        except Exception as exc:
            log.warning("evaluating %s failed: %s", rec.name, exc)
            document = {
                "failed": True,  # tried again after RETRY_FAILED
                "snapshot_id": snapshot_id,
                "type": None,
                "partitions": [],
                "pending_partitions": 0,
                "reasons": [f"evaluation failed: {type(exc).__name__}: {exc}"[:1000]],
            }
        if read_note is not None and trigger is not None:
            document["reasons"] = [read_note, *document["reasons"]]
            document[READ_TRIGGERED] = trigger.file_count
        if writers is not None:  # when the table's row-level writers pause (dispatcher: planned after a pause)
            document["writers"] = writers.document()
        document["duration_ms"] = int((time.monotonic() - started) * 1000)
        document["metadata_location"] = runtime.metadata_location
        document["config_hash"] = _config_hash(runtime.config)
        return document

    def _next_evaluation(self, document: dict[str, Any], deferred_shape: datetime | None) -> datetime | None:
        """When to evaluate the table again if neither its snapshot nor its configuration changes: when a minor
        or full interval passes, a failed evaluation's retry, a deferred chart sample, the configured ceiling."""
        now = utcnow()
        moments = [moment for moment in (deferred_shape,) if moment is not None]
        if document.get("next_trigger_ms") is not None:
            moments.append(datetime.fromtimestamp(document["next_trigger_ms"] / 1000, UTC))
        if document.get("failed"):
            moments.append(now + RETRY_FAILED)
        if self.recheck is not None:
            moments.append(now + self.recheck)
        return min(moments, default=None)

    def _record(
        self, verdicts: list[tuple[TableRecord, dict[str, Any]]], read_at: Mapping[int, datetime] | None = None
    ) -> None:
        """Store verdicts in one transaction; a table with something to do turns PENDING, else IDLE. `read_at`:
        when each table's record was read, so a change stored since keeps the table due (None: just now)."""
        now = utcnow()
        with self.db.write() as session:
            shaped = {
                rec.runtime.table_id: shape
                for rec, document in verdicts
                if (shape := shape_of(document, rec.runtime.summary or {})) is not None
            }
            sampled = (
                shapes.sample_table_shapes(session, shaped, self.shape_interval)
                if shaped and self.shape_interval is not None
                else {}
            )
            saved = []
            for rec, document in verdicts:
                table_id = rec.runtime.table_id
                sampling = sampled.get(table_id)
                again = self._next_evaluation(document, None if sampling is None else sampling.deferred_until)
                read = now if read_at is None else read_at[table_id]
                saved.append(Verdict(table_id, document["snapshot_id"], document, again, read))
            runtime_store.save_evaluations(session, saved)
            pending = [rec.runtime.table_id for rec, document in verdicts if document["type"] is not None]
            idle = [rec.runtime.table_id for rec, document in verdicts if document["type"] is None]
            turned = runtime_store.transition_tables(session, pending, TableStatus.IDLE, TableStatus.PENDING)
            turned |= runtime_store.transition_tables(session, idle, TableStatus.PENDING, TableStatus.IDLE)
        moved = [(rec, document) for rec, document in verdicts if rec.runtime.table_id in turned]
        for rec, document in moved:
            status = "pending" if document["type"] else "idle"
            log.info("%s is now %s: %s", rec.name, status, "; ".join(document["reasons"]))
        if any(document["type"] is not None for _, document in moved) and self.on_pending is not None:
            self.on_pending()
