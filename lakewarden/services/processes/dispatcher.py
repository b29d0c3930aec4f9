"""The dispatcher: hands the tasks of every action's processes to a resource group's optimizer threads.

Under the group's lock a poll gets a PLANNED task of a running process (oldest first, if its factory lets it run,
its back-off has passed and its table is under its thread share), or else the dispatcher picks a PENDING table by
the group's policy and has the engine plan it. Acks and completions are compare-and-swaps on status, attempt and
optimizer, so a superseded attempt's message is refused."""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy.orm import Session

from lakewarden.domain.budget import READ_TRIGGERED
from lakewarden.domain.catalogs import THROUGH_LAKEWARDEN, CatalogSpec
from lakewarden.domain.costs import Price, add_usage
from lakewarden.domain.errors import Conflict, InvalidField
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.processes import BLOCKS_OPTIMIZING
from lakewarden.domain.scheduling import Candidate, ranked, thread_cap, why_first
from lakewarden.domain.security import Grant, Privilege, optimizer_id
from lakewarden.domain.states import TASK_ACTIVE, TaskStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.domain.writer_cadence import of_document
from lakewarden.protocol.inputs import TASK_INPUT
from lakewarden.protocol.messages import Assignment, CatalogConnection, Completion
from lakewarden.services.access.auth import AuthService
from lakewarden.services.loop import WakeSignal
from lakewarden.services.processes.budget import budget_of, weigh
from lakewarden.services.processes.engine import ProcessEngine
from lakewarden.services.rest_catalog.writes_in_flight import WritesInFlight
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import groups as group_store
from lakewarden.store import process_files
from lakewarden.store import processes as store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)


# an optimizer's token for an internal catalog lives this long; a new one is made when half of it is left
CATALOG_TOKEN_TTL = timedelta(days=1)


class Polled(NamedTuple):
    """A poll's answer: the task handed out, if any, and when there is none and the poll could not wait,
    how many seconds its optimizer should let pass before it polls again."""

    assignment: Assignment | None
    retry_after: int | None = None


