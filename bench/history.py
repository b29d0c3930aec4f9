"""A week of history, with and without retention: the system database's size and the API's latency as it grows.

Two real servers (SQLite system databases) see the same simulated week of bookkeeping, hour by hour: per table,
a commit every `--commit-minutes` (a timeline entry and an event, as the REST catalog writes them), an
expire-snapshots process every hour and a self-optimizing process with two tasks every two hours. The rows are
written straight into each server's database (a week of real commits would take a week). One server prunes
its history every simulated hour as its history pruner would (services/tables/history.py, the default `ams.history`
retention, driven with the simulated clock); the other keeps everything. After each simulated day the bench
measures both databases' size and the median latency of the API pages that read history: the process list,
a table's timeline, the events after a recent id, the overview and the Prometheus metrics.

    .venv/bin/python bench/history.py [--tables 100] [--days 7] [--commit-minutes 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import admin_token, line_charts, running_server, write
from lakewarden.config import HistoryConfig
from lakewarden.domain.states import ProcessStatus
from lakewarden.services.tables.history import HistoryPruner
from lakewarden.store import processes as store
from lakewarden.store.database import Database
from lakewarden.store.models import CommitRow, EventRow, ProcessRow, TaskRow

START = datetime(2026, 11, 1, tzinfo=UTC)
RUNNING = ProcessStatus.RUNNING
CONFIG = (
    "  history: {expire-interval: 1000d}\n"  # the bench drives the pruning with its simulated clock
    "containers: [{name: outside, container-impl: external}]\n"  # no optimizer: nothing else runs
    "resource-groups: [{name: default, container: outside}]\n"
)
PAGES = {
    "processes": "/api/v1/processes?limit=100",
    "timeline": "/api/v1/tables/lake/db/t0/timeline?limit=100",
    "events": "/api/v1/events?after={recent}&limit=100",
    "overview": "/api/v1/overview",
    "metrics": "/metrics",
}


def hour_of_activity(db: Database, hour: int, tables: int, commit_minutes: int) -> None:
    """One simulated hour of every table's bookkeeping, written in bulk."""
    base = START + timedelta(hours=hour)
    commits: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    processes: list[dict[str, Any]] = []
    tasks: list[list[dict[str, Any]]] = []  # per process
    for t in range(tables):
        name = f"t{t}"
        for minute in range(0, 60, commit_minutes):
            at = base + timedelta(minutes=minute)
            location = f"/warehouse/db/{name}/metadata/{hour:05d}-{minute:02d}.metadata.json"
            summary = {"operation": "append", "added-data-files": "1", "added-records": "1000"}
            commits.append(
                {
                    "catalog_name": "lake",
                    "namespace": "db",
                    "table_name": name,
                    "version": hour * 60 + minute,
                    "operation": "append",
                    "snapshot_id": hour * 100_000 + t * 60 + minute,
                    "summary": summary,
                    "metadata_location": location,
                    "committed_at": at,
                }
            )
            payload = {"metadata_location": location, "snapshot_id": hour * 100_000 + t * 60 + minute}
            events.append(
                {
                    "type": "table-committed",
                    "catalog_name": "lake",
                    "namespace": "db",
                    "table_name": name,
                    "payload": payload,
                    "created_at": at,
                }
            )
        runs = [("expire-snapshots", "scheduled", 1)] + ([("optimizing", "minor", 2)] if hour % 2 == 0 else [])
        for action, kind, task_count in runs:
            processes.append(
                {
                    "table_id": t + 1,
                    "catalog_name": "lake",
                    "db_name": "db",
                    "table_name": name,
                    "group_name": "default",
                    "action": action,
                    "type": kind,
                    "status": "running",  # ended below as the process engine ends processes
                    "target_snapshot_id": hour,
                    "plan_time": base + timedelta(minutes=30),
                    "summary": {"duration_ms": 60_000, "files_in": 8, "files_out": 1, "bytes_in": 8 << 20},
                }
            )
            tasks.append(
                [
                    {
                        "task_id": task,
                        "status": "success",
                        "type": kind,
                        "attempt": 1,
                        "retry_count": 0,
                        "partitions": [],
                        "input": {"files": [f"/warehouse/db/{name}/data/{hour}-{task}.parquet"]},
                        "output": {"files_out": 1},
                        "cost_bytes": 8 << 20,
                        "stage": 0,
                    }
                    for task in range(1, task_count + 1)
                ]
            )
    with db.write() as session:
        session.execute(insert(CommitRow), commits)
        session.execute(insert(EventRow), events)
        ids = session.scalars(
            insert(ProcessRow).returning(ProcessRow.process_id, sort_by_parameter_order=True), processes
        ).all()
        session.execute(
            insert(TaskRow), [{**t, "process_id": pid} for pid, ts in zip(ids, tasks, strict=True) for t in ts]
        )
        for pid in ids:  # each counted in its running totals as it ends
            store.transition_process(
                session, pid, RUNNING, ProcessStatus.SUCCESS, end_time=base + timedelta(minutes=31)
            )


def database_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("lakewarden.db*"))


