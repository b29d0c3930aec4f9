"""Optimizing that pays for itself: one stream of writes and skewed reads under four policies, side by side.

For each policy, a fresh `lakewarden server` (SQLite, its REST catalog `bench`, the `local` container) holds
`--tables` tables. One writer commits to every table in turn through the REST catalog (pyiceberg): appends of
`--rows` rows, and every `--upsert-every`th commit of the first `--upserting` tables an upsert of rows already
there. A reader queries with the skew reads have: the first `--hot` tables every `--hot-every` seconds, the next
`--warm` every `--warm-every` seconds, the rest never; each query is a whole-table read planned on the server
(pyiceberg's `scan-planning-mode: server`, so the catalog sees every scan) and timed. The stream (which table
when, which rows) is the same for every policy: it is drawn from `--seed`.

Policies:
- `budgeted`: lakewarden with a group budget (`optimizing.budget.cpu-seconds-per-hour: --budget`, counted over
  `optimizing.budget.window: --budget-window`), one warm optimizer;
- `amoro`: lakewarden with Amoro's triggers (today's default), one warm optimizer;
- `scheduled`: self-optimizing off; a warm Spark session (local[2]) runs Iceberg's `rewrite_data_files` on every
  table every `--schedule-every` seconds, as a cron job would;
- `none`: nothing is compacted.

Before the stream, the JVM that compacts (the optimizer's, or the scheduled job's session) is warmed alike for
every policy: `--warm-up` rounds of six small commits to a table of its own (the fourth an upsert, as in the
stream's), each round compacted (by the service for lakewarden, with the budget not yet set; by
`rewrite_data_files` for the scheduled job); then the table is dropped, the budget set through the API and, for the
budgeted policy, one budget window waited so that the warm-up is no spend of the stream's. A long-running optimizer
is past its JIT's warm-up; without this a run's first processes would pay for it.

Compaction CPU-seconds: of the optimizer's processes (its Python and its Spark JVM) for lakewarden's policies, of
the Spark JVM for the scheduled job, sampled every second. Query-seconds saved per compaction CPU-second:
(the `none` run's total query seconds - the policy's) / its compaction CPU-seconds. Hot tables' p95: over the
hot tables' queries of the run's second half, against the same query on an ideally compacted copy of each hot
table (`db.ideal<t>`: the table's rows as of its last commit, in one file and one snapshot, made anew after each
commit to it), run back to back with each of those queries, the two going first in turn (the first after the
reader's pause is the slower whatever the table), so both are measured under the same load (compaction
shares the machine's two cores with the queries); the copies' p95 with nothing else running is reported beside
it.

Goals: budgeted saves >= 2x the query-seconds per CPU-second of the scheduled job and >= 1.5x of Amoro's
triggers, with the hot tables' p95 <= 1.2x the ideal copy's.

    .venv/bin/python bench/budgeted_optimizing.py [--minutes 8] [--tables 20] [--policies budgeted,amoro,...]

A policy `budgeted:<cpu-seconds an hour>` runs the budgeted policy at that budget instead of --budget; several
budgets in one run show what a budget buys against what it costs.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (
    TreeCpu,
    admin_token,
    bar_chart,
    cpu_seconds,
    percentile,
    running_server,
    server_pid,
    write,
)
from lakewarden.domain.durations import parse_duration

POLICIES = ("budgeted", "amoro", "scheduled", "none")


@dataclass(frozen=True)
class Event:
    at: float  # seconds from the start
    table: int
    kind: str  # append, upsert, read


def stream(args: argparse.Namespace) -> list[Event]:
    """The writes and reads of one run, in time order: the same for every policy."""
    rng = random.Random(args.seed)
    seconds = args.minutes * 60
    events = []
    commits = [0] * args.tables
    at = 0.0
    while at < seconds:  # the writer visits the tables in turn, a commit every --write-every seconds
        table = int(at / args.write_every) % args.tables
        commits[table] += 1
        upsert = table < args.upserting and commits[table] % args.upsert_every == 0
        events.append(Event(at, table, "upsert" if upsert else "append"))
        at += args.write_every
    for table in range(args.hot + args.warm):
        every = args.hot_every if table < args.hot else args.warm_every
        at = rng.uniform(0, every)
        while at < seconds:
            events.append(Event(at, table, "read"))
            at += every
    return sorted(events, key=lambda e: (e.at, e.kind != "read"))


@dataclass
class Reads:
    times: list[tuple[float, int, float]] = field(default_factory=list)  # (at, table, seconds)
    ideal: list[float] = field(default_factory=list)  # the ideal copies' queries, beside the hot ones
    lock: threading.Lock = field(default_factory=threading.Lock)
    # per hot table: held while its ideal copy is queried or made anew
    copying: dict[int, threading.Lock] = field(default_factory=dict)


def rows(table: int, start: int, count: int, tag: str) -> Any:
    import pyarrow as pa

    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table({"id": ids, "v": pa.array([f"{table}-{tag}-{i:08d}-{'x' * 60}" for i in range(count)])})


def table_schema() -> Any:
    """The schema of the stream's tables and of the warm-up table."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))


