"""Scheduling without Spark: group isolation, the quota and balanced policies, the per-table cap, cancel."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from lakewarden.api.context import ServerContext
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import ProcessPlan
from lakewarden.domain.scheduling import thread_cap
from lakewarden.domain.states import ProcessStatus
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.protocol.messages import FailureKind
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as store
from lakewarden.store import tables as table_store
from lakewarden.store.database import utcnow
from lakewarden.store.models import TableRuntimeRow, TaskRow
from lakewarden.store.runtime import transition_table
from lakewarden.store.tables import TableRecord
from tests.helpers import minor_task


def ctx_of(client: TestClient) -> ServerContext:
    return client.app.state.context  # type: ignore[attr-defined, no-any-return]


def add_table(ctx: ServerContext, name: str, group: str = "default", **config: str) -> TableRecord:
    with ctx.db.write() as session:
        if not catalog_store.catalog_exists(session, "c"):
            catalog_store.create_catalog(
                session, CatalogSpec("c", "sql", {"uri": "sqlite:////x.db", "warehouse": "/w"})
            )
        return table_store.add_table(session, TableIdentifier("c", "db", name), group, dict(config))


def make_pending(ctx: ServerContext, rec: TableRecord, **fields: Any) -> None:
    with ctx.db.write() as session:
        assert transition_table(session, rec.runtime.table_id, TableStatus.IDLE, TableStatus.PENDING, **fields)


def process_with_tasks(ctx: ServerContext, rec: TableRecord, tasks: int, group: str = "default") -> int:
    specs = [minor_task(f"p={i}", [i]) for i in range(tasks)]
    with ctx.db.write() as session:
        return store.create_process(session, rec, group, "optimizing", ProcessPlan("minor", 1, specs)).process_id


def start_optimizing(ctx: ServerContext, rec: TableRecord, process_id: int) -> None:
    """Walk the table IDLE -> PENDING -> PLANNING -> MINOR_OPTIMIZING, as the planner does for `process_id`."""
    steps = [TableStatus.IDLE, TableStatus.PENDING, TableStatus.PLANNING, TableStatus.MINOR_OPTIMIZING]
    with ctx.db.write() as session:
        for a, b in itertools.pairwise(steps):
            assert transition_table(session, rec.runtime.table_id, a, b, optimizing_process_id=process_id)


def register(client: TestClient, group: str, parallelism: int = 1) -> str:
    response = client.post("/api/v1/optimizer/register", json={"group": group, "parallelism": parallelism})
    assert response.status_code == 200, response.text
    return str(response.json()["token"])


def poll(client: TestClient, token: str) -> Any:
    response = client.post("/api/v1/optimizer/poll", json={"token": token, "thread_id": 0, "timeout_seconds": 0})
    return None if response.status_code == 204 else response.json()


def test_groups_are_isolated(client: TestClient) -> None:
    ctx = ctx_of(client)
    assert client.post("/api/v1/resource-groups", json={"name": "etl", "container": "local"}).status_code == 201
    process_with_tasks(ctx, add_table(ctx, "t"), tasks=1, group="default")
    assert poll(client, register(client, "etl")) is None  # another group's work is not handed out
    assert poll(client, register(client, "default"))["task_id"] == 1


def test_per_table_cap_follows_quota(client: TestClient) -> None:
    ctx = ctx_of(client)
    ctx.dispatcher.break_quota_limit = False  # (tested on its own below)
    rec = add_table(ctx, "t", **{"self-optimizing.quota": "0.5"})
    process_with_tasks(ctx, rec, tasks=4)
    token = register(client, "default", parallelism=4)  # 4 threads x quota 0.5 = 2 tasks at once
    assert [poll(client, token)["task_id"] for _ in range(2)] == [1, 2]
    assert poll(client, token) is None
    ref = {"token": token, "process_id": 1, "task_id": 1, "attempt": 1}
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204
    assert (
        client.post("/api/v1/optimizer/complete", json={**ref, "output": {"action": "optimizing"}}).status_code == 204
    )
    assert poll(client, token)["task_id"] == 3  # a slot came free


def test_a_quota_above_one_is_a_number_of_threads(client: TestClient) -> None:
    """Amoro's getQuotaLimit: quota 3 means three threads, whatever the group has; up to 1 a share of them."""
    assert [thread_cap(q, 8) for q in (3.0, 2.5, 1.0, 0.5, 0.1, 0.0)] == [3, 2, 8, 4, 1, 1]
    assert thread_cap(0.5, 0) == 1  # no optimizer yet: the group counts one thread
    ctx = ctx_of(client)
    ctx.dispatcher.break_quota_limit = False
    rec = add_table(ctx, "t", **{"self-optimizing.quota": "3"})
    process_with_tasks(ctx, rec, tasks=5)
    token = register(client, "default", parallelism=8)
    assert [poll(client, token)["task_id"] for _ in range(3)] == [1, 2, 3]
    assert poll(client, token) is None  # three threads held, though five of eight are idle


