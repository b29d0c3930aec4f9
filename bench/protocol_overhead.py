"""The optimizer protocol's cost per task outside Spark: poll -> ack -> complete against a real server.

A real `lakewarden server` process (uvicorn, SQLite system database) holds a running process with
N planned tasks (written through the store, as the planner would); one client plays an optimizer
thread and drains them over HTTP. Goal: <= 20 ms per task.

    .venv/bin/python bench/protocol_overhead.py [--tasks 300]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, summary, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import ProcessPlan, TaskSpec
from lakewarden.domain.tables import TableIdentifier
from lakewarden.protocol.inputs import OptimizingInput, PartitionRef
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    # this client plays the optimizer: the server starts none
    settings = "catalogs: []\nresource-groups: [{name: default, container: local}]\n"
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as root:
        url = f"{root}/api/v1"
        db = Database(f"sqlite:///{tmp}/data/lakewarden.db")
        with db.write() as session:
            catalog_store.create_catalog(
                session, CatalogSpec("c", "sql", {"uri": "sqlite:////x.db", "warehouse": "/w"})
            )
            rec = table_store.add_table(session, TableIdentifier("c", "db", "t"), "default", {})
            tasks = []
            for i in range(args.tasks):
                partition = PartitionRef(spec_id=0, path=f"p={i}", values=[i])
                work = OptimizingInput(
                    table="db.t", snapshot_id=1, type="minor", partitions=[partition], filter='"true"'
                )
                tasks.append(TaskSpec("minor", work, [partition.model_dump()], 1))
            store.create_process(session, rec, "default", "optimizing", ProcessPlan("minor", 1, tasks))
        db.dispose()

        http = httpx.Client(base_url=f"{url}/optimizer")
        admin = {"Authorization": f"Bearer {admin_token(tmp)}"}
        token = http.post("/register", json={"group": "default", "parallelism": 1}, headers=admin).json()["token"]
        http.headers["Authorization"] = f"Bearer {token}"  # the optimizer's own token from here on
        per_task: list[float] = []
        phases: dict[str, list[float]] = {"poll": [], "ack": [], "complete": []}
        for _ in range(args.tasks):
            t0 = time.perf_counter()
            task = http.post("/poll", json={"token": token, "thread_id": 0, "timeout_seconds": 0}).json()
            t1 = time.perf_counter()
            ref = {
                "token": token,
                "process_id": task["process_id"],
                "task_id": task["task_id"],
                "attempt": task["attempt"],
            }
            assert http.post("/ack", json=ref).status_code == 204
            t2 = time.perf_counter()
            done = http.post(
                "/complete", json={**ref, "output": {"action": "optimizing", "files_in": 1, "files_out": 1}}
            )
            assert done.status_code == 204, done.text
            t3 = time.perf_counter()
            per_task.append((t3 - t0) * 1000)
            for name, (a, b) in {"poll": (t0, t1), "ack": (t1, t2), "complete": (t2, t3)}.items():
                phases[name].append((b - a) * 1000)
        http.close()
    result = summary(per_task)
    print(
        f"poll -> ack -> complete over HTTP, {args.tasks} tasks: p50 {result['p50']:.1f} ms, "
        f"p99 {result['p99']:.1f} ms, mean {result['mean']:.1f} ms (goal <= 20 ms)"
    )
    for name, values in phases.items():
        print(f"  {name:9s} p50 {summary(values)['p50']:.1f} ms")
    write(
        "protocol_overhead",
        {
            "tasks": args.tasks,
            "per_task_ms": result,
            "phases_ms": {k: summary(v) for k, v in phases.items()},
            "goal_ms": 20,
            "met": result["p50"] <= 20,
        },
    )
    bars = {"p50": result["p50"], "p99": result["p99"], **{f"{k} p50": summary(v)["p50"] for k, v in phases.items()}}
    bar_chart(
        "protocol_overhead",
        f"Optimizer protocol per task over HTTP ({args.tasks} tasks)",
        bars,
        "milliseconds",
        goal=20,
    )


if __name__ == "__main__":
    main()