def make_tables(catalog: Any, args: argparse.Namespace, optimizing: dict[str, str]) -> list[str]:
    schema = table_schema()
    catalog.create_namespace("db")
    names = []
    for t in range(args.tables):
        table = catalog.create_table(f"db.t{t}", schema, properties=optimizing)
        table.append(rows(t, 0, args.rows, "seed"))
        names.append(f"db.t{t}")
    return names


WARM_UP = "db.warm_up"


def warm_up(catalog: Any, args: argparse.Namespace, compact: Any) -> None:
    """`--warm-up` rounds of six commits to a table of its own, each round ended by `compact(table, round)`."""
    schema = table_schema()
    properties = {
        "self-optimizing.enabled": "true",
        "self-optimizing.minor.trigger.file-count": "3",
        "self-optimizing.min-plan-interval": "0",
    }
    table = catalog.create_table(WARM_UP, schema, properties=properties)
    written = 0
    began = time.monotonic()
    for r in range(args.warm_up):
        for c in range(6):
            if c == 3 and written:
                table.upsert(rows(-1, written - args.rows, args.rows, f"w{r}"), join_cols=["id"])
            else:
                table.append(rows(-1, written, args.rows, f"w{r}"))
                written += args.rows
        compact(table, r)
    catalog.drop_table(WARM_UP)
    print(f"warmed up: {args.warm_up} rounds in {time.monotonic() - began:.0f} s", flush=True)


def compacted_by_service(api: httpx.Client) -> Any:
    """Waits until the service has compacted the warm-up table of its round's commits."""

    def compact(table: Any, round_: int) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            response = api.get(
                "/processes", params={"table": f"bench.{WARM_UP}", "action": "optimizing", "limit": 1000}
            )
            processes = response.json() if response.status_code != 404 else []  # 404: the table not known yet
            if len(processes) > round_ and all(p["status"] != "running" for p in processes):
                return
            time.sleep(0.1)
        raise SystemExit(f"warm-up: round {round_} was not compacted within 300 s")

    return compact


def compacted_by_procedure(spark: Any) -> Any:
    """Compacts the warm-up table as the scheduled job compacts the stream's."""

    def compact(_table: Any, _round: int) -> None:
        spark.sql(f"CALL bench.system.rewrite_data_files(table => '{WARM_UP}')").collect()

    return compact


def write_and_read(root: str, token: str, args: argparse.Namespace, events: list[Event], reads: Reads) -> None:
    """Plays the stream: commits on this thread, reads on a thread of their own, both on the stream's clock."""
    from pyiceberg.catalog.rest import RestCatalog

    writer = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
    began = time.monotonic()
    written = [args.rows] * args.tables

    def read_all() -> None:
        reader = RestCatalog(
            "bench", uri=f"{root}/iceberg", warehouse="bench", token=token, **{"scan-planning-mode": "server"}
        )

        def query(name: str) -> float:
            started = time.perf_counter()
            reader.load_table(name).scan().to_arrow()
            return time.perf_counter() - started

        pairs = 0
        for e in (e for e in events if e.kind == "read"):
            wait = began + e.at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            ideal = None
            if e.table < args.hot and e.at >= args.minutes * 30:  # the same query on the ideal copy beside it
                # the first query after the reader's idle pause is the slower of two back-to-back ones whatever
                # the table, so the two go first in turn
                pairs += 1
                with reads.copying[e.table]:
                    if pairs % 2:
                        took, ideal = query(f"db.t{e.table}"), query(f"db.ideal{e.table}")
                    else:
                        ideal = query(f"db.ideal{e.table}")
                        took = query(f"db.t{e.table}")
            else:
                took = query(f"db.t{e.table}")
            with reads.lock:
                reads.times.append((e.at, e.table, took))
                if ideal is not None:
                    reads.ideal.append(ideal)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    for e in (e for e in events if e.kind != "read"):
        wait = began + e.at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        table = writer.load_table(f"db.t{e.table}")
        if e.kind == "upsert":
            table.upsert(rows(e.table, written[e.table] - args.rows, args.rows, f"u{e.at:.0f}"), join_cols=["id"])
        else:
            table.append(rows(e.table, written[e.table], args.rows, f"a{e.at:.0f}"))
            written[e.table] += args.rows
        if e.table < args.hot and e.at >= args.minutes * 30 - args.write_every * args.tables:
            copy_ideally(writer, e.table, table.scan().to_arrow(), reads.copying[e.table])
    reader.join()


