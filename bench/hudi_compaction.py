"""A merge-on-read Hudi table under an upsert stream from Spark, compacted two ways, side by side:

  inline      Hudi's default for a Spark batch writer: the writer compacts inline, in its own commits, every
              --delta-commits delta commits
  lakewarden  the writer only schedules the compaction plans (`hoodie.compact.schedule.inline`) and goes on
              writing; a lakewarden server with one local optimizer carrying Hudi's engine executes each plan the
              writer left (a `hudi` catalog over the warehouse, the server's default settings otherwise)

Both writers run the same stream (one seed): --commits upserts of --rows rows each over a table of --base rows in
four partitions; clean and archive are off in both, so only compaction differs; the writers lock their commits (the
metadata table, Hudi's default, needs that beside a service in another process). Reported per setup: the writer's
commit latency (p50, p95, max), the compactions completed, the read latency at rest (the whole table read back,
median of three, once every plan the writer left is executed), and CPU: the writer's and the optimizer's
process trees, and compaction's own share (the inline writer's CPU beyond the scheduling writer's; the
optimizer's in lakewarden's setup).
Goals: writer p95 at least 2x lower with lakewarden; read latency at rest within 1.2x; compaction CPU within 1.2x.

    .venv/bin/python bench/hudi_compaction.py [--commits 30] [--rows 2000] [--base 20000] [--delta-commits 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, descendants, percentile, running_server, server_pid, tree_cpu, write
from lakewarden.domain.hudi import COMPLETED
from lakewarden.metadata.hudi import read_timeline
from tests.engine_jobs import EngineWriter, engine_writer

PARTITIONS = 4
SETUPS = ("inline", "lakewarden")


# the table keeps a metadata table (Hudi's default): a service in another process than the writer commits under
# a lock, as Hudi's multi-writer setup says (both setups write the same way)
LOCK = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
    "hoodie.cleaner.policy.failed.writes": "LAZY",
}


def writer_options(setup: str, delta_commits: int) -> dict[str, str]:
    common = {
        **LOCK,
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.compact.inline.max.delta.commits": str(delta_commits),
        "hoodie.clean.automatic": "false",
        "hoodie.archive.automatic": "false",
    }
    if setup == "inline":
        return {**common, "hoodie.compact.inline": "true"}
    return {**common, "hoodie.compact.inline": "false", "hoodie.compact.schedule.inline": "true"}


def stream(seed: int, commits: int, rows: int, base: int) -> list[list[tuple[int, str, int, str]]]:
    """The upserts, made once from the seed: each a batch of keys drawn from the table's, with new values."""
    rng = random.Random(seed)
    batches = []
    for n in range(commits):
        keys = rng.sample(range(base), rows)
        batches.append([(k, f"v{n}-{rng.randrange(1000)}", n + 1, f"p{k % PARTITIONS}") for k in keys])
    return batches


def pending_compactions(path: Path) -> int:
    return sum(1 for i in read_timeline(path) if i.action == "compaction" and i.state != COMPLETED)


def completed_compactions(path: Path) -> int:
    """A merge-on-read table's compactions complete as commits (its writes as delta commits)."""
    return sum(1 for i in read_timeline(path) if i.action == "commit" and i.state == COMPLETED)


def process_cpu(pid: int) -> float:
    return tree_cpu([pid, *descendants(pid)])


def run_stream(writer: EngineWriter, path: Path, batches: list[Any], options: dict[str, str]) -> list[float]:
    latencies = []
    for n, batch in enumerate(batches):
        started = time.perf_counter()
        writer.write(path, "events", batch, options)
        latencies.append(time.perf_counter() - started)
        if (n + 1) % 10 == 0:
            print(f"    {n + 1}/{len(batches)} commits, last {latencies[-1]:.2f} s", flush=True)
    return latencies


def read_at_rest(writer: EngineWriter, path: Path) -> tuple[float, int]:
    times = []
    count = 0
    for _ in range(3):
        started = time.perf_counter()
        count = len(writer.read(path))
        times.append(time.perf_counter() - started)
    return statistics.median(times), count


def one_setup(setup: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    print(f"{setup}:", flush=True)
    warehouse = tmp / setup / "warehouse"
    path = warehouse / "events"
    options = writer_options(setup, args.delta_commits)
    batches = stream(args.seed, args.commits, args.rows, args.base)
    with engine_writer(tmp / f"{setup}-writer.log") as writer:
        seed_rows = [(k, "seed", 0, f"p{k % PARTITIONS}") for k in range(args.base)]
        writer.write(path, "events", seed_rows, options)
        writer_pid = writer.process.pid
        if setup == "inline":
            cpu_before = process_cpu(writer_pid)
            latencies = run_stream(writer, path, batches, options)
            writer_cpu = process_cpu(writer_pid) - cpu_before
            optimizer_cpu = 0.0
        else:
            server_dir = tmp / setup / "server"
            server_dir.mkdir(parents=True)
            with running_server(str(server_dir), "") as root:
                token = admin_token(str(server_dir))
                api = httpx.Client(base_url=f"{root}/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"})
                group = {"name": "hudi", "container": "local", "properties": {"engines": "hudi"}}
                assert api.post("/resource-groups", json=group).status_code == 201
                catalog = {
                    "warehouse": str(warehouse),
                    "table.self-optimizing.group": "hudi",
                    **{f"table.{k}": v for k, v in LOCK.items()},
                }
                added = api.post("/catalogs", json={"name": "hl", "type": "hudi", "properties": catalog})
                assert added.status_code == 201, added.text
                assert api.post("/resource-groups/hudi/scale", json={"instances": 1}).is_success
                server = server_pid(str(server_dir))
                time.sleep(5)  # the optimizer's JVM up before the stream starts, as a running service's is
                optimizer_before = process_cpu(server) - tree_cpu([server])
                cpu_before = process_cpu(writer_pid)
                latencies = run_stream(writer, path, batches, options)
                writer_cpu = process_cpu(writer_pid) - cpu_before
                deadline = time.monotonic() + args.settle
                # at rest: every plan the writer requested executed (the last one stays until a commit is past it,
                # Hudi's async pattern, so one more plan pending is allowed only if it was requested last)
                while time.monotonic() < deadline and pending_compactions(path) > 0:
                    newest = max(read_timeline(path), key=lambda i: i.timestamp)
                    if pending_compactions(path) == 1 and newest.action == "compaction":
                        break
                    time.sleep(1)
                optimizer_cpu = process_cpu(server) - tree_cpu([server]) - optimizer_before
                processes = api.get("/processes", params={"table": "hl.default.events"}).json()
                for failed in (p for p in processes if p["status"] == "failed"):
                    print(f"  process {failed['process_id']} failed: {failed.get('fail_reason')}", flush=True)
        read_latency, count = read_at_rest(writer, path)
    assert count == args.base, f"{setup}: {count} rows read, {args.base} written"
    result = {
        "commit_p50_s": round(percentile(latencies, 50), 3),
        "commit_p95_s": round(percentile(latencies, 95), 3),
        "commit_max_s": round(max(latencies), 3),
        "compactions": completed_compactions(path),
        "pending_compactions": pending_compactions(path),
        "read_at_rest_s": round(read_latency, 3),
        "writer_cpu_s": round(writer_cpu, 1),
        "optimizer_cpu_s": round(optimizer_cpu, 1),
    }
    if setup == "lakewarden":
        result["processes"] = len(processes)
        result["processes_failed"] = sum(1 for p in processes if p["status"] == "failed")
    print(f"  {result}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--base", type=int, default=20000)
    parser.add_argument("--delta-commits", type=int, default=3)
    parser.add_argument("--settle", type=float, default=300, help="seconds to wait for lakewarden at rest")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        results = {setup: one_setup(setup, args, Path(tmp)) for setup in SETUPS}
    inline, ours = results["inline"], results["lakewarden"]
    compaction_inline = inline["writer_cpu_s"] - ours["writer_cpu_s"]
    ratios = {
        "commit_p95_inline_over_lakewarden": round(inline["commit_p95_s"] / ours["commit_p95_s"], 2),
        "read_at_rest_lakewarden_over_inline": round(ours["read_at_rest_s"] / inline["read_at_rest_s"], 2),
        "compaction_cpu_inline_s": round(compaction_inline, 1),
        "compaction_cpu_lakewarden_over_inline": (
            round(ours["optimizer_cpu_s"] / compaction_inline, 2) if compaction_inline > 0 else None
        ),
    }
    goals = {
        "commit_p95_2x_lower": ratios["commit_p95_inline_over_lakewarden"] >= 2.0,
        "read_at_rest_within_1_2x": ratios["read_at_rest_lakewarden_over_inline"] <= 1.2,
        "compaction_cpu_within_1_2x": (ratios["compaction_cpu_lakewarden_over_inline"] or 99) <= 1.2,
    }
    print("ratios:", ratios)
    print("goals:", goals)
    write("hudi_compaction", {"parameters": vars(args), "setups": results, "ratios": ratios, "goals": goals})
    bar_chart(
        "hudi_compaction",
        "Hudi merge-on-read upserts: the writer's commit p95",
        {f"{setup} p95": results[setup]["commit_p95_s"] for setup in SETUPS},
        "s",
    )


if __name__ == "__main__":
    main()
