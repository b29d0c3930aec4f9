"""Small files as streaming writers leave them, compacted by three tools on identical tables, in one run.

A real `lakewarden server` (SQLite, its REST catalog `lake`, one warm local optimizer with local[2] started
by the server's `local` container) serves the tables. For each shape (300 files in 2 partitions, 3,000 files
in 10 partitions, a few KB each, written by pyiceberg through the REST catalog one append per batch, as a
streaming writer commits) one source table is written with self-optimizing off and registered three times
from its metadata, so the copies share the very same files:

- lakewarden: self-optimizing turned on by a commit; timed from pending to committed: from the moment the
  evaluator found the table pending until the catalog recorded the commit of its last process (a process takes
  at most the group's threads x `max-input-file-size-per-thread` of Amoro's cost, so a large shape takes
  several processes, each planned when the last committed); the CPU-seconds of the optimizer's processes
  (Python and its JVM) from turning it on until the evaluator found the table with nothing pending
  (`until_idle_s`); and, wider, from the commit that turned it on until the last process ended
  (`enabled_to_end_s`);
- iceberg-zamboni's local engine (DuckDB and pyiceberg, no Spark), installed by this script into an
  environment of its own and pointed at the same REST catalog: `zamboni compact --yes`, process start included,
  its CPU-seconds from the kernel's accounting of the child;
- Iceberg's own `rewrite_data_files` procedure in a warm local[2] Spark session on the same catalog (warmed by a
  rewrite of another table): the call's wall time, and the CPU-seconds of its JVM until the server found the
  compacted table idle, as lakewarden's optimizer's are counted (and `cpu_call_s`, of the call alone).

Both Spark sides are warmed by the same rewrites first: of a small table, then of copies of each shape itself
(`--shape-warm`, not counted): C2 compiles a method once it has run some thousands of times, so what a rewrite runs
through a few dozen times goes on being compiled for a hundred rewrites and more, in either JVM (BENCHMARKS.md), and
an optimizer or Spark session that has been running for a while has done that. Each round
compacts fresh copies, each tool going first in turn; while lakewarden works, this script asks the server how the
table is doing four times a second (the times it reports are the server's own, so asking more often would only take
CPU from the optimizer).
With `--instances N` all of it (a fresh server and its optimizer, a fresh Spark session, the sources written anew,
the warm-ups, the rounds) runs N times: what a JVM's compiler settled on holds for all of that JVM's rounds and
differs more from one JVM to the next than from one round to the next (BENCHMARKS.md), so one pair of JVMs can favour
either side. The medians are over every round; each instance's are kept too.
Each Spark side's run also waits until its JVM settles (the JIT's queue done) and records its CPU-seconds by kind of
thread until then (bench/threads.py): `cpu_settled_s`, `threads`, `ratio_cpu_settled`.
Goal: lakewarden's median wall time and CPU-seconds <= 1.0x the faster of the two others. Each copy ends with its
rows counted against the source.

    .venv/bin/python bench/small_files.py [--shapes 300x2,3000x10] [--rows 20] [--rounds 5] [--warm 15]
        [--shape-warm 120] [--instances 1] [--max-input BYTES] [--results small_files]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (
    admin_token,
    bar_chart,
    cpu_seconds,
    descendants,
    quiet,
    running_server,
    server_pid,
    tree_cpu,
    write,
)
from bench.threads import by_thread, settle, settled_cost
from bench.zamboni import zamboni_env, zamboni_run

TOOLS = ["lakewarden", "zamboni", "spark"]
POLL_SECONDS = 0.25
MAINTENANCE = ("rewrite-manifests", "table-expire", "clean-dangling-delete-files")  # those on by default


def write_source(catalog: Any, name: str, files: int, partitions: int, rows: int) -> Any:
    """`files` small files in `partitions` partitions, one append per batch of one file per partition."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", StringType(), required=False),
        NestedField(3, "payload", StringType(), required=False),
    )
    table = catalog.create_table(
        ("db", name),
        schema,
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p")),
        # the comparison is of compaction alone: a copy's 150 manifests would have lakewarden rewrite them (its
        # trigger is 100) on the optimizer, during whichever tool's run, as soon as the copy is registered
        properties={"self-optimizing.enabled": "false", **{f"{m}.enabled": "false" for m in MAINTENANCE}},
    )
    arrow = schema.as_arrow()
    started = time.monotonic()
    for batch in range(files // partitions):
        first = batch * partitions * rows
        ids = list(range(first, first + partitions * rows))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "p": [f"p{(i - first) // rows}" for i in ids],
                    "payload": [f"event-{i:012d}-{'x' * 40}" for i in ids],
                },
                schema=arrow,
            )
        )
        if batch % 50 == 0:
            print(f"  {name}: {batch * partitions}/{files} files written ({time.monotonic() - started:.0f} s)")
    return table


