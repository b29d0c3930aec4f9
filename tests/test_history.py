"""History stays bounded (`ams.history`, services/tables/history.py): ended processes with their tasks, the commit
timeline and the event outbox are pruned by age and count, never what the server still reads; the metrics'
counters do not go down; the optimizers' logs rotate."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from lakewarden.api.context import ServerContext
from lakewarden.config import HistoryConfig
from lakewarden.domain.states import ProcessStatus
from lakewarden.services.tables.history import HistoryPruner
from lakewarden.store import process_files
from lakewarden.store import processes as store
from lakewarden.store.models import CommitRow, EventRow, ProcessFileRow, ProcessRow, TaskRow

NOW = datetime(2026, 11, 1, tzinfo=UTC)
RUNNING = ProcessStatus.RUNNING


def _process(table_id: int, action: str, status: str, days_ago: float, files_in: int = 0) -> ProcessRow:
    at = NOW - timedelta(days=days_ago)
    return ProcessRow(
        table_id=table_id,
        catalog_name="lake",
        db_name="db",
        table_name=f"t{table_id}",
        group_name="default",
        action=action,
        type="minor" if action == "optimizing" else "scheduled",
        status=status,
        plan_time=at,
        end_time=None if status == "running" else at,
        summary={"files_in": files_in, "duration_ms": 1000},
    )


def _task(process_id: int) -> TaskRow:
    return TaskRow(
        process_id=process_id,
        task_id=1,
        status="success",
        type="minor",
        attempt=1,
        retry_count=0,
        partitions=[],
        input={},
        cost_bytes=0,
    )


def _metric(client: TestClient, line_start: str) -> float:
    text = client.get("/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


def test_processes_are_pruned_by_age_and_count_keeping_the_newest_and_the_running(client: TestClient) -> None:
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    # (table, action, status, days ago): oldest first
    layout = [
        (1, "optimizing", "success", 40),  # old: goes
        (1, "optimizing", "failed", 35),  # old: goes
        (1, "optimizing", "running", 45),  # has not ended: stays, however old
        (1, "optimizing", "success", 3),  # within 30 days, but beyond the newest 2 of its kind: goes
        (1, "optimizing", "success", 2),
        (1, "optimizing", "canceled", 1),  # newest two of (1, optimizing): stay
        (1, "expire-snapshots", "failed", 90),  # old, but the newest of (1, expire-snapshots): stays
        (2, "optimizing", "success", 60),  # old: goes
        (2, "optimizing", "success", 50),  # old, but the newest of (2, optimizing): stays
    ]
    ids = []
    with ctx.db.write() as session:
        for n, (table, action, status, days) in enumerate(layout):
            row = _process(table, action, "running", days, files_in=10 + n)
            session.add(row)
            session.flush()
            session.add(_task(row.process_id))
            process_files.add_process_files(session, row.process_id, 1, {"rewritten_files": [f"f{n}a", f"f{n}b"]})
            ids.append(row.process_id)
            if status != "running":  # ended as the engine ends processes: counted in the running totals
                end = {"end_time": row.plan_time}
                assert store.transition_process(session, row.process_id, RUNNING, ProcessStatus(status), **end)
    counted = _metric(client, "lakewarden_processes_total{")
    files_in = _metric(client, 'lakewarden_optimizing_files_in_total{catalog="lake"')
    assert counted == len(layout)

    keeper = HistoryPruner(ctx.db, HistoryConfig.model_validate({"processes": {"keep-count": 2}}), Path("/nonexistent"))
    deleted = keeper.prune(NOW)
    assert deleted["processes"] == 4
    with ctx.db.read() as session:
        kept = set(session.scalars(select(ProcessRow.process_id)))
        tasks = set(session.scalars(select(TaskRow.process_id)))
        files = list(session.scalars(select(ProcessFileRow.process_id)))
    assert kept == {ids[i] for i in (2, 4, 5, 6, 8)}
    assert tasks == kept  # a pruned process's tasks went with it
    assert sorted(files) == sorted([*kept, *kept])  # and its files

    # the counters carry what the pruned processes counted; the list pages show what is kept
    assert _metric(client, "lakewarden_processes_total{") == counted
    assert _metric(client, 'lakewarden_optimizing_files_in_total{catalog="lake"') == files_in
    overview = client.get("/api/v1/overview").json()
    assert overview["optimizing"]["succeeded"] == 5 and overview["optimizing"]["failed"] == 1
    assert keeper.prune(NOW)["processes"] == 0  # nothing left to prune
    assert _metric(client, "lakewarden_processes_total{") == counted


def test_processes_ending_at_once_are_each_counted_once(client: TestClient) -> None:
    """Two transactions end processes of the same table and kind at once: the second waits for the first's new
    totals row (PostgreSQL: its insert meets the first's key; SQLite: the write lock), then adds to it."""
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    with ctx.db.write() as session:
        rows = [_process(7, "optimizing", "running", 1, files_in=n) for n in (3, 4)]
        session.add_all(rows)
    first, second = (row.process_id for row in rows)
    began = threading.Event()
    ended: list[bool] = []

    def end_second() -> None:
        began.wait()
        with ctx.db.write() as session:
            ended.append(store.transition_process(session, second, RUNNING, ProcessStatus.SUCCESS, end_time=NOW))

    thread = threading.Thread(target=end_second)
    thread.start()
    with ctx.db.write() as session:
        assert store.transition_process(session, first, RUNNING, ProcessStatus.SUCCESS, end_time=NOW)
        began.set()
        time.sleep(0.5)  # the other transaction reaches the totals meanwhile
    thread.join()
    assert ended == [True]
    with ctx.db.write() as session:  # a process ends once: ending it again changes nothing
        assert not store.transition_process(session, first, RUNNING, ProcessStatus.SUCCESS, end_time=NOW)
    overview = client.get("/api/v1/overview").json()
    assert overview["optimizing"]["succeeded"] == 2 and overview["optimizing"]["files_in"] == 7


def test_timeline_and_events_are_pruned_keeping_each_tables_newest(client: TestClient) -> None:
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    with ctx.db.write() as session:
        for table, days in [("a", 40), ("a", 20), ("a", 10), ("a", 5), ("b", 60)]:
            session.add(
                CommitRow(
                    catalog_name="lake",
                    namespace="db",
                    table_name=table,
                    version=1,
                    operation="append",
                    summary={},
                    metadata_location=f"/m/{table}/{days}",
                    committed_at=NOW - timedelta(days=days),
                )
            )
        for days in (9, 8, 6, 5, 4, 3, 2):
            session.add(
                EventRow(
                    type="table-committed",
                    catalog_name="lake",
                    namespace="db",
                    table_name="a",
                    payload={"days": days},
                    created_at=NOW - timedelta(days=days),
                )
            )
    config = HistoryConfig.model_validate(
        {"timeline": {"keep-count": 2}, "events": {"keep-time": "7d", "keep-count": 3}}
    )
    keeper = HistoryPruner(ctx.db, config, Path("/nonexistent"))
    deleted = keeper.prune(NOW)
    with ctx.db.read() as session:
        timeline = sorted(session.scalars(select(CommitRow.metadata_location)))
        events = [e.payload.get("days") for e in session.scalars(select(EventRow).order_by(EventRow.event_id))]
        newest_event = max(session.scalars(select(EventRow.event_id)))
    assert timeline == ["/m/a/10", "/m/a/5", "/m/b/60"]  # a: newest 2 within 30 days; b: its newest
    assert events == [4, 3, 2]  # older than 7 days, and beyond the newest 3
    assert deleted["timeline"] == 2 and deleted["events"] == 4
    assert _metric(client, 'lakewarden_history_pruned_total{kind="events"}') == 0  # the runtime's keeper did none
    # readers following events by id go on from where they were; a new event takes a new id
    answer = client.get("/api/v1/events", params={"after": 0}).json()
    assert [e["payload"].get("days") for e in answer][-3:] == [4, 3, 2]
    with ctx.db.write() as session:
        row = EventRow(type="t", catalog_name="lake", namespace="db", table_name="a", payload={}, created_at=NOW)
        session.add(row)
        session.flush()
        assert row.event_id == newest_event + 1


def test_the_server_prunes_on_its_interval(client: TestClient) -> None:
    """The runtime's keeper is one of the leader's loops, configured from `ams.history`."""
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    assert ctx.history in ctx.loops
    assert ctx.history.interval_seconds == 3600
    with ctx.db.write() as session:
        for days in (100, 50):
            session.add(_process(7, "optimizing", "success", days))
    ctx.history.run_once()  # real time: both are older than 30 days; the newest stays
    with ctx.db.read() as session:
        assert len(list(session.scalars(select(ProcessRow.process_id)))) == 1
    assert _metric(client, 'lakewarden_history_pruned_total{kind="processes"}') == 1


def test_optimizer_logs_rotate_while_their_writer_appends(tmp_path: Path) -> None:
    logs = tmp_path / "optimizers"
    logs.mkdir()
    config = HistoryConfig.model_validate({"optimizer-logs": {"max-size": 2048, "backups": 2, "keep-time": "1d"}})
    keeper = HistoryPruner(None, config, logs)  # type: ignore[arg-type]  # logs only
    path = logs / "local-default-1.log"
    # a writer like an optimizer's: its output appended to the file it was given at start
    with path.open("ab") as out:
        writer = subprocess.Popen(
            [
                sys.executable,
                "-u",
                "-c",
                "import sys,time\nfor i in range(1000):\n print(f'line {i:04d}'); time.sleep(0.002)",
            ],
            stdout=out,
        )
    rotations = 0
    while writer.poll() is None:
        keeper.rotate_logs()
        rotations = keeper.logs_rotated
        time.sleep(0.05)
    keeper.rotate_logs()
    assert keeper.logs_rotated >= 2 and rotations >= 1
    assert sorted(p.name for p in logs.iterdir()) == [path.name, f"{path.name}.1", f"{path.name}.2"]
    for kept in logs.iterdir():
        assert kept.stat().st_size <= 2048 + 2000  # past the bound by at most what was written between two looks
        text = kept.read_bytes()
        assert b"\0" not in text  # truncated in place, appended after: no hole of zeros
    assert path.read_text().splitlines()[-1] == "line 0999"
    # logs nobody wrote for keep-time are deleted, copies included
    stale = logs / "local-default-0.log"
    stale.write_text("old\n")
    old = time.time() - 2 * 86400
    os.utime(stale, (old, old))
    keeper.rotate_logs()
    assert not stale.exists() and path.exists() and keeper.logs_deleted == 1


def test_log_rotation_touches_only_the_logs_themselves(tmp_path: Path) -> None:
    """A directory or a link in the optimizers' directory is left alone: nothing outside it is truncated or
    deleted, however large or old."""
    logs = tmp_path / "optimizers"
    logs.mkdir()
    outside = tmp_path / "elsewhere.log"
    outside.write_bytes(b"x" * 10_000)
    old = time.time() - 30 * 86400
    os.utime(outside, (old, old))
    (logs / "linked.log").symlink_to(outside)
    (logs / "sub.log").mkdir()
    os.utime(logs / "sub.log", (old, old))
    config = HistoryConfig.model_validate({"optimizer-logs": {"max-size": 2048, "keep-time": "1d"}})
    keeper = HistoryPruner(None, config, logs)  # type: ignore[arg-type]  # logs only
    keeper.rotate_logs()
    assert outside.read_bytes() == b"x" * 10_000 and (logs / "linked.log").is_symlink() and (logs / "sub.log").is_dir()
    assert keeper.logs_rotated == 0 and keeper.logs_deleted == 0


def test_each_service_counts_its_cpu_time(client: TestClient) -> None:
    """lakewarden_service_cpu_seconds_total: a service's passes on its own thread, and what other threads do in
    its `charged()` (the evaluator's and explorer's pools, events refreshing tables)."""
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    before = _metric(client, 'lakewarden_service_cpu_seconds_total{service="table-evaluator"}')
    worker = threading.Thread(target=lambda: _burn(ctx.evaluator, 0.2))
    worker.start()
    worker.join()
    assert _metric(client, 'lakewarden_service_cpu_seconds_total{service="table-evaluator"}') >= before + 0.15
    # a pass on the loop's own thread
    history = ctx.history
    history.interval_seconds = 0.05
    passes = history.cpu_seconds
    history.start()
    try:
        deadline = time.monotonic() + 30
        while history.cpu_seconds == passes and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        history.stop()
    assert history.cpu_seconds > passes
    assert _metric(client, 'lakewarden_service_cpu_seconds_total{service="history-pruner"}') == history.cpu_seconds


def _burn(service: Any, seconds: float) -> None:
    with service.charged():
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass
