"""The keeper and the protocol's refusals, on the real server app and database (no Spark needed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from lakewarden.api.context import ServerContext
from lakewarden.config import Config
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import ProcessPlan
from lakewarden.domain.tables import TableIdentifier
from lakewarden.services.processes.keeper import OptimizerKeeper
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as store
from lakewarden.store import tables as table_store
from tests.conftest import as_admin
from tests.helpers import minor_task

ZERO = timedelta(0)
HOUR = timedelta(hours=1)


def setup_process(ctx: ServerContext) -> int:
    """A running process with one planned task, as the planner would leave it."""
    with ctx.db.write() as session:
        catalog_store.create_catalog(session, CatalogSpec("c", "sql", {"uri": "sqlite:////x.db", "warehouse": "/w"}))
        rec = table_store.add_table(session, TableIdentifier("c", "db", "t"), "default", {})
        task = minor_task(cost_bytes=20)
        return store.create_process(session, rec, "default", "optimizing", ProcessPlan("minor", 1, [task])).process_id


def post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/optimizer/{path}", json=body)


def test_timeouts_and_lost_optimizers_send_tasks_back(client: TestClient) -> None:
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    process_id = setup_process(ctx)
    token = post(client, "register", {"group": "default", "parallelism": 2}).json()["token"]
    ref = {"token": token, "process_id": process_id, "task_id": 1}

    first = post(client, "poll", {"token": token, "thread_id": 0, "timeout_seconds": 0})
    assert first.status_code == 200, first.text
    assert (first.json()["attempt"], first.json()["catalog"]["name"]) == (1, "c")
    assert post(client, "ack", {**ref, "attempt": 1}).status_code == 204

    # running past the execute timeout: back to PLANNED; the late completion is refused
    assert OptimizerKeeper(ctx.db, HOUR, HOUR, ZERO).release() == 1
    late = post(client, "complete", {**ref, "attempt": 1, "output": {"action": "optimizing", "files_in": 1}})
    assert late.status_code == 409
    assert "attempt 1" in late.json()["error"]["message"]

    # handed out again with a new attempt; not acked in time: back to PLANNED, the late ack refused
    assert post(client, "poll", {"token": token, "thread_id": 1, "timeout_seconds": 0}).json()["attempt"] == 2
    assert OptimizerKeeper(ctx.db, HOUR, ZERO, HOUR).release() == 1
    assert post(client, "ack", {**ref, "attempt": 2}).status_code == 409

    # an optimizer that stops its heartbeat is lost with its tasks
    assert post(client, "poll", {"token": token, "thread_id": 0, "timeout_seconds": 0}).json()["attempt"] == 3
    assert post(client, "ack", {**ref, "attempt": 3}).status_code == 204
    assert OptimizerKeeper(ctx.db, ZERO, HOUR, HOUR).release() == 1
    assert post(client, "touch", {"token": token}).status_code == 404
    assert post(client, "poll", {"token": token, "thread_id": 0, "timeout_seconds": 0}).status_code == 404

    # another optimizer picks the task up and completes it; the process succeeds
    other = post(client, "register", {"group": "default", "parallelism": 1}).json()["token"]
    task = post(client, "poll", {"token": other, "thread_id": 0, "timeout_seconds": 0}).json()
    assert task["attempt"] == 4
    done = {"token": other, "process_id": process_id, "task_id": 1, "attempt": 4}
    assert post(client, "ack", done).status_code == 204
    assert (
        post(
            client, "complete", {**done, "output": {"action": "optimizing", "files_in": 3, "files_out": 1}}
        ).status_code
        == 204
    )
    process = client.get(f"/api/v1/processes/{process_id}").json()
    assert process["status"] == "success"
    assert process["summary"]["files_in"] == 3
    # nothing left to hand out
    assert post(client, "poll", {"token": other, "thread_id": 0, "timeout_seconds": 0}).status_code == 204


def test_protocol_rejects_bad_input(client: TestClient) -> None:
    bad_group = post(client, "register", {"group": "nope", "parallelism": 1})
    assert bad_group.status_code == 400 and bad_group.json()["error"]["message"].startswith("group")
    assert post(client, "register", {"group": "default", "parallelism": 0}).status_code == 400
    token = post(client, "register", {"group": "default", "parallelism": 1}).json()["token"]
    both = post(client, "complete", {"token": token, "process_id": 1, "task_id": 1, "attempt": 1})
    assert both.status_code == 400 and "exactly one of output and error" in both.json()["error"]["message"]
    too_long = post(client, "poll", {"token": token, "thread_id": 0, "timeout_seconds": 60})
    assert too_long.status_code == 400 and too_long.json()["error"]["message"].startswith("timeout_seconds")
    assert client.post("/api/v1/processes/999/cancel").status_code == 404


def test_restart_heals_what_a_dead_server_left(config: Config) -> None:
    from lakewarden.api.app import create_app
    from lakewarden.domain.states import TaskStatus
    from lakewarden.domain.tables import TableStatus
    from lakewarden.store.runtime import transition_table

    with TestClient(create_app(config, start_services=False)) as first:
        as_admin(first, config)
        ctx: ServerContext = first.app.state.context  # type: ignore[attr-defined]
        process_id = setup_process(ctx)
        with ctx.db.write() as session:
            table_id = table_store.get_table(session, TableIdentifier("c", "db", "t")).runtime.table_id
            for a, b in [(TableStatus.IDLE, TableStatus.PENDING), (TableStatus.PENDING, TableStatus.PLANNING)]:
                assert transition_table(session, table_id, a, b)
            assert transition_table(
                session, table_id, TableStatus.PLANNING, TableStatus.MINOR_OPTIMIZING, optimizing_process_id=process_id
            )
            stuck = table_store.add_table(session, TableIdentifier("c", "db", "planning"), "default", {})
            for a, b in [(TableStatus.IDLE, TableStatus.PENDING), (TableStatus.PENDING, TableStatus.PLANNING)]:
                assert transition_table(session, stuck.runtime.table_id, a, b)
            gone = table_store.add_table(session, TableIdentifier("c", "db", "orphan"), "default", {})
            for a, b in [
                (TableStatus.IDLE, TableStatus.PENDING),
                (TableStatus.PENDING, TableStatus.PLANNING),
                (TableStatus.PLANNING, TableStatus.MAJOR_OPTIMIZING),
            ]:
                assert transition_table(session, gone.runtime.table_id, a, b)
            # the task finished, but the server died before it settled the process
            for before, after in [
                (TaskStatus.PLANNED, TaskStatus.SCHEDULED),
                (TaskStatus.SCHEDULED, TaskStatus.ACKED),
                (TaskStatus.ACKED, TaskStatus.SUCCESS),
            ]:
                assert store.transition_task(session, process_id, 1, before, after)

    with TestClient(create_app(config, start_services=False)) as second:  # the restart
        as_admin(second, config)
        tables = {t["table"]: t["status"] for t in second.get("/api/v1/tables").json()}
        assert tables == {"t": "idle", "planning": "pending", "orphan": "idle"}
        process = second.get(f"/api/v1/processes/{process_id}").json()
        assert process["status"] == "success"
        assert second.get("/api/v1/tables/c/db/t").json()["last_minor_optimizing_at"] is not None