def counted(catalog: Any, name: str) -> tuple[int, int]:
    """(data files, rows) of the table now."""
    tasks = list(catalog.load_table(("db", name)).scan().plan_files())
    return len(tasks), sum(t.file.record_count for t in tasks)


def lakewarden_run(api: httpx.Client, catalog: Any, name: str, optimizer: list[int]) -> dict[str, Any]:
    """Self-optimizing turned on; until the table has nothing pending: every process the group's bound
    (`max-input-file-size-per-thread` x threads, Amoro's rule) cuts the work into has succeeded and the
    evaluator found the committed table idle."""
    table = catalog.load_table(("db", name))
    cpu, threads = tree_cpu(optimizer), by_thread(optimizer)
    started = time.monotonic()
    enabled = datetime.now(UTC)
    with table.transaction() as tx:
        tx.set_properties(
            {
                "self-optimizing.enabled": "true",
                "self-optimizing.min-plan-interval": "0",
            }
        )
    processes: list[dict[str, Any]] = []
    while time.monotonic() - started < 600:
        # the table's page first, the process list only once the table looks idle: a user's poll, not a load on
        # the server (a process list measures each process's benefit) that shares the cores with the optimizer
        if _idle(api, name):
            response = api.get("/api/v1/processes", params={"table": f"lake.db.{name}", "action": "optimizing"})
            found = response.json() if response.status_code == 200 else []  # a 404 until the table is known
            if found and all(p["status"] != "running" for p in found) and _idle(api, name):
                processes = found
                break
        time.sleep(POLL_SECONDS)
    until_idle = time.monotonic() - started
    cpu_until_idle = tree_cpu(optimizer) - cpu
    settled = settle(optimizer)
    if not processes or any(p["status"] != "success" for p in processes):
        raise RuntimeError(f"lakewarden's processes for {name} did not all succeed: {processes}")
    first = processes[-1]  # newest first
    at = datetime.fromisoformat
    # from pending to committed (the measure, as a peer's clock runs from being asked to compact until its
    # commit): from the moment the evaluator found the table pending (kept on its first process) until the
    # catalog recorded the last of its processes' commits
    pending = at(first["scheduling"]["pending_since"])
    commits = api.get(f"/api/v1/tables/lake/db/{name}/timeline", params={"limit": 1000}).json()
    committed = max(at(c["committed_at"]) for c in commits if "lakewarden.process-id" in c["summary"])
    # the same, wider: from the commit that turned self-optimizing on until the last process ended (the
    # evaluator's verdict before, the result's report after)
    ended = max(at(p["end_time"]) for p in processes)
    return {
        "wall_s": round((committed - pending).total_seconds(), 2),
        "enabled_to_end_s": round((ended - enabled).total_seconds(), 2),
        "until_idle_s": round(until_idle, 2),
        "cpu_s": round(cpu_until_idle, 2),
        **settled_cost(settled, threads, by_thread(optimizer)),
        "processes": len(processes),
        "tasks": sum(len(p["tasks"]) for p in processes),
        "first_process_seconds": stages(enabled, pending, first),
        "between_processes_s": between(processes),
    }