def test_an_idle_thread_breaks_a_quota_when_nothing_else_waits(client: TestClient) -> None:
    """break-quota-limit-enabled (Amoro's default): a poll that found nothing within the quotas, and no table to
    plan, takes a task past its table's quota; with it off the thread stays idle."""
    ctx = ctx_of(client)
    rec = add_table(ctx, "t", **{"self-optimizing.quota": "0.1"})
    process_with_tasks(ctx, rec, tasks=3)
    token = register(client, "default", parallelism=4)  # quota 0.1 of 4 threads: one at a time
    assert poll(client, token)["task_id"] == 1
    ctx.dispatcher.break_quota_limit = False
    assert poll(client, token) is None
    ctx.dispatcher.break_quota_limit = True
    assert poll(client, token)["task_id"] == 2  # past the quota: nothing else to do
    other = add_table(ctx, "other")
    process_with_tasks(ctx, other, tasks=1)
    assert poll(client, token)["task_id"] == 1 and poll(client, token)["task_id"] == 3  # within quotas first


def test_balanced_policy_picks_the_least_recently_optimized(client: TestClient) -> None:
    ctx = ctx_of(client)
    assert (
        client.put(
            "/api/v1/resource-groups/default", json={"properties": {"scheduling-policy": "balanced"}}
        ).status_code
        == 200
    )
    now = utcnow()
    recent, old, never = add_table(ctx, "recent"), add_table(ctx, "old"), add_table(ctx, "never")
    make_pending(ctx, recent, last_minor_optimizing_at=now - timedelta(minutes=1))
    make_pending(ctx, old, last_minor_optimizing_at=now - timedelta(days=1))
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "old"
    why = picked[1]  # the policy's numbers for the table picked and for the runner-up, kept with its process
    assert (why["policy"], why["candidates"]) == ("balanced", 2)
    assert why["chosen"]["table"] == "c.db.old" and why["runner_up"]["table"] == "c.db.recent"
    assert 86_000 < why["chosen"]["seconds_since_optimized"] < 86_500
    assert 50 < why["runner_up"]["seconds_since_optimized"] < 120
    assert (
        why["reason"].startswith("balanced: last optimized 86")
        and "runner-up c.db.recent last optimized" in why["reason"]
    )
    make_pending(ctx, never)
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "never"
    assert picked[1]["chosen"]["seconds_since_optimized"] is None
    assert picked[1]["reason"].startswith("balanced: never optimized, ahead of 2 other(s)")


