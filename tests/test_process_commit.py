"""One commit per process, on the real server app and database, an optimizer driven through the protocol by hand:
the tasks stage their files, the commit task gets what they staged, a failure or a cancel decides what commits
(`self-optimizing.allow-partial-commit`, Amoro's). Spark's side is in test_exact_plans.py and test_spark_commit.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.api.context import ServerContext
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import ProcessPlan, TaskSpec
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.protocol.inputs import FileGroupInput, OptimizingInput, PartitionRef
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import tables as table_store
from lakewarden.store.models import TableRuntimeRow

SHARED = "s3://lake/db/t/data/shared-eq-deletes.parquet"


def staged_task(n: int) -> TaskSpec:
    partition = PartitionRef(spec_id=0, path=f"p={n}", values=[n])
    group = FileGroupInput(
        partition=partition,
        rewrite=[f"s3://lake/db/t/data/p={n}/small-{i}.parquet" for i in range(3)],
        rewrite_pos=[],
        deletes=[SHARED, f"s3://lake/db/t/data/p={n}/own-deletes.parquet"],
        split_size=1 << 27,
        max_file_size=1 << 28,
    )
    work = OptimizingInput(
        table="db.t",
        snapshot_id=7,
        type="minor",
        partitions=[partition],
        filter='"true"',
        groups=[group],
        remove_deletes=[f"s3://lake/db/t/data/p={n}/own-deletes.parquet"],
        stage_only=True,
    )
    return TaskSpec("minor", work, [partition.model_dump()], 100)


def commit_task() -> TaskSpec:
    partitions = [PartitionRef(spec_id=0, path=f"p={n}", values=[n]) for n in (1, 2)]
    work = OptimizingInput(
        table="db.t",
        snapshot_id=7,
        type="minor",
        partitions=partitions,
        filter='"true"',
        remove_deletes=[SHARED],
        commit_staged=True,
    )
    return TaskSpec("minor", work, [p.model_dump() for p in partitions], 0, stage=1)


def setup(ctx: ServerContext, partial: bool) -> int:
    """A table optimizing in a process of two staging tasks and a commit task, as the planner leaves it."""
    config = {"self-optimizing.execute.num-retries": "0", "self-optimizing.allow-partial-commit": str(partial).lower()}
    with ctx.db.write() as session:
        catalog_store.create_catalog(session, CatalogSpec("c", "sql", {"uri": "sqlite:////x.db", "warehouse": "/w"}))
        rec = table_store.add_table(session, TableIdentifier("c", "db", "t"), "default", config)
        plan = ProcessPlan("minor", 7, [staged_task(1), staged_task(2), commit_task()])
        process_id = store.create_process(session, rec, "default", "optimizing", plan).process_id
        runtime_store.transition_table(session, rec.runtime.table_id, TableStatus.IDLE, TableStatus.PENDING)
        runtime_store.transition_table(session, rec.runtime.table_id, TableStatus.PENDING, TableStatus.PLANNING)
        runtime_store.transition_table(
            session,
            rec.runtime.table_id,
            TableStatus.PLANNING,
            TableStatus.MINOR_OPTIMIZING,
            optimizing_process_id=process_id,
        )
    return process_id


class Optimizer:
    """One optimizer thread speaking the protocol."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.token = self.post("register", {"group": "default", "parallelism": 1}).json()["token"]

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.client.post(f"/api/v1/optimizer/{path}", json={**body})

    def take(self) -> dict[str, Any] | None:
        polled = self.post("poll", {"token": self.token, "thread_id": 0, "timeout_seconds": 0})
        if polled.status_code == 204:
            return None
        task = dict(polled.json())
        ack = {"token": self.token, "process_id": task["process_id"], "task_id": task["task_id"]}
        assert self.post("ack", {**ack, "attempt": task["attempt"]}).status_code == 204
        return task

    def complete(self, task: dict[str, Any], **result: Any) -> None:
        ref = {"token": self.token, "process_id": task["process_id"], "task_id": task["task_id"]}
        done = self.post("complete", {**ref, "attempt": task["attempt"], **result})
        assert done.status_code == 204, done.text


def staged(n: int) -> dict[str, Any]:
    """A staging task's result: one file written for its group."""
    written = {"file-path": f"s3://lake/db/t/data/p={n}/compacted.parquet", "spec-id": 0, "content": "data"}
    return {
        "action": "optimizing",
        "files_in": 3,
        "files_out": 1,
        "staged": {"groups": [[written]], "deletes": [], "vectors": False},
    }


def failure() -> dict[str, Any]:
    return {"error": "java.lang.OutOfMemoryError: Java heap space", "failure": "final"}


def stage_one_then_end(client: TestClient, process_id: int, how: str) -> Optimizer:
    """The first staging task succeeds; then the second fails for good (`how` "failure") or the process is
    canceled ("cancel"). The optimizer, for what it polls next."""
    optimizer = Optimizer(client)
    first, second = optimizer.take(), optimizer.take()
    assert first is not None and second is not None
    optimizer.complete(first, output=staged(1))
    if how == "failure":
        optimizer.complete(second, **failure())
    else:
        assert client.post(f"/api/v1/processes/{process_id}/cancel").status_code in (200, 202, 204)
    return optimizer