def between(processes: list[dict[str, Any]]) -> float:
    """Seconds from each process's end to the next one's plan, added up: the server's evaluation and planning
    of what the bound left for later."""
    at = datetime.fromisoformat
    ordered = sorted(processes, key=lambda p: at(p["start_time"]))
    gaps = [(at(b["start_time"]) - at(a["end_time"])).total_seconds() for a, b in pairwise(ordered)]
    return round(sum(gaps), 3)


def _idle(api: httpx.Client, name: str) -> bool:
    """The table is idle and its verdict is of its current snapshot (not of one before the last commit)."""
    response = api.get(f"/api/v1/tables/lake/db/{name}")
    if response.status_code != 200:
        return False
    table = response.json()
    evaluation = table.get("evaluation") or {}
    return bool(table["status"] == "idle" and evaluation.get("snapshot_id") == table["current_snapshot_id"])


def stages(enabled: datetime, pending: datetime, process: dict[str, Any]) -> dict[str, float]:
    """Where the time from turning self-optimizing on to the process's end went."""
    at = datetime.fromisoformat
    tasks = process["tasks"]
    scheduled = min(at(t["scheduled_at"]) for t in tasks)
    acked = min(at(t["acked_at"]) for t in tasks)
    ended = max(at(t["ended_at"]) for t in tasks)
    points = [enabled, pending, at(process["start_time"]), scheduled, acked, ended, at(process["end_time"])]
    names = ("to pending", "to planned", "to scheduled", "to acked", "tasks run", "to process end")
    return {n: round((b - a).total_seconds(), 3) for n, a, b in zip(names, points, points[1:], strict=False)}


def spark_run(spark: Any, jvm_pid: int, name: str, api: httpx.Client) -> dict[str, Any]:
    """The procedure's call, timed; its CPU-seconds counted as lakewarden's are: its JVM's until the server found the
    compacted table idle (what the JVM does after the call, its compiler's queue among it, counts as the
    optimizer's does), the Python's during the call; and the CPU-seconds of the call alone."""
    jvm, python, threads = cpu_seconds(jvm_pid), time.process_time(), by_thread([jvm_pid])
    started = time.monotonic()
    spark.sql(f"CALL lake.system.rewrite_data_files(table => 'db.{name}')").collect()
    wall = time.monotonic() - started
    python = time.process_time() - python
    call = cpu_seconds(jvm_pid) - jvm + python
    while not _idle(api, name) and time.monotonic() - started < 600:
        time.sleep(POLL_SECONDS)
    until_idle = time.monotonic() - started
    cpu = cpu_seconds(jvm_pid) - jvm + python
    after = settled_cost(settle([jvm_pid]), threads, by_thread([jvm_pid]))
    after["threads"]["python"] = round(python, 3)
    after["cpu_settled_s"] = round(after["cpu_settled_s"] + python, 2)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cpu_call_s": round(call, 2),
        **after,
        "until_idle_s": round(until_idle, 2),
    }