def latencies(root: str, token: str, recent: int, calls: int) -> dict[str, float]:
    with httpx.Client(base_url=root, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        measured = {}
        for page, path in PAGES.items():
            url = path.format(recent=recent)
            http.get(url).raise_for_status()  # warm
            times = []
            for _ in range(calls):
                started = time.perf_counter()
                http.get(url).raise_for_status()
                times.append(time.perf_counter() - started)
            measured[page] = statistics.median(times) * 1000
        return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--commit-minutes", type=int, default=1)
    parser.add_argument("--calls", type=int, default=15, help="calls per page and day (the median is reported)")
    args = parser.parse_args()
    history = HistoryConfig()
    print(
        f"{args.tables} tables, a commit every {args.commit_minutes} min each, {args.days} simulated days; retention: "
        f"processes {history.processes.keep_time.days}d/{history.processes.keep_count} per table and action, "
        f"timeline {history.timeline.keep_time.days}d/{history.timeline.keep_count} per table, "
        f"events {history.events.keep_time.days}d/{history.events.keep_count}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as kept_tmp,
        tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as pruned_tmp,
        running_server(kept_tmp, CONFIG) as kept_root,
        running_server(pruned_tmp, CONFIG) as pruned_root,
    ):
        run(args, history, {"kept": (kept_tmp, kept_root), "pruned": (pruned_tmp, pruned_root)})


def create_table(root: str, token: str) -> None:
    """The table whose timeline is read (the timeline page answers for existing tables only)."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = RestCatalog("lake", uri=f"{root}/iceberg", warehouse="lake", token=token)
    catalog.create_namespace("db")
    catalog.create_table("db.t0", Schema(NestedField(1, "id", LongType(), required=False)))


def run(args: argparse.Namespace, history: HistoryConfig, servers: dict[str, tuple[str, str]]) -> None:
    for tmp, root in servers.values():
        create_table(root, admin_token(tmp))
    dbs = {name: Database(f"sqlite:///{Path(tmp) / 'data' / 'lakewarden.db'}") for name, (tmp, _) in servers.items()}
    keeper = HistoryPruner(dbs["pruned"], history, Path(servers["pruned"][0]) / "data" / "optimizers")
    days: list[dict[str, Any]] = []
    prune_seconds: list[float] = []
    per_day = args.tables * (60 // args.commit_minutes) * 24
    for day in range(1, args.days + 1):
        for hour in range((day - 1) * 24, day * 24):
            for db in dbs.values():
                hour_of_activity(db, hour, args.tables, args.commit_minutes)
            started = time.perf_counter()
            keeper.prune(START + timedelta(hours=hour + 1))
            prune_seconds.append(time.perf_counter() - started)
        row: dict[str, Any] = {"day": day, "commits": per_day * day}
        for name, (tmp, root) in servers.items():
            row[f"{name}_mb"] = database_bytes(Path(tmp) / "data") / 1e6
            recent = max(1, per_day * day - 50)
            row[f"{name}_ms"] = latencies(root, admin_token(tmp), recent, args.calls)
        days.append(row)
        print(
            f"day {day}: {row['commits']:,} commits; database kept {row['kept_mb']:.1f} MB, pruned "
            f"{row['pruned_mb']:.1f} MB; "
            + ", ".join(f"{page} {row['kept_ms'][page]:.1f}/{row['pruned_ms'][page]:.1f} ms" for page in PAGES)
            + " (kept/pruned)"
        )
    last, first = days[-1], days[0]
    result = {
        "tables": args.tables,
        "days": days,
        "prune_seconds_per_hour": {"p50": statistics.median(prune_seconds), "max": max(prune_seconds)},
        "pruned_rows": keeper.pruned,
        "size_growth_last_day": {
            name: last[f"{name}_mb"] / days[-2][f"{name}_mb"] if len(days) > 1 else 1.0 for name in servers
        },
        "size_ratio_kept_to_pruned": last["kept_mb"] / last["pruned_mb"],
        "latency_growth_first_to_last_day": {
            name: {page: last[f"{name}_ms"][page] / first[f"{name}_ms"][page] for page in PAGES} for name in servers
        },
    }
    print(
        f"after {args.days} days: kept {last['kept_mb']:.1f} MB vs pruned {last['pruned_mb']:.1f} MB "
        f"({result['size_ratio_kept_to_pruned']:.1f}x); last day's growth: kept "
        f"{result['size_growth_last_day']['kept']:.2f}x, pruned {result['size_growth_last_day']['pruned']:.2f}x; "
        f"pruning took p50 {result['prune_seconds_per_hour']['p50'] * 1000:.0f} ms per simulated hour"
    )
    write("history", result)
    plot(days)


def plot(days: list[dict[str, Any]]) -> None:
    sizes = {f"history {name}": [d[f"{name}_mb"] for d in days] for name in ("kept", "pruned")}
    pages = {f"{page} ({name})": [d[f"{name}_ms"][page] for d in days] for name in ("kept", "pruned") for page in PAGES}
    line_charts(
        "history",
        "simulated day",
        [d["day"] for d in days],
        [("System database size", "MB", sizes, False), ("API latency (median)", "ms", pages, True)],
    )


if __name__ == "__main__":
    main()
