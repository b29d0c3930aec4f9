"""Optimizers that follow demand: a burst of tables turning pending at once, with dynamic allocation against
fixed groups.

For each group setup, a fresh `lakewarden server` (SQLite, its REST catalog `bench`, the `local` container)
holds `--tables` small tables, each written by pyiceberg as `--files` appends of `--rows` rows with
self-optimizing off. The
fixed groups' optimizers are started first and warm; the dynamic group starts with none. Then every table's
self-optimizing is turned on within moments (the burst) and the clock runs until every table has been
compacted. After that, for `--idle-minutes`, the optimizers' processes (the Python optimizer and its Spark JVM,
found under the server's process) are sampled every second for the CPU-seconds they spend with nothing to do.

Setups: `fixed-1` (`instances: 1`), `fixed-4` (`instances: 4`) and `dynamic` (0 to 4 optimizers of one
thread: `dynamic-allocation.max-parallelism: 4`, with the timeouts a bursty group would set:
`scheduler-backlog-timeout` and `sustained-backlog-timeout` 5s, `executor-idle-timeout` 30s (Amoro's least),
`scale-down-cooldown` 5s). Goals: dynamic's time to compact everything <= 1.2x fixed-4's, and its idle
CPU-seconds within 10% of the way from zero optimizers (0 CPU-seconds) to fixed-4 (<= 0.1x fixed-4's).

    .venv/bin/python bench/dynamic_allocation.py [--tables 50] [--files 6] [--rows 200] [--idle-minutes 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import TreeCpu, admin_token, bar_chart, running_server, server_pid, write

SETUPS: dict[str, dict[str, str]] = {
    "fixed-1": {"instances": "1"},
    "fixed-4": {"instances": "4"},
    "dynamic": {
        "dynamic-allocation.enabled": "true",
        "dynamic-allocation.max-parallelism": "4",
        "dynamic-allocation.scheduler-backlog-timeout": "5s",
        "dynamic-allocation.sustained-backlog-timeout": "5s",
        "dynamic-allocation.executor-idle-timeout": "30s",
        "dynamic-allocation.scale-down-cooldown": "5s",
    },
}
OPTIMIZING = {
    "self-optimizing.enabled": "false",
    "self-optimizing.minor.trigger.file-count": "4",
    "self-optimizing.min-plan-interval": "0",
}


def make_tables(catalog: Any, count: int, files: int, rows: int) -> list[str]:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
    catalog.create_namespace("burst")
    names = []
    for t in range(count):
        table = catalog.create_table(f"burst.t{t}", schema, properties=OPTIMIZING)
        for f in range(files):
            ids = pa.array(range(f * rows, (f + 1) * rows), pa.int64())
            values = pa.array([f"{t}-{f}-{i:08d}-{'x' * 40}" for i in range(rows)])
            table.append(pa.table({"id": ids, "v": values}))
        names.append(f"burst.t{t}")
    return names


def optimizers(api: httpx.Client) -> int:
    return len(api.get("/resource-groups/default/optimizers").json())


def compacted(api: httpx.Client, count: int) -> int:
    done = api.get("/processes", params={"action": "optimizing", "status": "success", "limit": 1000}).json()
    return len({p["table"] for p in done})


def run(setup: str, args: argparse.Namespace) -> dict[str, Any]:
    from pyiceberg.catalog.rest import RestCatalog

    properties = ", ".join(f"'{k}': '{v}'" for k, v in {**SETUPS[setup], "memory": "1g"}.items())
    settings = (
        "  evaluator: {interval: 1s}\n"
        "catalogs: [{name: bench, type: internal}]\n"
        f"resource-groups: [{{name: default, container: local, properties: {{{properties}}}}}]\n"
    )
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as root:
        token = admin_token(tmp)
        api = httpx.Client(base_url=f"{root}/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"})
        catalog = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
        names = make_tables(catalog, args.tables, args.files, args.rows)
        fixed = int(SETUPS[setup].get("instances", "0"))
        deadline = time.monotonic() + 300
        while optimizers(api) < fixed and time.monotonic() < deadline:  # the fixed groups are warm
            time.sleep(1)
        time.sleep(10 if fixed else 0)  # their Spark sessions up and polling
        meter = TreeCpu(server_pid(tmp))
        meter.sample()
        began = time.monotonic()
        for name in names:  # the burst: every table's self-optimizing on at once
            with catalog.load_table(name).transaction() as tx:
                tx.set_properties({"self-optimizing.enabled": "true"})
        most = 0
        timeline: list[tuple[float, int, int]] = []
        deadline = began + args.timeout
        while (done := compacted(api, args.tables)) < args.tables and time.monotonic() < deadline:
            meter.sample()
            running = optimizers(api)
            most = max(most, running)
            timeline.append((round(time.monotonic() - began, 1), running, done))
            time.sleep(1)
        burst_s = time.monotonic() - began
        busy_cpu = meter.spent
        print(f"{setup}: {done}/{args.tables} tables compacted in {burst_s:.1f}s, up to {most} optimizers", flush=True)

        idle = TreeCpu(server_pid(tmp))
        idle.sample()
        until = time.monotonic() + args.idle_minutes * 60
        left: list[tuple[float, int]] = []
        while time.monotonic() < until:
            time.sleep(1)
            idle.sample()
            left.append((round(time.monotonic() - began, 1), optimizers(api)))
        print(f"{setup}: idle for {args.idle_minutes} min: {idle.spent:.1f} CPU-s, {left[-1][1]} optimizers left")
        return {
            "setup": SETUPS[setup],
            "tables_compacted": done,
            "burst_seconds": round(burst_s, 1),
            "burst_optimizer_cpu_seconds": round(busy_cpu, 1),
            "most_optimizers": most,
            "idle_cpu_seconds": round(idle.spent, 1),
            "optimizers_after_idle": left[-1][1] if left else None,
            "timeline": timeline,
            "idle_timeline": left[:: max(1, len(left) // 120)],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--files", type=int, default=6, help="appends per table")
    parser.add_argument("--rows", type=int, default=200, help="rows per append")
    parser.add_argument("--idle-minutes", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds the burst may take")
    parser.add_argument("--setups", default=",".join(SETUPS))
    args = parser.parse_args()
    results = {setup: run(setup, args) for setup in args.setups.split(",")}
    out: dict[str, Any] = {"options": vars(args), "setups": results}
    if {"fixed-4", "dynamic"} <= set(results):
        time_ratio = results["dynamic"]["burst_seconds"] / max(results["fixed-4"]["burst_seconds"], 0.1)
        idle_share = results["dynamic"]["idle_cpu_seconds"] / max(results["fixed-4"]["idle_cpu_seconds"], 0.1)
        complete = all(r["tables_compacted"] == args.tables for r in results.values())
        out["dynamic_time_vs_fixed_4"] = round(time_ratio, 2)
        out["dynamic_idle_cpu_vs_fixed_4"] = round(idle_share, 3)
        out["goals"] = {"time_ratio_max": 1.2, "idle_share_max": 0.1}
        out["goals_met"] = complete and time_ratio <= 1.2 and idle_share <= 0.1
        print(
            f"dynamic vs fixed-4: time {time_ratio:.2f}x (goal <= 1.2x), idle CPU {idle_share:.3f}x (goal <= 0.1x); "
            f"fixed-1 took {results.get('fixed-1', {}).get('burst_seconds')}s"
        )
    write("dynamic_allocation", out)
    bar_chart(
        "dynamic_allocation",
        f"{args.tables} tables pending at once: seconds to compact them all",
        {s: r["burst_seconds"] for s, r in results.items()},
        "seconds",
    )
    bar_chart(
        "dynamic_allocation_idle",
        f"Optimizer CPU-seconds over the {args.idle_minutes:g} idle minutes after the burst",
        {s: r["idle_cpu_seconds"] for s, r in results.items()},
        "CPU-seconds",
    )


if __name__ == "__main__":
    main()