def run_instance(args: argparse.Namespace, shapes: list[tuple[int, ...]], instance: int) -> dict[str, Any]:
    """One pair of JVMs: a fresh server (its own optimizer) and a fresh Spark session, warmed alike, each shape
    written anew on that server and compacted `args.rounds` times by each tool. Returns each shape's files and
    rounds."""
    # the evaluator's default recheck (none: tables are evaluated when they change): a recheck of every table every
    # few seconds, the 3,000-file source's among them, would take cores from the tools and keep the evaluator busy
    # when a compacted copy changes
    settings = (
        "  evaluator: {interval: 1s}\n"
        "catalogs: [{name: lake, type: internal}]\n"
        "resource-groups: [{name: default, container: local,"
        " properties: {instances: '1', memory: 2g, parallelism: '2'"
        + (f", max-input-file-size-per-thread: '{args.max_input}'" if args.max_input else "")
        + "}}]\n"
    )
    from pyiceberg.catalog import load_catalog

    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import build_spark_session

    label = f"instance {instance + 1}: " if args.instances > 1 else ""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as root:
        zamboni = zamboni_env(Path(tempfile.gettempdir()) / "lakewarden-bench-cache")
        token = admin_token(tmp)
        api = httpx.Client(base_url=root, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        catalog = load_catalog("lake", type="rest", uri=f"{root}/iceberg", token=token, warehouse="lake")
        catalog.create_namespace("db")
        spark = build_spark_session(
            [CatalogSpec("lake", "internal", {"uri": f"{root}/iceberg", "token": token})],
            master="local[2]",
            driver_memory="2g",
            app_name="lakewarden-bench-rewrite-data-files",
        )
        jvm: Any = spark._jvm
        jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())

        # warm both Spark sides alike: the same rewrites of tables of their own
        warm = write_source(catalog, "warm", 40, 2, args.rows)
        while not (optimizer := descendants(server_pid(tmp))):
            time.sleep(0.5)
        for i in range(args.warm):
            for copy in (f"warm_lw{i}", f"warm_sp{i}"):
                catalog.register_table(("db", copy), warm.metadata_location)
            spark_run(spark, jvm_pid, f"warm_sp{i}", api)
            lakewarden_run(api, catalog, f"warm_lw{i}", descendants(server_pid(tmp)))
        optimizer = descendants(server_pid(tmp))

        for files, partitions in shapes:
            shape = f"{files}x{partitions}"
            source = write_source(catalog, f"src_{files}", files, partitions, args.rows)
            expected = counted(catalog, f"src_{files}")
            quiet(server_pid(tmp))
            for i in range(args.shape_warm):
                for tool in ("lakewarden", "spark"):
                    copy = f"warm_{tool}_{files}_{i}"
                    catalog.register_table(("db", copy), source.metadata_location)
                    run = (
                        lakewarden_run(api, catalog, copy, optimizer)
                        if tool == "lakewarden"
                        else spark_run(spark, jvm_pid, copy, api)
                    )
                    if i % 10 == 9 or i == args.shape_warm - 1:
                        print(f"{label}{shape} warm-up {i + 1} {tool}: {run['wall_s']} s, {run['cpu_s']} CPU-s")
            rounds: list[dict[str, Any]] = []
            for round_ in range(args.rounds):
                runs: dict[str, Any] = {}
                order = TOOLS[round_ % len(TOOLS) :] + TOOLS[: round_ % len(TOOLS)]  # each goes first in turn
                for tool in order:
                    # each tool starts with the server idle, as the first does: the server evaluates every commit
                    # to its catalog, the peers' rewrites of their copies too
                    quiet(server_pid(tmp))
                    copy = f"{tool}_{files}_{round_}"
                    catalog.register_table(("db", copy), source.metadata_location)
                    if tool == "lakewarden":
                        runs[tool] = lakewarden_run(api, catalog, copy, optimizer)
                    elif tool == "zamboni":
                        runs[tool] = zamboni_run(zamboni, root, token, copy)
                    else:
                        runs[tool] = spark_run(spark, jvm_pid, copy, api)
                    after = counted(catalog, copy)
                    if after[1] != expected[1]:
                        raise RuntimeError(f"{tool} changed the rows of {shape}: {after[1]} vs {expected[1]}")
                    runs[tool]["files_after"] = after[0]
                    print(f"{label}{shape} round {round_ + 1} {tool}: {runs[tool]}")
                rounds.append({"instance": instance, **runs})
            found[shape] = {"files_before": expected[0], "rounds": rounds}
        spark.stop()
    return found