class TaskDispatcher:
    def __init__(
        self,
        db: Database,
        engine: ProcessEngine,
        work_ready: WakeSignal | None = None,
        auth: AuthService | None = None,
        node_url: str | None = None,
        price: Price | None = None,
        max_long_polls: int = 16,
        break_quota_limit: bool = True,
        flights: WritesInFlight | None = None,
    ) -> None:
        self.db = db
        # row-level writes planned on lakewarden's own catalogs and not yet committed: a task's commit waits
        # for those on its table (services/rest_catalog/writes_in_flight.py)
        self.flights = flights or WritesInFlight()
        self.break_quota_limit = break_quota_limit
        self.price = price or Price()  # the server's default; a group's properties may set its own
        # lakewarden's own catalogs are reached at the node that hands the task out (with high availability
        # the stored URI is the node that seeded the catalog, which may be gone)
        self.node_url = node_url
        self.engine = engine
        self.work_ready = work_ready or WakeSignal()  # notified when tasks may be ready: long polls look again
        self.auth = auth
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._catalog_tokens: dict[tuple[str, str], tuple[float, str]] = {}
        # each waiting poll holds one of the server's worker threads: at most max_long_polls wait at once, so
        # that optimizers cannot take every thread from the REST catalog and the API
        self.max_long_polls = max_long_polls
        self.long_polls = 0  # waiting now
        self.polls_turned_away = 0  # answered at once because max_long_polls were waiting
        self._long_polls_guard = threading.Lock()

    def _lock(self, group: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(group, threading.Lock())

    # ---- poll

    def poll(self, token: str, thread_id: int, timeout_seconds: float) -> Polled:
        """A task for this optimizer thread, waiting up to `timeout_seconds` for one. When max_long_polls
        polls are waiting already, this one looks once and, finding nothing, asks to be repeated after the
        time it would have waited."""
        if timeout_seconds <= 0:
            return Polled(self._poll(token, thread_id, 0.0))
        with self._long_polls_guard:
            waits = self.long_polls < self.max_long_polls
            if waits:
                self.long_polls += 1
            else:
                self.polls_turned_away += 1
        if not waits:
            assignment = self._poll(token, thread_id, 0.0)
            return Polled(assignment, None if assignment is not None else max(1, math.ceil(timeout_seconds)))
        try:
            return Polled(self._poll(token, thread_id, timeout_seconds))
        finally:
            with self._long_polls_guard:
                self.long_polls -= 1

    def _poll(self, token: str, thread_id: int, timeout_seconds: float) -> Assignment | None:
        deadline = time.monotonic() + timeout_seconds
        while True:
            with self.db.read() as session:
                optimizer = store.get_optimizer(session, token)
                group, leaving = optimizer.group_name, store.asked_to_leave(optimizer)
            # draining: it finishes what it runs and takes nothing new (its poll waits as an empty one does)
            assignment = None if leaving else self._schedule(group, token, thread_id)
            remaining = deadline - time.monotonic()
            if leaving:
                # its polls still count as heartbeats: a draining optimizer learns it must leave at its next
                # heartbeat, which may come later than a short heart-beat-timeout
                with self.db.write() as session:
                    store.touch_optimizer(session, token)
                if remaining <= 0:
                    return None
                self.work_ready.wait(min(remaining, 1.0))
                continue
            if assignment is None and remaining <= 0 and self.break_quota_limit:
                # nothing within the quotas came while the poll waited: an idle thread helps a table past its
                # quota rather than wait (Amoro's OptimizingQueue.pollTask with break-quota-limit-enabled)
                with self._lock(group):
                    assignment = self._next_planned(group, token, thread_id, within_quota=False)
            if assignment is not None or remaining <= 0:
                return assignment
            self.work_ready.wait(min(remaining, 1.0))  # a back-off that ends is noticed within a second

    def _schedule(self, group: str, token: str, thread_id: int) -> Assignment | None:
        with self._lock(group):
            assignment = self._next_planned(group, token, thread_id)
            if assignment is None:
                picked = self._pick_table(group)
                if picked is not None:
                    table, why = picked
                    # its status last changed when it turned pending: how long the table waited to be planned
                    why = {**why, "pending_since": as_utc(table.runtime.status_changed_at).isoformat()}
                    if self.engine.start_optimizing(table, group, scheduling=why):
                        assignment = self._next_planned(group, token, thread_id)
            return assignment

    def _next_planned(self, group: str, token: str, thread_id: int, within_quota: bool = True) -> Assignment | None:
        """Hand out the first planned task a table may still run (`within_quota`: holding fewer threads than its
        quota allows); polling counts as a heartbeat."""
        with self.db.write() as session:
            store.touch_optimizer(session, token)
            threads = store.group_threads(session, group)
            for process in store.running_processes(session, group):
                counts = store.task_status_counts(session, process.process_id)
                if not counts.get(TaskStatus.PLANNED):
                    continue
                factory = self.engine.registry.factory(process.action)
                if not factory.may_dispatch(session, process):
                    continue
                active = sum(counts.get(s, 0) for s in TASK_ACTIVE)
                if within_quota and active >= thread_cap(_quota(session, process.table_id), threads):
                    continue  # the table has its share of the group's threads
                task = store.first_planned_task(session, process.process_id)
                if task is not None and store.transition_task(
                    session,
                    process.process_id,
                    task.task_id,
                    TaskStatus.PLANNED,
                    TaskStatus.SCHEDULED,
                    expected_attempt=task.attempt,
                    attempt=task.attempt + 1,
                    optimizer_token=token,
                    thread_id=thread_id,
                    scheduled_at=utcnow(),
                    acked_at=None,
                ):
                    spec = catalog_store.spec_of(catalog_store.get_catalog(session, process.catalog_name))
                    work = factory.dispatch_input(session, process, TASK_INPUT.validate_python(task.input))
                    catalog = CatalogConnection(
                        name=spec.name, type=spec.type, properties=self._connection(token, spec)
                    )
                    return Assignment(
                        process_id=process.process_id,
                        task_id=task.task_id,
                        attempt=task.attempt + 1,
                        type=task.type,
                        input=work,
                        catalog=catalog,
                    )
        return None

    def _connection(self, token: str, spec: CatalogSpec) -> dict[str, str]:
        """What the optimizer connects with. For lakewarden's own catalogs, and those it forwards to (Glue): this
        server's URL and a token of the server's that reaches a table of that catalog only while this optimizer
        holds a task on it, made once per optimizer and catalog (Spark keeps a catalog open with the credential
        it was opened with; the Iceberg client renews it by token exchange before it expires)."""
        properties = dict(spec.properties)
        if spec.type in THROUGH_LAKEWARDEN and spec.type != "internal":
            properties = {}  # the optimizer reaches it through this server: the catalog's own keys stay here
        if spec.type in THROUGH_LAKEWARDEN and self.node_url is not None:
            properties["uri"] = f"{self.node_url.rstrip('/')}/iceberg"
        if spec.type not in THROUGH_LAKEWARDEN or self.auth is None or not self.auth.enabled:
            return properties
        key = (token, spec.name)
        now = time.time()
        with self._guard:
            cached = self._catalog_tokens.get(key)
            if cached is None or cached[0] - now < CATALOG_TOKEN_TTL.total_seconds() / 2:
                grant = Grant(spec.name, Privilege.WRITE)
                subject = f"optimizer {optimizer_id(token)}"
                issued = self.auth.catalog_token(subject, [grant], CATALOG_TOKEN_TTL, holder=optimizer_id(token))
                cached = self._catalog_tokens[key] = (now + issued.expires_in, issued.token)
        properties["token"] = cached[1]
        return properties

    def _pick_table(self, group: str) -> tuple[TableRecord, dict[str, Any]] | None:
        """The next PENDING table of the group by its scheduling policy (by value within its budget when it sets
        one), past its min-plan-interval (the read trigger's, for a table a budgeted group's reads made pending) and
        not blocked by a maintenance process that must not run beside optimizing; with why it goes first (the
        policy's numbers for it and for the runner-up)."""
        now = utcnow()
        with self.db.read() as session:
            policy = store.group_policy(session, group)
            threads = store.group_threads(session, group)
            blocked = {p.table_id for p in store.running_processes(session, group) if p.action in BLOCKS_OPTIMIZING}
            budget = budget_of(session, group)
            candidates = []
            for rec in table_store.list_tables(session, status=TableStatus.PENDING, group=group):
                try:
                    config = OptimizingConfig.of(rec.runtime.config)
                except InvalidField:
                    continue  # misconfigured: the evaluator says why
                planned = rec.runtime.last_planned_at
                interval = timedelta(milliseconds=config.min_plan_interval_ms)
                if budget is not None:
                    interval = budget.min_plan_interval(config, READ_TRIGGERED in (rec.runtime.evaluation or {}))
                if rec.runtime.table_id in blocked or (planned is not None and now - as_utc(planned) < interval):
                    continue
                if self._writes_in_flight(rec, now):
                    continue
                r = rec.runtime
                times = [
                    as_utc(t).timestamp()
                    for t in (r.last_minor_optimizing_at, r.last_major_optimizing_at, r.last_full_optimizing_at)
                    if t is not None
                ]
                used = (
                    store.task_seconds_since(session, r.table_id, now - timedelta(hours=1))
                    if policy != "balanced"
                    else 0.0
                )
                limit = thread_cap(config.quota, threads)
                candidates.append(Candidate(rec, str(rec.name), config.quota, limit, used, max(times, default=0.0)))
            if budget is not None and candidates:  # a budget: by value, within it (services/processes/budget.py)
                weighed = weigh(session, group, budget, [c.table for c in candidates], now)
                picked = weighed.pick()
                return None if picked is None else (picked[1], weighed.why(picked[0]))
        order = ranked(policy, candidates)
        return (order[0].table, why_first(policy, order, now.timestamp())) if order else None

    def _writes_in_flight(self, rec: TableRecord, now: datetime) -> bool:
        """Whether to leave a table unplanned for now: a client's row-level write to it is in flight (a rewrite
        started now would be planned on files the write may change), or its row-level writers have not paused
        as long as their cadence says a burst of theirs lasts (domain/writer_cadence.py: the defence where
        lakewarden sees no scan), and the table has not waited longer than the flights' deferral (a job
        writing without pause would keep it waiting for good)."""
        name = rec.identifier
        writers = of_document((rec.runtime.evaluation or {}).get("writers"))
        learned = writers is not None and writers.busy(int(now.timestamp() * 1000))
        if not learned and not self.flights.in_flight((name.catalog_name, name.db_name, name.table_name)):
            return False
        waited = now - as_utc(rec.runtime.status_changed_at)
        return waited.total_seconds() < self.flights.max_deferral

    # ---- ack and complete

    def ack(self, token: str, process_id: int, task_id: int, attempt: int) -> None:
        with self.db.write() as session:
            store.touch_optimizer(session, token)
            acked = store.transition_task(
                session,
                process_id,
                task_id,
                TaskStatus.SCHEDULED,
                TaskStatus.ACKED,
                expected_attempt=attempt,
                expected_token=token,
                acked_at=utcnow(),
            )
            # an ack sent again after its answer was lost (the server restarting) is answered the same
            if not acked and not store.task_is(session, process_id, task_id, TaskStatus.ACKED, attempt, token):
                raise Conflict(f"task {process_id}.{task_id} attempt {attempt} is not scheduled to this optimizer")

    def grant_commit(self, token: str, process_id: int, task_id: int, attempt: int) -> None:
        """Let a task commit: ACKED -> COMMITTING, unless its process was canceled or the task taken back
        meanwhile. A cancel after the grant does not stop the commit; one before it does. While a client's
        row-level write to the table is in flight the grant waits for its commit, within the write's hold."""
        with self.db.read() as session:
            process = store.get_process(session, process_id)
            table = (process.catalog_name, process.db_name, process.table_name)
        if not self.flights.wait_clear(table, self.flights.hold(table)):
            log.info("task %d.%d commits with writes still in flight on %s", process_id, task_id, ".".join(table))
        with self.db.write() as session:
            store.touch_optimizer(session, token)
            granted = store.transition_task(
                session,
                process_id,
                task_id,
                TaskStatus.ACKED,
                TaskStatus.COMMITTING,
                expected_attempt=attempt,
                expected_token=token,
            )
            if not granted and not store.task_is(session, process_id, task_id, TaskStatus.COMMITTING, attempt, token):
                task = store.find_task(session, process_id, task_id)
                status = "gone" if task is None else task.status
                raise Conflict(f"task {process_id}.{task_id} attempt {attempt} may not commit: it is {status}")

    def heartbeat(self, token: str, running: list[tuple[int, int, int]]) -> tuple[list[tuple[int, int, int]], bool]:
        """A heartbeat: of the tasks the optimizer runs, those it must stop; and whether it is asked to leave."""
        with self.db.write() as session:
            optimizer = store.touch_optimizer(session, token)
            return store.revoked_tasks(session, token, running), store.asked_to_leave(optimizer)

    def complete(self, done: Completion) -> None:
        """A task's result, or its error and whether a retry may pass; the engine settles its process."""
        new = TaskStatus.FAILED if done.error else TaskStatus.SUCCESS
        output: dict[str, Any] | None = None
        files: dict[str, list[str]] = {}
        if done.output is not None:
            output = done.output.model_dump(mode="json")
            # the files it changed go apart, listed a page at a time: a large rewrite makes no large row
            files = {kind: output.pop(kind) for kind in done.output.FILES}
        with self.db.write() as session:
            store.touch_optimizer(session, done.token)
            usage = {} if done.usage is None else {"usage": self._usage(session, done.process_id, done)}
            if not any(
                store.transition_task(
                    session,
                    done.process_id,
                    done.task_id,
                    running,
                    new,
                    expected_attempt=done.attempt,
                    expected_token=done.token,
                    output=output,
                    error=done.error,
                    failure=done.failure.value if done.error else None,
                    diagnosis=done.diagnosis.model_dump() if done.error and done.diagnosis else None,
                    ended_at=utcnow(),
                    **usage,
                )
                for running in (TaskStatus.ACKED, TaskStatus.COMMITTING)
            ):
                raise Conflict(
                    f"task {done.process_id}.{done.task_id} attempt {done.attempt} is not running on this optimizer"
                )
            process_files.add_process_files(session, done.process_id, done.task_id, files)
        self.engine.settle(done.process_id)

    def _usage(self, session: Session, process_id: int, done: Completion) -> dict[str, Any] | None:
        """The task's usage with this attempt's added, costed at its group's price now."""
        assert done.usage is not None
        found = store.task_usage(session, process_id, done.task_id)
        if found is None:
            return None
        kept, group = found
        return add_usage(kept, done.usage, self.price.for_group(group_store.group_properties(session, group)))


def _quota(session: Session, table_id: int) -> float:
    return OptimizingConfig.or_defaults(table_store.runtime_config(session, table_id)).quota