def test_quota_policy_picks_the_lowest_share_of_quota_used(client: TestClient) -> None:
    ctx = ctx_of(client)
    busy = add_table(ctx, "busy", **{"self-optimizing.quota": "0.5"})
    idle = add_table(ctx, "idle", **{"self-optimizing.quota": "0.1"})
    # `busy` ran a task for 20 minutes in the last hour; no optimizer yet, so the group counts one thread and
    # `busy`'s quota of 0.5 allows ceil(0.5 x 1) = 1 thread: 0.33 h / (1 thread x 1 h) = 33% of its quota
    pid = process_with_tasks(ctx, busy, tasks=1)
    with ctx.db.write() as session:
        session.execute(
            update(TaskRow).values(
                acked_at=utcnow() - timedelta(minutes=25),
                ended_at=utcnow() - timedelta(minutes=5),
            )
        )
        store.transition_process(session, pid, ProcessStatus.RUNNING, ProcessStatus.SUCCESS)
    make_pending(ctx, busy)
    make_pending(ctx, idle)
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "idle"  # 0% used beats 33%
    why = picked[1]
    assert why["chosen"] == {
        "table": "c.db.idle",
        "quota": 0.1,
        "thread_limit": 1,
        "used_seconds": 0.0,
        "quota_share_used": 0.0,
        "seconds_since_optimized": None,
    }
    runner_up = why["runner_up"]
    assert runner_up["table"] == "c.db.busy" and runner_up["quota"] == 0.5
    assert 1199 < runner_up["used_seconds"] < 1202 and 0.333 < runner_up["quota_share_used"] < 0.334
    assert why["reason"] == (
        "quota: used 0.0% of its quota in the last hour, ahead of 1 other(s); "
        "runner-up c.db.busy used 33.3% of its quota in the last hour"
    )


def test_min_plan_interval_holds_a_table_back(client: TestClient) -> None:
    ctx = ctx_of(client)
    rec = add_table(ctx, "t", **{"self-optimizing.min-plan-interval": "600000"})
    make_pending(ctx, rec, last_planned_at=utcnow() - timedelta(minutes=1))
    assert ctx.dispatcher._pick_table("default") is None


def test_a_table_with_a_write_in_flight_waits_to_be_planned_within_a_bound(client: TestClient) -> None:
    """A rewrite planned while a client's row-level write is in flight would be planned on files the write may
    change: the table waits for the write's commit, but not beyond the flights' deferral."""
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    make_pending(ctx, rec)
    flights, table = ctx.dispatcher.flights, ("c", "db", "t")
    flights.planned(table, {"app-id": "job"})
    assert ctx.dispatcher._pick_table("default") is None
    flights.committed(table, {"app-id": "job"})
    assert ctx.dispatcher._pick_table("default") is not None
    flights.planned(table, {"app-id": "job"})  # a job writing without pause: past the deferral it is planned
    with ctx.db.write() as session:
        session.execute(
            update(TableRuntimeRow)
            .where(TableRuntimeRow.table_id == rec.runtime.table_id)
            .values(status_changed_at=utcnow() - timedelta(seconds=flights.max_deferral + 1))
        )
    assert ctx.dispatcher._pick_table("default") is not None


def test_a_table_whose_row_level_writers_have_not_paused_waits_to_be_planned(client: TestClient) -> None:
    """Learned from its snapshots (domain/writer_cadence.py): a burst of a job's DELETE/UPDATE/MERGE is taken to
    be over after a pause of twice its gaps; until then the table is not planned, within the deferral."""
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    now_ms = int(utcnow().timestamp() * 1000)
    busy = {"writers": {"last_write_ms": now_ms, "pause_ms": 30_000}}
    make_pending(ctx, rec, evaluation=busy)
    assert ctx.dispatcher._pick_table("default") is None
    paused = {"writers": {"last_write_ms": now_ms - 40_000, "pause_ms": 30_000}}
    with ctx.db.write() as session:
        session.execute(
            update(TableRuntimeRow).where(TableRuntimeRow.table_id == rec.runtime.table_id).values(evaluation=paused)
        )
    assert ctx.dispatcher._pick_table("default") is not None


def test_cancel_a_running_process(client: TestClient) -> None:
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    pid = process_with_tasks(ctx, rec, tasks=2)
    start_optimizing(ctx, rec, pid)
    token = register(client, "default")
    task = poll(client, token)
    ref = {"token": token, "process_id": pid, "task_id": task["task_id"], "attempt": task["attempt"]}
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204

    canceled = client.post(f"/api/v1/processes/{pid}/cancel")
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["status"] == "canceled"
    assert [t["status"] for t in canceled.json()["tasks"]] == ["canceled", "canceled"]
    assert client.get("/api/v1/tables/c/db/t").json()["status"] == "idle"
    late = client.post("/api/v1/optimizer/complete", json={**ref, "output": {"action": "optimizing"}})
    assert late.status_code == 409  # the running task's report is refused
    again = client.post(f"/api/v1/processes/{pid}/cancel")
    assert again.status_code == 409 and "not running" in again.json()["error"]["message"]
    assert poll(client, token) is None
    # the optimizer hears it on its next heartbeat (and cancels the task's Spark jobs) and may not commit
    running = [{k: ref[k] for k in ("process_id", "task_id", "attempt")}]
    touched = client.post("/api/v1/optimizer/touch", json={"token": token, "running": running})
    assert touched.status_code == 200 and touched.json()["revoked"] == running
    refused = client.post("/api/v1/optimizer/commit", json=ref)
    assert refused.status_code == 409 and "canceled" in refused.json()["error"]["message"]