def status_of(client: TestClient, process_id: int) -> tuple[str, list[str], str]:
    process = client.get(f"/api/v1/processes/{process_id}").json()
    table = client.get("/api/v1/tables/c/db/t").json()
    return process["status"], [t["status"] for t in process["tasks"]], table["status"]


def test_the_commit_task_commits_every_tasks_staged_files_and_the_shared_deletes(client: TestClient) -> None:
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    process_id = setup(ctx, partial=False)
    optimizer = Optimizer(client)
    first, second = optimizer.take(), optimizer.take()
    assert first is not None and second is not None and first["input"]["stage_only"]
    assert optimizer.take() is None  # the commit task waits for both
    optimizer.complete(first, output=staged(1))
    assert optimizer.take() is None
    optimizer.complete(second, output=staged(2))
    commit = optimizer.take()
    assert commit is not None and commit["task_id"] == 3
    work = commit["input"]
    assert [g["partition"]["path"] for g in work["groups"]] == ["p=1", "p=2"]
    assert [[f["file-path"] for f in g] for g in work["staged"]["groups"]] == [
        ["s3://lake/db/t/data/p=1/compacted.parquet"],
        ["s3://lake/db/t/data/p=2/compacted.parquet"],
    ]
    assert sorted(work["remove_deletes"]) == sorted(
        [SHARED, "s3://lake/db/t/data/p=1/own-deletes.parquet", "s3://lake/db/t/data/p=2/own-deletes.parquet"]
    )
    assert status_of(client, process_id) == ("running", ["success", "success", "acked"], "committing")
    optimizer.complete(
        commit, output={"action": "optimizing", "files_in": 6, "files_out": 2, "snapshot_id": 8, "process_commit": True}
    )
    process = client.get(f"/api/v1/processes/{process_id}").json()
    assert process["status"] == "success"
    assert (process["summary"]["files_in"], process["summary"]["files_out"]) == (6, 2)  # counted once
    assert status_of(client, process_id)[2] == "idle"


def test_a_failed_task_fails_the_process_with_nothing_committed(client: TestClient) -> None:
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    process_id = setup(ctx, partial=False)
    optimizer = Optimizer(client)
    first, second = optimizer.take(), optimizer.take()
    assert first is not None and second is not None
    optimizer.complete(first, output=staged(1))
    optimizer.complete(second, **failure())
    assert status_of(client, process_id) == ("failed", ["success", "canceled", "canceled"], "idle")
    assert optimizer.take() is None  # the commit task never runs
    process = client.get(f"/api/v1/processes/{process_id}").json()
    assert "task 2 failed" in process["fail_reason"] and process["summary"]["files_in"] == 0


@pytest.mark.parametrize("how", ["failure", "cancel"])
def test_a_partial_commit_commits_the_tasks_that_succeeded(client: TestClient, how: str) -> None:
    """Amoro's allow-partial-commit: a task out of retries, or a cancel, cancels the unfinished tasks and the
    process commits what the others staged, without the delete files the tasks shared; it ends FAILED (or
    CANCELED) all the same."""
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    process_id = setup(ctx, partial=True)
    optimizer = stage_one_then_end(client, process_id, how)
    assert status_of(client, process_id) == ("running", ["success", "canceled", "planned"], "minor_optimizing")
    commit = optimizer.take()
    assert commit is not None and commit["task_id"] == 3
    assert [g["partition"]["path"] for g in commit["input"]["groups"]] == ["p=1"]
    assert commit["input"]["remove_deletes"] == ["s3://lake/db/t/data/p=1/own-deletes.parquet"]  # not the shared
    assert len(commit["input"]["staged"]["groups"]) == 1
    optimizer.complete(
        commit, output={"action": "optimizing", "files_in": 3, "files_out": 1, "snapshot_id": 8, "process_commit": True}
    )
    process = client.get(f"/api/v1/processes/{process_id}").json()
    assert process["status"] == ("failed" if how == "failure" else "canceled")
    assert process["summary"]["files_in"] == 3 and process["summary"]["partial_commit"]["status"] == process["status"]
    if how == "failure":
        assert "task 2 failed" in process["fail_reason"]
    assert status_of(client, process_id)[2] == "idle"


@pytest.mark.parametrize("how", ["failure", "cancel"])
def test_a_property_turned_unreadable_mid_process_settles_it_by_the_defaults(client: TestClient, how: str) -> None:
    """A catalog lakewarden does not guard may leave a value it cannot read while a process runs: the process
    still ends (by the defaults: no partial commit), and the table goes back to idle."""
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    process_id = setup(ctx, partial=True)
    with ctx.db.write() as session:
        runtime = session.get(TableRuntimeRow, store.get_process(session, process_id).table_id)
        assert runtime is not None
        runtime.config = {**runtime.config, "self-optimizing.execute.num-retries": "often"}
    optimizer = stage_one_then_end(client, process_id, how)
    ended = "failed" if how == "failure" else "canceled"
    assert status_of(client, process_id)[0] == ended and status_of(client, process_id)[2] == "idle"
    assert optimizer.take() is None  # no partial commit: the defaults do not allow one
