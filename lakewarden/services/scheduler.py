"""The process scheduler: one queue per resource group, handing the tasks of every action's processes
to the group's optimizers, and planning pending tables for self-optimizing.

An optimizer thread polls its group's queue. The queue first hands out a PLANNED task of a running
process, oldest process first, if its factory lets it run now and its table has not used its share
of the group's threads (derived from self-optimizing.quota); failing that, it picks a PENDING table
by the group's scheduling policy, plans it on its current snapshot and hands out the first task.
Acks and completions are compare-and-swaps on (status, attempt, optimizer): a message from a
superseded attempt is refused. Processes of every action are retried, cancelled, settled and
recovered here alike; their factories (services/processes.py) say what is particular to each.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import Conflict
from lakewarden.domain.evaluator import OptimizingType
from lakewarden.domain.maintenance import Action
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.processes import NothingToDo
from lakewarden.domain.states import OPTIMIZING_STATUS, TASK_ACTIVE, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.services.catalog_access import catalog_for
from lakewarden.services.metadata_service import MetadataService
from lakewarden.services.processes import ProcessRegistry
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import optimizing as store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)
# maintenance actions during which a table is not planned for optimizing
BLOCKS_OPTIMIZING = frozenset({Action.EXPIRE_SNAPSHOTS.value, Action.CLEAN_ORPHAN_FILES.value})


@dataclass(frozen=True)
class Assignment:
    process_id: int
    task_id: int
    attempt: int
    type: str
    input: dict[str, Any]
    catalog: CatalogSpec


class ProcessScheduler:
    def __init__(
        self,
        db: Database,
        registry: ProcessRegistry,
        on_table_done: Any = None,
        metadata: MetadataService | None = None,
        retry_backoff: timedelta = timedelta(seconds=5),
        retry_backoff_max: timedelta = timedelta(minutes=5),
    ) -> None:
        self.db = db
        self.registry = registry
        # a failed task that may pass on a retry waits backoff * 2^retries (at most backoff_max) first
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.metadata = metadata  # internal catalogs' tables are read from it in-process
        self.on_table_done = on_table_done  # called when a process ends (the evaluator looks again)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._wakeup = threading.Condition()

    def _lock(self, group: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(group, threading.Lock())

    def wake(self) -> None:
        """New work may exist (a table turned pending, a task went back to PLANNED): wake long polls."""
        with self._wakeup:
            self._wakeup.notify_all()

    # ---- recovery

    def recover(self) -> list[str]:
        """At start-up: heal what a server that died mid-way left behind; returns what was done.

        Each action's factory heals its tables' state; a running process whose tasks all ended is
        settled now. Tasks held by optimizers stay theirs: the keeper takes them back if those
        optimizers are gone.
        """
        done: list[str] = []
        with self.db.write() as session:
            running = {p.process_id for p in store.running_processes(session)}
            for action in self.registry.actions():
                done += self.registry.factory(action).recover_tables(session, running)
        for process_id in sorted(running):
            self._settle(process_id)
        for line in done:
            log.warning("recovered %s", line)
        return done

    # ---- poll

    def poll(self, token: str, thread_id: int, timeout_seconds: float) -> Assignment | None:
        deadline = time.monotonic() + timeout_seconds
        while True:
            with self.db.read() as session:
                group = store.get_optimizer(session, token).group_name
            assignment = self._schedule(group, token, thread_id)
            remaining = deadline - time.monotonic()
            if assignment is not None or remaining <= 0:
                return assignment
            with self._wakeup:
                self._wakeup.wait(min(remaining, 1.0))

    def _schedule(self, group: str, token: str, thread_id: int) -> Assignment | None:
        with self._lock(group):
            assignment = self._next_planned(group, token, thread_id)
            if assignment is None and self._plan_next_table(group):
                assignment = self._next_planned(group, token, thread_id)
            return assignment

    def _next_planned(self, group: str, token: str, thread_id: int) -> Assignment | None:
        """Hand out the first planned task a table may still run; polling counts as a heartbeat."""
        with self.db.write() as session:
            store.touch_optimizer(session, token)
            threads = max(1, store.group_threads(session, group))
            for process in store.running_processes(session, group):
                counts = store.task_status_counts(session, process.process_id)
                if not counts.get(TaskStatus.PLANNED):
                    continue
                factory = self.registry.factory(process.action)
                if not factory.may_dispatch(session, process):
                    continue
                config = table_store.runtime_config(session, process.table_id)
                cap = max(1, math.ceil(float(config.get("self-optimizing.quota", 0.5)) * threads))
                if sum(counts.get(s, 0) for s in TASK_ACTIVE) >= cap:
                    continue  # the table has its share of the group's threads
                task = store.first_planned_task(session, process.process_id)
                if task is not None and store.transition_task(
                    session, process.process_id, task.task_id, TaskStatus.PLANNED, TaskStatus.SCHEDULED,
                    expected_attempt=task.attempt, attempt=task.attempt + 1, optimizer_token=token,
                    thread_id=thread_id, scheduled_at=utcnow(), acked_at=None,
                ):  # fmt: skip
                    spec = catalog_store.spec_of(catalog_store.get_catalog(session, process.catalog_name))
                    work = factory.dispatch_input(session, process, dict(task.input))
                    return Assignment(process.process_id, task.task_id, task.attempt + 1, task.type, work, spec)
        return None

    # ---- planning

    def _pick_table(self, group: str) -> TableRecord | None:
        """The next PENDING table of the group by its scheduling policy, past its min-plan-interval."""
        now = utcnow()
        with self.db.read() as session:
            policy = store.group_policy(session, group)
            candidates = []
            blocked = {p.table_id for p in store.running_processes(session, group) if p.action in BLOCKS_OPTIMIZING}
            for rec in table_store.list_tables(session, status=TableStatus.PENDING, group=group):
                if rec.runtime.table_id in blocked:
                    continue  # e.g. snapshots being expired: plan once that is done
                interval = timedelta(
                    milliseconds=int(rec.runtime.config.get("self-optimizing.min-plan-interval", 60000))
                )
                planned = rec.runtime.last_planned_at
                if planned is not None and now - as_utc(planned) < interval:
                    continue
                if policy == "balanced":
                    r = rec.runtime
                    times = (r.last_minor_optimizing_at, r.last_major_optimizing_at, r.last_full_optimizing_at)
                    last = [as_utc(t) for t in times if t is not None]
                    key: tuple[float, str] = (max(last).timestamp() if last else 0.0, str(rec.name))
                else:  # quota: lowest share of its quota used in the last hour
                    quota = max(float(rec.runtime.config.get("self-optimizing.quota", 0.5)), 1e-6)
                    used = store.task_seconds_since(session, rec.runtime.table_id, now - timedelta(hours=1))
                    key = (used / (quota * 3600.0), str(rec.name))
                candidates.append((key, rec))
        return min(candidates, key=lambda c: c[0])[1] if candidates else None

    def _plan_next_table(self, group: str) -> bool:
        rec = self._pick_table(group)
        if rec is None:
            return False
        table_id = rec.runtime.table_id
        with self.db.write() as session:
            if not runtime_store.transition_table(
                session, table_id, TableStatus.PENDING, TableStatus.PLANNING, last_planned_at=utcnow()
            ):
                return False
            spec = catalog_store.spec_of(catalog_store.get_catalog(session, rec.identifier.catalog_name))
        try:
            process = self._plan(rec, spec, group)
        except Exception as exc:
            log.warning("planning %s failed: %s", rec.name, exc)
            process = None
        with self.db.write() as session:
            if process is None:
                runtime_store.transition_table(session, table_id, TableStatus.PLANNING, TableStatus.IDLE)
                return False
            status = OPTIMIZING_STATUS[process[1]]
            runtime_store.transition_table(
                session, table_id, TableStatus.PLANNING, status, optimizing_process_id=process[0]
            )
        log.info("planned %s: process %s (%s)", rec.name, process[0], process[1].label)
        return True

    def _plan(self, rec: TableRecord, spec: CatalogSpec, group: str) -> tuple[int, Any] | None:
        """Plan on the table's current snapshot; the process and its tasks are written in one transaction."""
        factory = self.registry.factory(Action.OPTIMIZING, rec.identifier.format)
        with catalog_for(spec, self.metadata) as catalog:
            table = catalog.load_table((*rec.identifier.db_name.split("."), rec.identifier.table_name))
            try:
                plan = factory.create(rec, table, "pending", {})
            except NothingToDo:
                return None
        with self.db.write() as session:
            process = store.create_process(session, rec, group, Action.OPTIMIZING, plan)
            return process.process_id, OptimizingType[plan.type.upper()]

    def create_process(self, rec: TableRecord, spec: CatalogSpec, action: str, trigger: str,
                       options: dict[str, Any]) -> int:  # fmt: skip
        """A process of any action other than self-optimizing, planned now on the table's current
        metadata, in the table's group; raises NothingToDo (why there is no work) or Conflict (one
        of that action is already running on the table)."""
        factory = self.registry.factory(action, rec.identifier.format)
        with self.db.read() as session:
            if store.running_processes(session, table_id=rec.runtime.table_id, action=action):
                raise Conflict(f"a {action} process is already running on {rec.name}")
        with catalog_for(spec, self.metadata) as catalog:
            table = catalog.load_table((*rec.identifier.db_name.split("."), rec.identifier.table_name))
            plan = factory.create(rec, table, trigger, options)
        with self.db.write() as session:
            if store.running_processes(session, table_id=rec.runtime.table_id, action=action):
                raise Conflict(f"a {action} process is already running on {rec.name}")
            process = store.create_process(session, rec, rec.runtime.optimizing_group, action, plan)
            process_id = process.process_id
        log.info("%s process %s created for %s (%s)", action, process_id, rec.name, trigger)
        self.wake()
        return process_id

    # ---- ack and complete

    def ack(self, token: str, process_id: int, task_id: int, attempt: int) -> None:
        with self.db.write() as session:
            store.touch_optimizer(session, token)
            if not store.transition_task(
                session, process_id, task_id, TaskStatus.SCHEDULED, TaskStatus.ACKED,
                expected_attempt=attempt, expected_token=token, acked_at=utcnow(),
            ):  # fmt: skip
                raise Conflict(f"task {process_id}.{task_id} attempt {attempt} is not scheduled to this optimizer")

    def complete(
        self, token: str, process_id: int, task_id: int, attempt: int, output: dict[str, Any] | None,
        error: str | None, retryable: bool = True,
    ) -> None:  # fmt: skip
        """A task's result, or its error and whether a retry may pass (else its process fails at once)."""
        new = TaskStatus.FAILED if error else TaskStatus.SUCCESS
        with self.db.write() as session:
            store.touch_optimizer(session, token)
            if not store.transition_task(
                session, process_id, task_id, TaskStatus.ACKED, new, expected_attempt=attempt, expected_token=token,
                output=output, error=error, retryable=retryable if error else None, ended_at=utcnow(),
            ):  # fmt: skip
                raise Conflict(f"task {process_id}.{task_id} attempt {attempt} is not running on this optimizer")
        self._settle(process_id)

    def backoff(self, retry_count: int) -> timedelta:
        """How long a task waits before its retry number `retry_count + 1`."""
        return min(self.retry_backoff * (1 << min(retry_count, 30)), self.retry_backoff_max)

    def _settle(self, process_id: int) -> None:
        """Retry a failed task (after its back-off), or end the process when its tasks are done, one
        failed in a way no retry can change, or one used up its retries."""
        with self.db.write() as session:
            process = store.get_process(session, process_id)
            if process.status != ProcessStatus.RUNNING:
                return
            counts = store.task_status_counts(session, process_id)
            if counts.get(TaskStatus.FAILED, 0) == 0 and set(counts) != {TaskStatus.SUCCESS}:
                return  # tasks still to run, none failed: nothing to settle yet
            config = OptimizingConfig.of(table_store.runtime_config(session, process.table_id))
            tasks = store.tasks_of(session, process_id)
            failed = [t for t in tasks if t.status == TaskStatus.FAILED]
            final = next((t for t in failed if t.retryable is False), None)
            retry = next((t for t in failed if t.retry_count < config.execute_num_retries), None)
            if final is None and retry is not None:
                store.transition_task(
                    session, process_id, retry.task_id, TaskStatus.FAILED, TaskStatus.PLANNED,
                    expected_attempt=retry.attempt, retry_count=retry.retry_count + 1,
                    retry_after=utcnow() + self.backoff(retry.retry_count),
                )  # fmt: skip
                self.wake()
                return
            if final is not None:
                reason = f"task {final.task_id} failed with an error no retry can change (not retried): {final.error}"
                self._end(session, process, ProcessStatus.FAILED, reason)
            elif failed:
                reason = f"task {failed[0].task_id} failed {failed[0].retry_count + 1} time(s): {failed[0].error}"
                self._end(session, process, ProcessStatus.FAILED, reason)
            elif all(t.status == TaskStatus.SUCCESS for t in tasks):
                self._end(session, process, ProcessStatus.SUCCESS, None)
            else:
                return
        if self.on_table_done is not None:
            self.on_table_done()

    def cancel(self, process_id: int, reason: str = "canceled") -> None:
        with self.db.write() as session:
            process = store.get_process(session, process_id)
            if process.status != ProcessStatus.RUNNING:
                raise Conflict(f"process {process_id} is {process.status}, not running")
            self._end(session, process, ProcessStatus.CANCELED, reason)

    def _end(self, session: Any, process: ProcessRow, status: ProcessStatus, reason: str | None) -> None:
        tasks = store.tasks_of(session, process.process_id)
        for task in tasks:
            if task.status not in (TaskStatus.SUCCESS, TaskStatus.CANCELED):
                store.transition_task(session, process.process_id, task.task_id, TaskStatus(task.status),
                                      TaskStatus.CANCELED, ended_at=utcnow())  # fmt: skip
        factory = self.registry.factory(process.action)
        outputs = [t.output or {} for t in tasks if t.status == TaskStatus.SUCCESS]
        ended = utcnow()
        duration_ms = int((ended - as_utc(process.plan_time)).total_seconds() * 1000)
        summary = {**(process.summary or {}), **factory.summarize(outputs), "duration_ms": duration_ms}
        store.transition_process(
            session, process.process_id, ProcessStatus.RUNNING, status, end_time=ended, fail_reason=reason,
            summary=summary,
        )  # fmt: skip
        factory.on_end(session, process, status)
        log.info("%s process %s of %s.%s.%s ended: %s%s", process.action, process.process_id, process.catalog_name,
                 process.db_name, process.table_name, status.value, f" ({reason})" if reason else "")  # fmt: skip