def test_a_commit_is_granted_once_and_a_cancel_after_it_does_not_revoke_the_grant(client: TestClient) -> None:
    _, pid, token = one_task_optimizing(client)
    task = poll(client, token)
    ref = {"token": token, "process_id": pid, "task_id": 1, "attempt": task["attempt"]}
    key = {k: ref[k] for k in ("process_id", "task_id", "attempt")}
    assert client.post("/api/v1/optimizer/commit", json=ref).status_code == 409  # not acked yet
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204
    assert client.post("/api/v1/optimizer/touch", json={"token": token, "running": [key]}).json()["revoked"] == []
    assert client.post("/api/v1/optimizer/commit", json=ref).status_code == 204
    assert client.post("/api/v1/optimizer/commit", json=ref).status_code == 204  # asked again: the same answer
    shown = client.get(f"/api/v1/processes/{pid}").json()
    assert [t["status"] for t in shown["tasks"]] == ["committing"]
    done = client.post("/api/v1/optimizer/complete", json={**ref, "output": {"action": "optimizing", "files_in": 2}})
    assert done.status_code == 204, done.text
    assert client.get(f"/api/v1/processes/{pid}").json()["status"] == "success"


def test_a_commit_grant_waits_for_a_row_level_write_in_flight_on_its_table(client: TestClient) -> None:
    """A client planned a row-level write on the table (its scan report said so): lakewarden's commit waits for
    that client's commit, so the rewrite does not land between the write's plan and its commit."""
    ctx, pid, token = one_task_optimizing(client)
    task = poll(client, token)
    ref = {"token": token, "process_id": pid, "task_id": 1, "attempt": task["attempt"]}
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204
    flights, table = ctx.dispatcher.flights, ("c", "db", "t")
    flights.planned(("c", "db", "other"), {"app-id": "elsewhere"})  # another table's write holds nothing
    flights.planned(table, {"app-id": "job"})
    answers: list[int] = []
    asking = threading.Thread(
        target=lambda: answers.append(client.post("/api/v1/optimizer/commit", json=ref).status_code)
    )
    asking.start()
    asking.join(0.5)
    assert asking.is_alive() and answers == []
    flights.committed(table, {"app-id": "job"})
    asking.join(10)
    assert answers == [204]


def end_backoff(ctx: ServerContext, pid: int) -> None:
    """Let the back-off of the process's retried tasks pass."""
    with ctx.db.write() as session:
        session.execute(update(TaskRow).where(TaskRow.process_id == pid).values(retry_after=utcnow()))


def fail_task(client: TestClient, token: str, pid: int, attempt: int, error: str, **extra: Any) -> None:
    ref = {"token": token, "process_id": pid, "task_id": 1, "attempt": attempt}
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204
    failed = client.post("/api/v1/optimizer/complete", json={**ref, "error": error, **extra})
    assert failed.status_code == 204, failed.text


def one_task_optimizing(client: TestClient, **config: str) -> tuple[ServerContext, int, str]:
    """Table c.db.t optimizing with a process of one task, and an optimizer of the default group."""
    ctx = ctx_of(client)
    rec = add_table(ctx, "t", **config)
    pid = process_with_tasks(ctx, rec, tasks=1)
    start_optimizing(ctx, rec, pid)
    return ctx, pid, register(client, "default")


