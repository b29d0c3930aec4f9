"""What the dashboard's charts read: each table's shape sampled on a change at most every
interval, each group's load sampled by the leader, both served by the API and pruned like the rest of history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select, update

from lakewarden.config import HistoryConfig
from lakewarden.services.tables.history import HistoryPruner
from lakewarden.store import shapes
from lakewarden.store.database import utcnow
from lakewarden.store.models import GroupLoadRow, TableShapeRow
from tests.test_scheduling import add_table, ctx_of, process_with_tasks


def verdict(snapshot_id: int, data: int, small: int, deletes: int = 0) -> dict[str, Any]:
    return {
        "snapshot_id": snapshot_id,
        "type": None,
        "reasons": [],
        "partitions": [],
        "pending_partitions": 0,
        "data_files": data,
        "small_files": small,
        "delete_files": deletes,
    }


def test_a_shape_is_sampled_on_a_change_at_most_once_per_interval(client: TestClient) -> None:
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    rec.runtime.summary = {"files-size-bytes": 8 * 1024}
    interval = timedelta(minutes=5)

    def sample(document: dict[str, Any]) -> shapes.Sampling:
        shape = shapes.shape_of(document, rec.runtime.summary)
        assert shape is not None
        with ctx.db.write() as session:
            return shapes.sample_table_shape(session, rec.runtime.table_id, shape, interval)

    assert sample(verdict(1, data=8, small=8)).sampled  # the first
    assert sample(verdict(1, data=8, small=8)) == shapes.Sampling(False)  # the same shape: nothing new
    waits = sample(verdict(2, data=2, small=0))  # a change inside the interval waits for the interval's end
    assert not waits.sampled and waits.deferred_until is not None
    assert abs(waits.deferred_until - (utcnow() + interval)) < timedelta(seconds=30)
    with ctx.db.write() as session:  # ... until the interval has passed since the newest sample
        session.execute(update(TableShapeRow).values(sampled_at=utcnow() - interval - timedelta(seconds=1)))
    assert sample(verdict(2, data=2, small=0)).sampled
    assert shapes.shape_of({"snapshot_id": 3, "type": None, "reasons": ["evaluation failed"]}, {}) is None

    history = client.get("/api/v1/tables/c/db/t/history").json()
    assert [(s["snapshot_id"], s["data_files"], s["small_files"], s["health"]) for s in history["samples"]] == [
        (1, 8, 8, "poor"),
        (2, 2, 0, "good"),
    ]
    first = history["samples"][0]
    assert first["sampled_at"].endswith("+00:00")  # UTC, also where SQLite hands back naive times
    assert first["average_file_bytes"] == 1024 and first["small_file_ratio"] == 1.0 and first["delete_file_ratio"] == 0
    assert history["processes"] == []
    assert client.get("/api/v1/tables/c/db/nope/history").status_code == 404
    assert client.get("/api/v1/tables/c/db/t/history", params={"limit": 0}).status_code == 400


def test_the_evaluator_samples_what_it_records(client: TestClient) -> None:
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    ctx.evaluator._record([(rec, verdict(5, data=3, small=3))])
    process_with_tasks(ctx, rec, tasks=1)  # a process since the first sample: marked on the chart
    history = client.get("/api/v1/tables/c/db/t/history").json()
    assert [s["snapshot_id"] for s in history["samples"]] == [5]
    assert [(p["action"], p["status"]) for p in history["processes"]] == [("optimizing", "running")]


def test_each_group_load_is_sampled_and_served(client: TestClient) -> None:
    ctx = ctx_of(client)
    rec = add_table(ctx, "t")
    process_with_tasks(ctx, rec, tasks=3)
    response = client.post("/api/v1/optimizer/register", json={"group": "default", "parallelism": 2})
    assert response.status_code == 200
    ctx.load_sampler.run_once()
    ctx.load_sampler.run_once()
    samples = client.get("/api/v1/resource-groups/default/history").json()
    assert len(samples) == 2 and samples[0]["sampled_at"].endswith("+00:00")
    assert {k: samples[-1][k] for k in ("optimizers", "threads", "busy", "queued", "pending_tables")} == {
        "optimizers": 1,
        "threads": 2,
        "busy": 0,
        "queued": 3,
        "pending_tables": 0,
    }
    assert client.get("/api/v1/resource-groups/nope/history").status_code == 404


def test_samples_are_pruned_the_newest_of_each_kept(client: TestClient) -> None:
    ctx = ctx_of(client)
    a, b = add_table(ctx, "a"), add_table(ctx, "b")
    old = utcnow() - timedelta(days=60)
    with ctx.db.write() as session:
        for table_id in (a.runtime.table_id, b.runtime.table_id):
            for n in range(3):
                session.add(
                    TableShapeRow(
                        table_id=table_id,
                        sampled_at=old + timedelta(minutes=n),
                        snapshot_id=n,
                        data_files=n,
                        delete_files=0,
                        small_files=0,
                        total_bytes=0,
                        health="good",
                    )
                )
        for n in range(3):
            session.add(
                GroupLoadRow(
                    group_name="default",
                    sampled_at=old + timedelta(minutes=n),
                    optimizers=0,
                    threads=0,
                    busy=0,
                    queued=n,
                    pending_tables=0,
                )
            )
    keeper = HistoryPruner(ctx.db, HistoryConfig(), ctx.config.data_dir / "optimizers")
    deleted = keeper.prune()
    assert deleted["table-shapes"] == 4 and deleted["group-load"] == 2
    with ctx.db.read() as session:
        kept = session.execute(select(TableShapeRow.table_id, TableShapeRow.snapshot_id)).all()
        assert sorted(kept) == sorted([(a.runtime.table_id, 2), (b.runtime.table_id, 2)])
        assert list(session.scalars(select(GroupLoadRow.queued))) == [2]