def make_ideal_copies(catalog: Any, args: argparse.Namespace, reads: Reads) -> None:
    """Each hot table ideally compacted (`db.ideal<t>`): made with the table's first rows, and anew after each of its
    commits from shortly before the half-way point on (`copy_ideally`)."""
    for t in range(args.hot):
        reads.copying[t] = threading.Lock()
        copy_ideally(catalog, t, rows(t, 0, args.rows, "seed"), reads.copying[t])


def copy_ideally(catalog: Any, table: int, data: Any, lock: threading.Lock) -> None:
    """`data` as the ideal copy of hot table `table`: one file in a table of one snapshot, self-optimizing off.
    The catalog's client plans its own scans, so the copy's making is no read the server counts."""
    name = f"db.ideal{table}"
    with lock:
        if catalog.table_exists(name):
            catalog.drop_table(name)
        copy = catalog.create_table(name, data.schema, properties={"self-optimizing.enabled": "false"})
        copy.append(data)


def idle_ideal_p95(root: str, token: str, args: argparse.Namespace) -> float:
    """The ideal copies' query once the run is over, with nothing else running (for reference)."""
    from pyiceberg.catalog.rest import RestCatalog

    reader = RestCatalog(
        "bench", uri=f"{root}/iceberg", warehouse="bench", token=token, **{"scan-planning-mode": "server"}
    )
    times = []
    for t in range(args.hot):
        for _ in range(20):
            started = time.perf_counter()
            reader.load_table(f"db.ideal{t}").scan().to_arrow()
            times.append(time.perf_counter() - started)
    return percentile(times, 95)


def hot_reads(api: httpx.Client, catalog: Any, table: int) -> dict[str, Any]:
    reads = api.get(f"/tables/bench/db/t{table}").json().get("reads") or {}
    return {
        "files_per_scan": reads.get("files_per_scan"),
        "planning_ms": reads.get("planning_ms"),
        "snapshots": len(catalog.load_table(f"db.t{table}").metadata.snapshots),
    }


def spark_for(root: str, token: str, api: httpx.Client) -> Any:
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import build_spark_session

    properties = {**api.get("/catalogs/bench").json()["properties"], "token": token}
    spec = CatalogSpec("bench", "internal", properties)
    return build_spark_session([spec], master="local[2]", driver_memory="2g", app_name="bench-scheduled-rewrite")