def medians(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    def median(tool: str, measure: str) -> float:
        return round(float(statistics.median(r[tool][measure] for r in rounds)), 3)

    found: dict[str, dict[str, Any]] = {tool: {m: median(tool, m) for m in ("wall_s", "cpu_s")} for tool in TOOLS}
    for tool in ("lakewarden", "spark"):  # the two JVMs: their whole cost, and where it went
        found[tool]["cpu_settled_s"] = median(tool, "cpu_settled_s")
        kinds = sorted({k for r in rounds for k in r[tool]["threads"]})
        found[tool]["threads"] = {
            k: round(float(statistics.median(r[tool]["threads"].get(k, 0.0) for r in rounds)), 3) for k in kinds
        }
    return found


def ratios(median: dict[str, dict[str, Any]]) -> dict[str, float]:
    """lakewarden's median wall time and CPU-seconds over the faster peer's; and its JVM's whole cost (until it
    settled) over the procedure's session's."""
    found = {
        f"ratio_{m}": round(median["lakewarden"][f"{m}_s"] / min(median[p][f"{m}_s"] for p in ("zamboni", "spark")), 3)
        for m in ("wall", "cpu")
    }
    found["ratio_cpu_settled"] = round(median["lakewarden"]["cpu_settled_s"] / median["spark"]["cpu_settled_s"], 3)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="300x2,3000x10", help="files x partitions, comma-separated")
    parser.add_argument("--rows", type=int, default=20, help="rows per file")
    parser.add_argument("--rounds", type=int, default=5, help="fresh copies compacted by each tool, medians kept")
    parser.add_argument(
        "--instances", type=int, default=1, help="pairs of JVMs (a fresh server and Spark session), each warmed alike"
    )
    parser.add_argument("--warm", type=int, default=15, help="warm-up rewrites on each Spark side")
    parser.add_argument(
        "--shape-warm", type=int, default=120, help="warm-up rewrites of each shape on each Spark side, not counted"
    )
    parser.add_argument(
        "--max-input", type=int, default=None, help="the group's max-input-file-size-per-thread (default Amoro's)"
    )
    parser.add_argument("--results", default="small_files", help="name of the results file and plot")
    args = parser.parse_args()
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes.split(",")]

    found = [run_instance(args, shapes, i) for i in range(args.instances)]
    results: dict[str, Any] = {}
    for shape in found[0]:
        rounds = [r for instance in found for r in instance[shape]["rounds"]]
        median = medians(rounds)
        results[shape] = {
            "files_before": found[0][shape]["files_before"],
            "rounds": rounds,
            "median": median,
            **ratios(median),
            # each pair of JVMs on its own: a JVM's steady state (what its compiler chose) holds for all its rounds
            "instances": [{"median": (m := medians(instance[shape]["rounds"])), **ratios(m)} for instance in found],
        }
        print(
            f"{shape}: medians {median}; lakewarden / the faster peer: wall {results[shape]['ratio_wall']}x, "
            f"CPU {results[shape]['ratio_cpu']}x, settled {results[shape]['ratio_cpu_settled']}x; by instance: "
            + ", ".join(
                f"{i['ratio_wall']}x / {i['ratio_cpu']}x / {i['ratio_cpu_settled']}x"
                for i in results[shape]["instances"]
            )
        )

    write(
        args.results,
        {
            "rows_per_file": args.rows,
            "rounds": args.rounds,
            "instances": args.instances,
            "shape_warm": args.shape_warm,
            "max_input_per_thread": args.max_input,
            "goal": "<= 1.0x",
            "shapes": results,
        },
    )
    bars = {}
    for shape, result in results.items():
        for tool in TOOLS:
            bars[f"{shape} {tool}"] = result["median"][tool]["wall_s"]
    bar_chart(args.results, "Small files compacted: median wall seconds from pending to committed", bars, "s")


if __name__ == "__main__":
    main()