def test_failed_task_is_retried_then_the_process_fails(client: TestClient) -> None:
    ctx, pid, token = one_task_optimizing(client, **{"self-optimizing.execute.num-retries": "2"})
    for attempt in (1, 2, 3):  # the first try and two retries
        task = poll(client, token)
        assert (task["task_id"], task["attempt"]) == (1, attempt)
        fail_task(client, token, pid, attempt, f"boom {attempt}")
        if attempt < 3:
            assert poll(client, token) is None  # the retry waits out its back-off
            end_backoff(ctx, pid)
    process = client.get(f"/api/v1/processes/{pid}").json()
    assert process["status"] == "failed"
    assert process["fail_reason"] == "task 1 failed 3 time(s): boom 3"
    assert process["tasks"][0]["retry_count"] == 2
    assert client.get("/api/v1/tables/c/db/t").json()["status"] == "idle"  # to be planned afresh
    assert poll(client, token) is None


def test_a_retry_waits_a_growing_backoff(client: TestClient) -> None:
    ctx, pid, token = one_task_optimizing(client)
    assert [ctx.engine.backoff(n) for n in (0, 1, 2)] == [timedelta(seconds=s) for s in (5, 10, 20)]
    assert ctx.engine.backoff(12) == timedelta(minutes=5)  # at most task-retry-backoff-max
    for attempt, seconds in ((1, 5), (2, 10)):
        assert poll(client, token)["attempt"] == attempt
        before = utcnow()
        fail_task(client, token, pid, attempt, "IOException: the disk went away", failure="transient")
        after = utcnow()  # the back-off starts when the failure is settled, somewhere in between
        task = client.get(f"/api/v1/processes/{pid}").json()["tasks"][0]
        assert (task["status"], task["failure"], task["retryable"], task["retry_count"]) == (
            "planned",
            "transient",
            True,
            attempt,
        )
        retry_after = datetime.fromisoformat(task["retry_after"]).replace(tzinfo=UTC)
        assert before + timedelta(seconds=seconds) <= retry_after <= after + timedelta(seconds=seconds)
        assert poll(client, token) is None  # not before the back-off ends
        end_backoff(ctx, pid)
    assert poll(client, token)["attempt"] == 3


def test_a_conflict_is_retried_after_the_base_backoff_each_time(client: TestClient) -> None:
    """A compaction that lost a race with a writer: waiting longer does not make winning likelier."""
    ctx, pid, token = one_task_optimizing(client, **{"self-optimizing.execute.num-retries": "3"})
    assert ctx.engine.backoff(3, FailureKind.CONFLICT) == timedelta(seconds=5)
    for attempt in (1, 2, 3):
        assert poll(client, token)["attempt"] == attempt
        before = utcnow()
        fail_task(
            client,
            token,
            pid,
            attempt,
            "ValidationException: Cannot commit, found new position delete",
            failure="conflict",
        )
        after = utcnow()
        task = client.get(f"/api/v1/processes/{pid}").json()["tasks"][0]
        assert (task["status"], task["failure"], task["retry_count"]) == ("planned", "conflict", attempt)
        retry_after = datetime.fromisoformat(task["retry_after"]).replace(tzinfo=UTC)
        assert before + timedelta(seconds=5) <= retry_after <= after + timedelta(seconds=5)
        end_backoff(ctx, pid)
    assert poll(client, token)["attempt"] == 4


def test_a_failure_is_diagnosed_on_its_task_and_its_process(client: TestClient) -> None:
    _, pid, token = one_task_optimizing(client, **{"self-optimizing.execute.num-retries": "0"})
    assert poll(client, token)["attempt"] == 1
    diagnosis = {"error_class": "java.lang.OutOfMemoryError", "root_cause": "OutOfMemoryError: Java heap space"}
    diagnosis["hint"] = "Spark ran out of memory"
    fail_task(client, token, pid, 1, "OutOfMemoryError: Java heap space", failure="transient", diagnosis=diagnosis)
    process = client.get(f"/api/v1/processes/{pid}").json()
    assert process["status"] == "failed"
    assert process["tasks"][0]["diagnosis"] == diagnosis
    assert process["diagnosis"] == diagnosis  # the task that failed the process
    too_long = {**diagnosis, "hint": "x" * 1001}
    refused = client.post(
        "/api/v1/optimizer/complete",
        json={"token": token, "process_id": pid, "task_id": 1, "attempt": 1, "error": "e", "diagnosis": too_long},
    )
    assert refused.status_code == 400 and "diagnosis.hint" in refused.text