def jvm_pids() -> list[int]:
    """The Spark JVMs this process started."""
    import os

    from bench.common import descendants

    out = []
    for pid in descendants(os.getpid()):
        try:
            if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def run(policy: str, args: argparse.Namespace, events: list[Event]) -> dict[str, Any]:
    from pyiceberg.catalog.rest import RestCatalog

    budgeted = policy.startswith("budgeted")
    lakewarden_optimizes = budgeted or policy == "amoro"
    group = {"instances": "1" if lakewarden_optimizes else "0", "memory": "1g"}
    budget = {}  # set after the warm-up
    if budgeted:  # `budgeted` at --budget, or `budgeted:<cpu-seconds an hour>`
        budget["optimizing.budget.cpu-seconds-per-hour"] = policy.partition(":")[2] or str(args.budget)
        budget["optimizing.budget.window"] = args.budget_window
    properties = ", ".join(f"'{k}': '{v}'" for k, v in group.items())
    settings = (
        "  evaluator: {interval: 1s}\n"
        "catalogs: [{name: bench, type: internal}]\n"
        f"resource-groups: [{{name: default, container: local, properties: {{{properties}}}}}]\n"
    )
    optimizing = {"self-optimizing.enabled": "true" if lakewarden_optimizes else "false"}
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as root:
        token = admin_token(tmp)
        api = httpx.Client(base_url=f"{root}/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"})
        catalog = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
        make_tables(catalog, args, optimizing)
        reads = Reads()
        make_ideal_copies(catalog, args, reads)
        spark = None
        meter: TreeCpu | None = None
        if lakewarden_optimizes:
            deadline = time.monotonic() + 300
            while not api.get("/resource-groups/default/optimizers").json() and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(10)  # its Spark session up and polling
            warm_up(catalog, args, compacted_by_service(api))
            if budget:
                api.put("/resource-groups/default", json={"properties": {**group, **budget}}).raise_for_status()
                time.sleep(parse_duration(args.budget_window).total_seconds())
            meter = TreeCpu(server_pid(tmp))
        elif policy == "scheduled":
            spark = spark_for(root, token, api)
            warm_up(catalog, args, compacted_by_procedure(spark))
        stop = threading.Event()
        spent = {"jvm": 0.0}

        def meter_loop() -> None:
            from bench.common import tree_cpu

            first = None
            while not stop.is_set():
                if meter is not None:
                    meter.sample()
                elif spark is not None:
                    now = tree_cpu(jvm_pids())
                    first = now if first is None else first
                    spent["jvm"] = now - first
                stop.wait(1.0)

        def schedule_loop() -> None:
            assert spark is not None
            while not stop.wait(args.schedule_every):
                for t in range(args.tables):
                    if stop.is_set():
                        return
                    spark.sql(f"CALL bench.system.rewrite_data_files(table => 'db.t{t}')").collect()

        threads = [threading.Thread(target=meter_loop, daemon=True)]
        if spark is not None:
            threads.append(threading.Thread(target=schedule_loop, daemon=True))
        for thread in threads:
            thread.start()
        server = server_pid(tmp)
        began, server_began = time.monotonic(), cpu_seconds(server)
        write_and_read(root, token, args, events, reads)
        took, server_spent = time.monotonic() - began, cpu_seconds(server) - server_began
        stop.set()
        for thread in threads:
            thread.join(600)
        cpu = meter.spent if meter is not None else spent["jvm"]
        idle_ideal = idle_ideal_p95(root, token, args)
        processes = [  # the stream's, not the warm-up's
            p
            for p in api.get("/processes", params={"action": "optimizing", "limit": 10000}).json()
            if re.search(r"\.t[0-9]+$", p["table"])
        ]
        half = args.minutes * 30
        hot_late = [s for at, t, s in reads.times if t < args.hot and at >= half]
        result = {
            "seconds": round(took, 1),
            "queries": len(reads.times),
            "query_seconds": round(sum(s for _, _, s in reads.times), 2),
            "hot_query_seconds": round(sum(s for _, t, s in reads.times if t < args.hot), 2),
            "hot_p50_seconds": round(percentile(hot_late, 50), 4) if hot_late else None,
            "hot_p95_seconds": round(percentile(hot_late, 95), 4) if hot_late else None,
            "ideal_hot_p50_seconds": round(percentile(reads.ideal, 50), 4) if reads.ideal else None,
            "ideal_hot_p95_seconds": round(percentile(reads.ideal, 95), 4) if reads.ideal else None,
            "idle_ideal_hot_p95_seconds": round(idle_ideal, 4),
            "compaction_cpu_seconds": round(cpu, 1),
            # the server's own (catalog, planning every scan, evaluating, scheduling), optimizers not included
            "server_cpu_seconds": round(server_spent, 1),
            "lakewarden_processes": len(processes),
            "lakewarden_spark_cpu_seconds": round(sum(p["usage"].get("cpu_ms", 0) for p in processes) / 1000, 1),
            # what the server counted against the budget: each task's whole CPU (optimizer/cpu.py)
            "lakewarden_whole_cpu_seconds": round(sum(p["usage"].get("whole_cpu_ms", 0) for p in processes) / 1000, 1),
            # the second half's hot queries and their ideal copies' beside them, in order: percentiles recomputable
            "hot_late_query_seconds": [round(s, 5) for s in hot_late],
            "ideal_query_seconds": [round(s, 5) for s in reads.ideal],
            # what the server's scan reports say of the hot tables' reads, and how many snapshots they ended with
            "hot_reads": [hot_reads(api, catalog, t) for t in range(args.hot)],
            "processes_per_table": {
                t: sum(1 for p in processes if p["table"].endswith(f".t{t}")) for t in range(args.tables)
            },
        }
        if spark is not None:
            spark.stop()
        shown = {k: v for k, v in result.items() if not isinstance(v, list)}
        print(f"{policy}: {shown}", flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=8.0, help="how long the stream runs per policy")
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--rows", type=int, default=200, help="rows per commit")
    parser.add_argument("--write-every", type=float, default=1.0, help="seconds between the writer's commits")
    parser.add_argument("--upserting", type=int, default=5, help="tables whose commits are partly upserts")
    parser.add_argument("--upsert-every", type=int, default=4)
    parser.add_argument("--hot", type=int, default=3)
    parser.add_argument("--hot-every", type=float, default=3.0)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--warm-every", type=float, default=60.0, help="the hourly tables, on the bench's clock")
    parser.add_argument("--budget", type=float, default=30.0, help="budgeted: CPU-seconds an hour")
    parser.add_argument(
        "--budget-window",
        default="1min",
        help="budgeted: how far back the spend is counted (a minute stands for the hour, as the warm tables' reads)",
    )
    parser.add_argument("--schedule-every", type=float, default=120.0, help="scheduled: seconds between runs")
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument(
        "--warm-up", type=int, default=40, help="rounds of commits that warm the compacting JVM before the stream"
    )
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    events = stream(args)
    results = {policy: run(policy, args, events) for policy in args.policies.split(",")}
    out: dict[str, Any] = {"options": vars(args), "policies": results}
    if "none" in results:
        baseline = results["none"]["query_seconds"]
        for r in results.values():
            cpu = r["compaction_cpu_seconds"]
            r["query_seconds_saved"] = round(baseline - r["query_seconds"], 2)
            r["saved_per_cpu_second"] = round((baseline - r["query_seconds"]) / cpu, 4) if cpu > 0 else None
        out["goals"] = {"vs_scheduled_min": 2.0, "vs_amoro_min": 1.5, "hot_p95_vs_ideal_max": 1.2}
        out["budgeted"] = {}
        for name in (p for p in results if p.startswith("budgeted")):
            if not {"amoro", "scheduled"} <= set(results):
                break
            mine = results[name]["saved_per_cpu_second"] or 0.0
            vs_scheduled = mine / max(results["scheduled"]["saved_per_cpu_second"] or 1e-9, 1e-9)
            vs_amoro = mine / max(results["amoro"]["saved_per_cpu_second"] or 1e-9, 1e-9)
            hot = results[name]
            p95_ratio = (hot["hot_p95_seconds"] or 0.0) / max(hot["ideal_hot_p95_seconds"] or 0.0, 1e-9)
            out["budgeted"][name] = {
                "vs_scheduled": round(vs_scheduled, 2),
                "vs_amoro": round(vs_amoro, 2),
                "hot_p95_vs_ideal": round(p95_ratio, 2),
                "goals_met": vs_scheduled >= 2.0 and vs_amoro >= 1.5 and p95_ratio <= 1.2,
            }
            print(
                f"{name} saves {vs_scheduled:.2f}x the query-seconds per CPU-second of the scheduled job (goal >= 2)"
                f", {vs_amoro:.2f}x Amoro's triggers' (goal >= 1.5); hot p95 {p95_ratio:.2f}x ideal (goal <= 1.2)"
            )
    write("budgeted_optimizing", out)
    bar_chart(
        "budgeted_optimizing",
        "Query-seconds saved per compaction CPU-second (vs no compaction)",
        {p: r.get("saved_per_cpu_second") or 0.0 for p, r in results.items() if p != "none"},
        "query-s per CPU-s",
    )
    bar_chart(
        "budgeted_optimizing_queries",
        f"Total query seconds over {args.minutes:g} minutes of stream",
        {p: r["query_seconds"] for p, r in results.items()},
        "seconds",
    )


if __name__ == "__main__":
    main()
