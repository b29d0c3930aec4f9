"""The process engine: the life of every process, whatever its action: create, plan, settle, retry, cancel,
end and recover.

A process is created by its action's factory and written with its tasks in one transaction. A task's end settles
it: a failure a retry may change goes back to PLANNED after a back-off, a final one or one past
`execute.num-retries` fails the process, all tasks succeeded ends it. Ending merges the tasks' typed results into
its summary and tells the factory what that means for the table."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.costs import total_usage, usage_summary
from lakewarden.domain.errors import Conflict, NothingToDo
from lakewarden.domain.evaluator import OptimizingType
from lakewarden.domain.groups import max_input_per_thread
from lakewarden.domain.optimizing_config import TURNED_OFF, OptimizingConfig
from lakewarden.domain.processes import Action
from lakewarden.domain.states import OPTIMIZING_STATUS, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.protocol.messages import FailureKind
from lakewarden.protocol.results import TASK_RESULT
from lakewarden.services.processes.factories import ProcessRegistry
from lakewarden.services.tables.catalog_access import InternalTables, catalog_for
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import groups as group_store
from lakewarden.store import processes as store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)


def _nothing() -> None:
    pass


class ProcessEngine:
    def __init__(
        self,
        db: Database,
        registry: ProcessRegistry,
        internal: InternalTables | None = None,
        on_work: Callable[[], None] = _nothing,
        on_process_end: Callable[[], None] = _nothing,
        retry_backoff: timedelta = timedelta(seconds=5),
        retry_backoff_max: timedelta = timedelta(minutes=5),
    ) -> None:
        self.db = db
        self.registry = registry
        self.internal = internal  # internal catalogs' tables are read in process
        self.on_work = on_work  # tasks may be ready to hand out (the dispatcher wakes its long polls)
        self.on_process_end = on_process_end  # a process ended (the evaluator looks at its table again)
        # a failed task that may pass on a retry waits backoff * 2^retries (at most backoff_max) first
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max

    # ---- creating and planning

    def load(self, rec: TableRecord, spec: CatalogSpec) -> Any:
        """The table's current metadata, through its catalog; None for a table of another format, whose factory
        reads the table's files itself."""
        if rec.identifier.format != "iceberg":
            return None
        with catalog_for(spec, self.internal) as catalog:
            return catalog.load_table((*rec.identifier.db_name.split("."), rec.identifier.table_name))

    def create_process(
        self,
        rec: TableRecord,
        spec: CatalogSpec,
        action: str,
        trigger: str,
        options: dict[str, Any],
        table: Any | None = None,
        running_checked: bool = False,
    ) -> int:
        """A process of any action other than self-optimizing, planned now on the table's current
        metadata (`table`: as just loaded, else loaded here), in the table's group; raises NothingToDo (why
        there is no work, or which table setting forbids it) or Conflict (one of that action is already
        running on the table). `running_checked`: the caller has just read the table's running processes (the
        maintenance trigger, for its batch), so the early check that spares an inspection is skipped; the
        check in the write transaction that creates the process always runs."""
        factory = self.registry.factory(action, rec.identifier.format)
        if not running_checked:
            with self.db.read() as session:
                self._check_none_running(session, rec, action)
        plan = factory.create(rec, table if table is not None else self.load(rec, spec), trigger, options)
        with self.db.write() as session:
            self._check_none_running(session, rec, action)
            process_id = store.create_process(session, rec, rec.runtime.optimizing_group, action, plan).process_id
        log.info("%s process %s created for %s (%s)", action, process_id, rec.name, trigger)
        self.on_work()
        return process_id

    @staticmethod
    def _check_none_running(session: Session, rec: TableRecord, action: str) -> None:
        if store.running_processes(session, table_id=rec.runtime.table_id, action=action):
            raise Conflict(f"a {action} process is already running on {rec.name}")

    def start_optimizing(self, rec: TableRecord, group: str, scheduling: dict[str, Any] | None = None) -> bool:
        """Plan a PENDING table's self-optimizing on its current snapshot: PENDING -> PLANNING -> the
        optimizing status of the planned type, or back to IDLE when there is nothing to plan. `scheduling`
        (why the group's policy picked the table) is kept in the process's summary."""
        table_id = rec.runtime.table_id
        with self.db.write() as session:
            if not runtime_store.transition_table(
                session, table_id, TableStatus.PENDING, TableStatus.PLANNING, last_planned_at=utcnow()
            ):
                return False
            spec = catalog_store.spec_of(catalog_store.get_catalog(session, rec.identifier.catalog_name))
        try:
            planned = self._plan_optimizing(rec, spec, group, scheduling)
        except Exception as exc:
            log.warning("planning %s failed: %s", rec.name, exc)
            planned = None
        with self.db.write() as session:
            if planned is None:
                runtime_store.transition_table(session, table_id, TableStatus.PLANNING, TableStatus.IDLE)
                return False
            process_id, kind = planned
            runtime_store.transition_table(
                session, table_id, TableStatus.PLANNING, OPTIMIZING_STATUS[kind], optimizing_process_id=process_id
            )
        log.info("planned %s: process %s (%s)", rec.name, process_id, kind.label)
        return True

    def _plan_optimizing(
        self, rec: TableRecord, spec: CatalogSpec, group: str, scheduling: dict[str, Any] | None = None
    ) -> tuple[int, OptimizingType] | None:
        """The process and its tasks are written in one transaction."""
        factory = self.registry.factory(Action.OPTIMIZING, rec.identifier.format)
        with self.db.read() as session:
            # a process takes what the group's threads can run (Amoro's planner: at least one thread)
            threads = max(1, store.group_threads(session, group))
            per_thread = max_input_per_thread(group_store.group_properties(session, group))
        try:
            plan = factory.create(rec, self.load(rec, spec), "pending", {"max_input_bytes": threads * per_thread})
        except NothingToDo:
            return None
        with self.db.write() as session:
            # self-optimizing turned off since the table was picked (a refresh during the planning): nothing is
            # created, as Amoro plans only tables whose optimizing is enabled
            if not OptimizingConfig.of(table_store.runtime_config(session, rec.runtime.table_id)).enabled:
                log.info("planning %s: self-optimizing was turned off meanwhile; nothing created", rec.name)
                return None
            process = store.create_process(session, rec, group, Action.OPTIMIZING, plan)
            if scheduling is not None:
                process.summary = {**process.summary, "scheduling": scheduling}
            return process.process_id, OptimizingType[plan.type.upper()]

    # ---- settling

    def backoff(self, retry_count: int, failure: FailureKind = FailureKind.TRANSIENT) -> timedelta:
        """How long a task waits before its retry number `retry_count + 1`: after a conflict the base back-off
        (the writer it lost to keeps its pace, waiting longer does not help), else a doubling one."""
        if failure is FailureKind.CONFLICT:
            return min(self.retry_backoff, self.retry_backoff_max)
        return min(self.retry_backoff * (1 << min(retry_count, 30)), self.retry_backoff_max)

    def settle(self, process_id: int) -> None:
        """Retry a failed task (after its back-off), or end the process when its tasks are done, one
        failed in a way no retry can change, or one used up its retries."""
        with self.db.write() as session:
            process = store.get_process(session, process_id)
            if process.status != ProcessStatus.RUNNING:
                return
            counts = store.task_status_counts(session, process_id)
            if counts.get(TaskStatus.FAILED, 0) == 0 and not set(counts) <= {TaskStatus.SUCCESS, TaskStatus.CANCELED}:
                return  # tasks still to run, none failed: nothing to settle yet
            config = OptimizingConfig.or_defaults(table_store.runtime_config(session, process.table_id))
            tasks = store.tasks_of(session, process_id)
            failed = [t for t in tasks if t.status == TaskStatus.FAILED]
            final = next((t for t in failed if t.failure == FailureKind.FINAL), None)
            retry = next((t for t in failed if t.retry_count < config.execute_num_retries), None)
            if final is None and retry is not None:
                store.transition_task(
                    session,
                    process_id,
                    retry.task_id,
                    TaskStatus.FAILED,
                    TaskStatus.PLANNED,
                    expected_attempt=retry.attempt,
                    retry_count=retry.retry_count + 1,
                    retry_after=utcnow() + self.backoff(retry.retry_count, FailureKind(retry.failure or "transient")),
                )
                self.on_work()
                return
            culprit = final or (failed[0] if failed else None)
            if culprit is not None:
                if final is not None:
                    reason = (
                        f"task {final.task_id} failed with an error no retry can change (not retried): {final.error}"
                    )
                else:
                    reason = f"task {culprit.task_id} failed {culprit.retry_count + 1} time(s): {culprit.error}"
                if (
                    config.allow_partial_commit
                    and not (culprit.input or {}).get("commit_staged")
                    and self._commit_partially(session, process, tasks, ProcessStatus.FAILED, reason)
                ):
                    self.on_work()
                    return
                self._end(session, process, ProcessStatus.FAILED, reason, culprit.diagnosis)
            elif all(t.status in (TaskStatus.SUCCESS, TaskStatus.CANCELED) for t in tasks):
                partial = (process.summary or {}).get("partial_commit")
                if partial is not None:  # the tasks that succeeded committed; the process ends as it was going to
                    self._end(session, process, ProcessStatus(partial["status"]), partial["reason"])
                else:
                    self._end(session, process, ProcessStatus.SUCCESS, None)
            else:
                return
        self.on_process_end()

    def cancel(self, process_id: int, reason: str = "canceled") -> None:
        """Cancel a running process. With `allow-partial-commit` a process that commits once first commits what
        its tasks staged so far (Amoro's cancelProcess closes a process asking for its commit)."""
        with self.db.write() as session:
            process = store.get_process(session, process_id)
            if process.status != ProcessStatus.RUNNING:
                raise Conflict(f"process {process_id} is {process.status}, not running")
            config = OptimizingConfig.or_defaults(table_store.runtime_config(session, process.table_id))
            tasks = store.tasks_of(session, process_id)
            if config.allow_partial_commit and self._commit_partially(
                session, process, tasks, ProcessStatus.CANCELED, reason
            ):
                self.on_work()
                return
            self._end(session, process, ProcessStatus.CANCELED, reason)

    @staticmethod
    def _commit_partially(
        session: Session, process: ProcessRow, tasks: list[Any], status: ProcessStatus, reason: str
    ) -> bool:
        """Amoro's allow-partial-commit: the process's tasks that have not staged their files are canceled and its
        commit task commits what the others staged; the process then ends `status` with `reason`. False when
        there is no such commit to make (the process commits per task, its commit already ran or nothing was
        staged)."""
        commit = next((t for t in tasks if (t.input or {}).get("commit_staged")), None)
        stagers = [t for t in tasks if (t.input or {}).get("stage_only")]
        if (
            commit is None
            or commit.status != TaskStatus.PLANNED
            or "partial_commit" in (process.summary or {})
            or not any(t.status == TaskStatus.SUCCESS for t in stagers)
        ):
            return False
        _cancel_unfinished(session, process.process_id, stagers)
        process.summary = {**(process.summary or {}), "partial_commit": {"status": status.value, "reason": reason}}
        log.info("process %s commits the tasks that succeeded: %s", process.process_id, reason)
        return True

    def close_for_change(self, process_id: int, reason: str) -> None:
        """A change the explorer saw closes a running process: its table's configuration (self-optimizing turned
        off, the table moved to another resource group: explorer._process_to_close), or the table gone from its
        catalog (any action's process). It ends CANCELED with `reason`, as Amoro's handleConfigChanged closes a
        process without committing and its table runtime's disposal closes the table's process. A task already
        granted its commit still commits (as a cancel from the API lets it); a process that ended meanwhile is left
        alone."""
        with self.db.write() as session:
            process = session.get(ProcessRow, process_id)
            if process is None or process.status != ProcessStatus.RUNNING:
                return
            self._end(session, process, ProcessStatus.CANCELED, reason)
        self.on_process_end()

    def _end(
        self,
        session: Session,
        process: ProcessRow,
        status: ProcessStatus,
        reason: str | None,
        diagnosis: dict[str, Any] | None = None,
    ) -> None:
        """End the process: its summary gets its tasks' results and usage, and a failure's diagnosis."""
        tasks = store.tasks_of(session, process.process_id)
        _cancel_unfinished(session, process.process_id, tasks)
        factory = self.registry.factory(process.action)
        # outputs stored before results named their action carry the process's action
        results = [
            TASK_RESULT.validate_python({"action": process.action, **(t.output or {})})
            for t in tasks
            if t.status == TaskStatus.SUCCESS
        ]
        ended = utcnow()
        duration_ms = int((ended - as_utc(process.plan_time)).total_seconds() * 1000)
        summary = {
            **(process.summary or {}),
            **factory.summarize(results),
            **usage_summary(total_usage([t.usage for t in tasks])),
            "duration_ms": duration_ms,
        }
        if diagnosis:
            summary["failure"] = diagnosis
        store.transition_process(
            session,
            process.process_id,
            ProcessStatus.RUNNING,
            status,
            end_time=ended,
            fail_reason=reason,
            summary=summary,
        )
        factory.on_end(session, process, status)
        log.info(
            "%s process %s of %s.%s.%s ended: %s%s",
            process.action,
            process.process_id,
            process.catalog_name,
            process.db_name,
            process.table_name,
            status.value,
            f" ({reason})" if reason else "",
        )

    # ---- recovery

    def recover(self) -> list[str]:
        """At start-up: heal what a server that died mid-way left behind; returns what was done.

        Each action's factory heals its tables' state; a running process whose tasks all ended is
        settled now. Tasks held by optimizers stay theirs: the keeper takes them back if those
        optimizers are gone.
        """
        done: list[str] = []
        with self.db.write() as session:
            processes = store.running_processes(session)
            running = {p.process_id for p in processes}
            for action in self.registry.actions():
                done += self.registry.factory(action).recover_tables(session, running)
            # self-optimizing turned off, and the server gone before it closed the process (Amoro's
            # OptimizingQueue.initTableRuntime closes it at start as well)
            turned_off = {
                p.process_id
                for p in processes
                if p.action == Action.OPTIMIZING
                and OptimizingConfig.enabled_in(table_store.runtime_config(session, p.table_id)) is False
            }
        for process_id in sorted(running - turned_off):
            self.settle(process_id)
        for process_id in sorted(turned_off):
            self.close_for_change(process_id, TURNED_OFF)
            done.append(f"process {process_id}: its table's self-optimizing is off, canceled")
        for line in done:
            log.warning("recovered %s", line)
        return done


def _cancel_unfinished(session: Session, process_id: int, tasks: list[Any]) -> None:
    """Cancels those of the process's `tasks` that neither succeeded nor were canceled already."""
    for task in tasks:
        if task.status not in (TaskStatus.SUCCESS, TaskStatus.CANCELED):
            store.transition_task(
                session, process_id, task.task_id, TaskStatus(task.status), TaskStatus.CANCELED, ended_at=utcnow()
            )