def test_a_final_failure_is_not_retried(client: TestClient) -> None:
    _, pid, token = one_task_optimizing(client, **{"self-optimizing.execute.num-retries": "5"})
    assert poll(client, token)["attempt"] == 1
    fail_task(client, token, pid, 1, "ValidationException: Cannot expire snapshots: GC is disabled", failure="final")
    process = client.get(f"/api/v1/processes/{pid}").json()
    assert process["status"] == "failed"
    assert process["fail_reason"] == (
        "task 1 failed with an error no retry can change (not retried): "
        "ValidationException: Cannot expire snapshots: GC is disabled"
    )
    task = process["tasks"][0]
    assert (task["retry_count"], task["failure"], task["retryable"], task["retry_after"]) == (0, "final", False, None)
    assert client.get("/api/v1/tables/c/db/t").json()["status"] == "idle"
    assert poll(client, token) is None


def test_an_ack_sent_again_is_answered_the_same(client: TestClient) -> None:
    """An optimizer whose ack's answer was lost (the server restarting) sends it again: same answer."""
    _, pid, token = one_task_optimizing(client)
    task = poll(client, token)
    ref = {"token": token, "process_id": pid, "task_id": 1, "attempt": task["attempt"]}
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204
    assert client.post("/api/v1/optimizer/ack", json=ref).status_code == 204
    stale = client.post("/api/v1/optimizer/ack", json={**ref, "attempt": task["attempt"] + 1})
    assert stale.status_code == 409


def test_a_planning_creates_nothing_once_self_optimizing_is_turned_off(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that turns the table's self-optimizing off while its planning runs (chaos seed 343): the plan is
    dropped in the transaction that would create its process, and the table goes back to idle."""
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    make_pending(ctx, rec)
    factory = ctx.engine.registry.factory("optimizing", rec.identifier.format)

    def planned_while_turned_off(rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        with ctx.db.write() as session:  # what the explorer's refresh writes, meanwhile
            runtime = table_store.tables_by_id(session, [rec.runtime.table_id])[rec.name].runtime
            runtime.config = {**runtime.config, "self-optimizing.enabled": "false"}
        return ProcessPlan("minor", 1, [minor_task("p=0", [0])])

    monkeypatch.setattr(ctx.engine, "load", lambda rec, spec: None)
    monkeypatch.setattr(factory, "create", planned_while_turned_off)
    assert ctx.engine.start_optimizing(rec, "default") is False
    with ctx.db.read() as session:
        assert store.running_processes(session, table_id=rec.runtime.table_id) == []
        runtime = table_store.tables_by_id(session, [rec.runtime.table_id])[rec.name].runtime
        assert runtime.status_code == TableStatus.IDLE


def test_recovery_cancels_the_running_process_of_a_table_whose_self_optimizing_is_off(client: TestClient) -> None:
    """The server went away after a refresh recorded self-optimizing off but before it closed the running
    process: at start the process is canceled (Amoro's OptimizingQueue.initTableRuntime); a table still on keeps
    its process."""
    ctx = ctx_of(client)
    off = add_table(ctx, "off", **{"self-optimizing.enabled": "false"})
    on = add_table(ctx, "on")
    processes = {}
    for rec in (off, on):
        processes[rec.name.table] = process_with_tasks(ctx, rec, tasks=1)
        start_optimizing(ctx, rec, processes[rec.name.table])
    done = ctx.engine.recover()
    assert f"process {processes['off']}: its table's self-optimizing is off, canceled" in done
    with ctx.db.read() as session:
        canceled = store.get_process(session, processes["off"])
        assert (canceled.status, canceled.fail_reason) == (ProcessStatus.CANCELED, "self-optimizing was turned off")
        assert store.get_process(session, processes["on"]).status == ProcessStatus.RUNNING
        runtimes = table_store.tables_by_id(session, [off.runtime.table_id, on.runtime.table_id])
        assert runtimes[off.name].runtime.status_code == TableStatus.IDLE
        assert runtimes[on.name].runtime.status_code == TableStatus.MINOR_OPTIMIZING
