"""Which tables the evaluator reads: a table whose snapshot and configuration do not change is
read again only when its verdict says a time-based trigger can fire, when a process of it ends, when a failed
evaluation is retried or a chart's sample waits; never on a fixed recheck unless one is configured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from lakewarden.domain.processes import Action
from lakewarden.domain.states import ProcessStatus
from lakewarden.domain.tables import TableIdentifier, TableSnapshot, TableStatus
from lakewarden.services.tables.evaluation import RETRY_FAILED
from lakewarden.store import tables as table_store
from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.processes import transition_process
from tests.test_scheduling import add_table, ctx_of, process_with_tasks, start_optimizing


def _verdict(snapshot_id: int | None, **extra: Any) -> dict[str, Any]:
    return {"snapshot_id": snapshot_id, "type": None, "reasons": [], "partitions": [], "pending_partitions": 0, **extra}


def _due(client: TestClient, at: datetime | None = None) -> set[str]:
    ctx = ctx_of(client)
    with ctx.db.read() as session:
        return {rec.identifier.table_name for rec in table_store.due_for_evaluation(session, at or utcnow())}


def _next(client: TestClient, name: str) -> datetime | None:
    with ctx_of(client).db.read() as session:
        runtime = table_store.get_table(session, TableIdentifier("c", "db", name)).runtime
        return None if runtime.next_evaluation_at is None else as_utc(runtime.next_evaluation_at)


def test_a_table_that_does_not_change_is_read_again_only_when_a_trigger_can_fire(client: TestClient) -> None:
    ctx = ctx_of(client)
    evaluator = ctx.evaluator
    evaluator.recheck = None  # the default: no fixed recheck
    evaluator.shape_interval = None
    quiet, waiting, broken = (add_table(ctx, name) for name in ("quiet", "waiting", "broken"))
    assert _due(client) == {"quiet", "waiting", "broken"}  # never evaluated
    in_an_hour = utcnow() + timedelta(hours=1)
    evaluator._record(
        [
            (quiet, _verdict(None)),  # nothing time can change
            (waiting, _verdict(None, next_trigger_ms=int(in_an_hour.timestamp() * 1000))),
            (broken, _verdict(None, failed=True)),
        ]
    )
    assert _next(client, "quiet") is None
    assert abs(_next(client, "waiting") - in_an_hour) < timedelta(seconds=1)  # type: ignore[operator]
    assert abs(_next(client, "broken") - (utcnow() + RETRY_FAILED)) < timedelta(seconds=5)  # type: ignore[operator]
    assert _due(client) == set()
    assert _due(client, utcnow() + RETRY_FAILED + timedelta(seconds=5)) == {"broken"}
    assert _due(client, in_an_hour + timedelta(seconds=1)) == {"waiting", "broken"}
    assert _due(client, utcnow() + timedelta(days=365)) == {"waiting", "broken"}  # "quiet" waits for a change

    # a new snapshot, or a new configuration, makes a table due at once (as the explorer records them)
    with ctx.db.write() as session:
        runtime = table_store.runtime_of(session, quiet.runtime.table_id)
        assert runtime is not None
        moved = TableSnapshot("m2.metadata.json", 42, {}, {})
        table_store.record_table_snapshot(session, runtime, moved, "default", dict(runtime.config))
    assert _due(client) == {"quiet"}
    evaluator._record([(quiet, _verdict(42))])
    assert _due(client) == set()
    with ctx.db.write() as session:  # the same snapshot again (a refresh that found nothing new): not due
        runtime = table_store.runtime_of(session, quiet.runtime.table_id)
        assert runtime is not None
        table_store.record_table_snapshot(session, runtime, moved, "default", dict(runtime.config))
    assert _due(client) == set()
    with ctx.db.write() as session:
        runtime = table_store.runtime_of(session, quiet.runtime.table_id)
        assert runtime is not None
        config = {**runtime.config, "self-optimizing.target-size": "1048576"}
        table_store.record_table_snapshot(session, runtime, moved, "default", config)
    assert _due(client) == {"quiet"}
    # a configured recheck-interval is a ceiling for every table
    evaluator.recheck = timedelta(minutes=10)
    evaluator._record([(quiet, _verdict(42))])
    assert abs(_next(client, "quiet") - (utcnow() + timedelta(minutes=10))) < timedelta(seconds=5)  # type: ignore[operator]


def test_a_table_whose_process_ends_is_evaluated_again(client: TestClient) -> None:
    ctx = ctx_of(client)
    ctx.evaluator.recheck = None
    rec = add_table(ctx, "t")
    ctx.evaluator._record([(rec, _verdict(None))])
    assert _due(client) == set()
    process_id = process_with_tasks(ctx, rec, tasks=1)
    start_optimizing(ctx, rec, process_id)
    factory = ctx.engine.registry.factory(Action.OPTIMIZING)
    with ctx.db.write() as session:
        assert transition_process(session, process_id, ProcessStatus.RUNNING, ProcessStatus.FAILED)
        process = session.get(ProcessRow, process_id)
        assert process is not None
        factory.on_end(session, process, ProcessStatus.FAILED)
    with ctx.db.read() as session:
        runtime = table_store.runtime_of(session, rec.runtime.table_id)
        assert runtime is not None and TableStatus(runtime.status_code) is TableStatus.IDLE
    assert _due(client) == {"t"}  # the verdict before the process may be stale: looked at again


def test_a_deferred_chart_sample_brings_the_table_back_when_the_interval_is_over(client: TestClient) -> None:
    ctx = ctx_of(client)
    evaluator = ctx.evaluator
    evaluator.recheck = None
    evaluator.shape_interval = timedelta(minutes=5)
    rec = add_table(ctx, "t")
    rec.runtime.summary = {}
    shape = {"data_files": 8, "small_files": 8, "delete_files": 0}
    evaluator._record([(rec, _verdict(1, **shape))])  # sampled
    assert _next(client, "t") is None
    evaluator._record([(rec, _verdict(2, data_files=2, small_files=0, delete_files=0))])  # inside the interval
    deferred = _next(client, "t")
    assert deferred is not None and abs(deferred - (utcnow() + timedelta(minutes=5))) < timedelta(seconds=30)
    assert datetime.now(UTC) < deferred
