"""A user's Spark job of row-level statements on two tables while they are compacted, side by side:

  lakewarden-defaults    the tables in lakewarden's REST catalog, every optimizing setting at its default, one
                         local optimizer (a fresh server)
  lakewarden-aggressive  the same, compacting as soon as three small files are there, no plan interval
  peer                   the same job on a plain Iceberg SQL catalog, with Iceberg's `rewrite_data_files` on both
                         tables every --peer-every seconds in another Spark session, as a scheduler runs it

The job (the same statements in every setup, one seed) appends small batches and runs merge-on-read and
copy-on-write DELETE, UPDATE and MERGE, each statement once, as Spark runs it (no retry of a failed one).
Reported per setup: statements failed, data files per partition at rest (after lakewarden settled, or after
the peer's run that follows the job), lakewarden's processes, how often its work yielded to the job and the CPU
of the work undone, against the CPU of all its optimizing.
Goals: 0 statements failed with lakewarden; files per partition at rest <= 1.2x the peer's; CPU of undone work
< 10% of compaction CPU.

    .venv/bin/python bench/writer_conflicts.py [--statements 300] [--peer-every 60] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, write

TABLES = {"mor": "merge-on-read", "cow": "copy-on-write"}
PARTITIONS = 4
AGGRESSIVE = {"self-optimizing.minor.trigger.file-count": "3", "self-optimizing.min-plan-interval": "0"}
SETUPS = ("lakewarden-defaults", "lakewarden-aggressive", "peer")


@dataclass
class Job:
    """The statements of the job, made once from the seed; `{t}` stands for the table's name."""

    statements: list[tuple[str, str]] = field(default_factory=list)  # (table key, SQL)

    @classmethod
    def of(cls, count: int, seed: int) -> Job:
        rng = random.Random(seed)
        job = cls()
        next_id = 2_000  # the seed rows are ids 0..1999
        for i in range(count):
            table = rng.choice(list(TABLES))
            kind = rng.choices(["append", "delete", "update", "merge"], weights=[4, 2, 2, 2])[0]
            part = rng.randrange(PARTITIONS)
            if kind == "append":
                rows = ", ".join(f"({n}, 'p{n % PARTITIONS}', 'a{i}')" for n in range(next_id, next_id + 20))
                next_id += 20
                sql = f"INSERT INTO {{t}} VALUES {rows}"
            elif kind == "delete":
                sql = f"DELETE FROM {{t}} WHERE part = 'p{part}' AND id % 31 = {rng.randrange(31)}"
            elif kind == "update":
                sql = f"UPDATE {{t}} SET v = 'u{i}' WHERE part = 'p{part}' AND id % 17 = {rng.randrange(17)}"
            else:
                old = [rng.randrange(next_id // PARTITIONS) * PARTITIONS + part for _ in range(5)]
                new = [next_id + k * PARTITIONS + part for k in range(2)]
                next_id += 2 * PARTITIONS
                source = " UNION ALL ".join(f"SELECT {n}L AS id, 'p{part}' AS part, 'm{i}' AS v" for n in old + new)
                sql = (
                    f"MERGE INTO {{t}} USING ({source}) s ON {{t}}.id = s.id AND {{t}}.part = 'p{part}' "
                    "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
                )
            job.statements.append((table, sql))
        return job


def create_tables(spark: Any, catalog: str, properties: dict[str, str]) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    for key, mode in TABLES.items():
        props = {
            "format-version": "2",
            "write.delete.mode": mode,
            "write.update.mode": mode,
            "write.merge.mode": mode,
            **properties,
        }
        listed = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        spark.sql(
            f"CREATE TABLE {catalog}.db.{key} (id BIGINT, part STRING, v STRING) USING iceberg "
            f"PARTITIONED BY (part) TBLPROPERTIES ({listed})"
        )
        for batch in range(20):  # twenty small files a partition to begin with
            rows = ", ".join(f"({n}, 'p{n % PARTITIONS}', 's')" for n in range(batch * 100, batch * 100 + 100))
            spark.sql(f"INSERT INTO {catalog}.db.{key} VALUES {rows}")


def run_job(spark: Any, catalog: str, job: Job) -> tuple[list[str], float]:
    """Each statement once; the failures (class and message) and the seconds the job took."""
    failures = []
    began = time.monotonic()
    for number, (table, sql) in enumerate(job.statements, 1):
        try:
            spark.sql(sql.format(t=f"{catalog}.db.{table}"))
        except Exception as exc:  # what the user's job would die of
            message = cause(exc)
            failures.append(f"#{number} {table}: {message}")
            print(f"  statement {number} failed: {message}", flush=True)
        if number % 50 == 0:
            print(f"  {number} statements, {len(failures)} failed", flush=True)
    return failures, time.monotonic() - began


def cause(exc: BaseException) -> str:
    """The Java exception behind a failed statement (py4j's first line only names the call), in a line."""
    lines = [line.strip(": \t") for line in str(exc).splitlines()]
    return next((line for line in lines if "Exception" in line), lines[0] if lines else repr(exc))[:300]


def files_per_partition(spark: Any, catalog: str) -> float:
    counts = []
    for table in TABLES:
        spark.sql(f"REFRESH TABLE {catalog}.db.{table}")
        files = f"{catalog}.db.{table}.files"
        rows = spark.sql(f"SELECT partition.part, count(*) FROM {files} WHERE content = 0 GROUP BY 1").collect()
        counts += [int(r[1]) for r in rows]
    return statistics.fmean(counts)


def lakewarden(name: str, spark: Any, job: Job, args: argparse.Namespace) -> dict[str, Any]:
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import configure_catalogs

    settings = (
        "  evaluator: {interval: 1s}\n"
        "catalogs: [{name: bench, type: internal}]\n"
        "resource-groups: [{name: default, container: local, properties: {instances: '1', memory: '2g'}}]\n"
    )
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as root:
        token = admin_token(tmp)
        api = httpx.Client(base_url=f"{root}/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"})
        properties = {**api.get("/catalogs/bench").json()["properties"], "token": token}
        configure_catalogs(spark, [CatalogSpec("bench", "internal", properties)], {"bench": "lw"})
        deadline = time.monotonic() + 300
        while not api.get("/resource-groups/default/optimizers").json() and time.monotonic() < deadline:
            time.sleep(1)
        create_tables(spark, "lw", AGGRESSIVE if name.endswith("aggressive") else {})
        print(f"{name}: {len(job.statements)} statements", flush=True)
        failures, took = run_job(spark, "lw", job)
        settled = settle(api, args.settle)
        processes = [p for p in api.get("/processes", params={"limit": 10000}).json() if p["action"] == "optimizing"]
        failed = [p for p in processes if p["status"] == "failed"]
        whole = sum(p["usage"].get("whole_cpu_ms", 0) or p["usage"].get("cpu_ms", 0) for p in processes) / 1000
        undone = sum(p["summary"].get("yielded_cpu_ms", 0) for p in processes) / 1000
        return {
            "statements": len(job.statements),
            "failed": len(failures),
            "failures": failures[:20],
            "job_seconds": round(took, 1),
            "settled": settled,
            "files_per_partition": round(files_per_partition(spark, "lw"), 2),
            "processes": len(processes),
            "processes_failed": len(failed),
            "process_failures": sorted({(p.get("fail_reason") or "")[:200] for p in failed}),
            # CPU of processes that failed: a writer changed their files first (lakewarden's own commit lost)
            "failed_cpu_seconds": round(sum(p["usage"].get("whole_cpu_ms", 0) for p in failed) / 1000, 1),
            "yields": sum(p["summary"].get("yields", 0) for p in processes),
            # file groups a writer changed before the process committed: left out, the rest committed
            "groups_yielded": sum(p["summary"].get("groups_yielded", 0) for p in processes),
            "processes_partly_committed": sum(
                1 for p in processes if p["status"] == "success" and p["summary"].get("groups_yielded")
            ),
            "compaction_cpu_seconds": round(whole, 1),
            "undone_cpu_seconds": round(undone, 2),
            "undone_share": round(undone / whole, 4) if whole else 0.0,
        }


def settle(api: httpx.Client, seconds: float) -> bool:
    """Wait until the tables are idle with no process running (up to `seconds`); whether they settled."""
    deadline = time.monotonic() + seconds
    quiet_since = None
    while time.monotonic() < deadline:
        tables = [t for t in api.get("/tables").json() if t.get("catalog") == "bench"]
        running = api.get("/processes", params={"status": "running"}).json()
        if tables and all(t["status"] == "idle" for t in tables) and not running:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 10:
                return True
        else:
            quiet_since = None
        time.sleep(2)
    return False


def peer(spark: Any, job: Job, args: argparse.Namespace) -> dict[str, Any]:
    """The job on a plain SQL catalog, `rewrite_data_files` on both tables every --peer-every seconds."""
    create_tables(spark, "peer", {})
    scheduler = spark.newSession()  # another session, as another Spark job would be
    stop = threading.Event()
    runs = {"done": 0, "failed": 0}

    def compact() -> None:
        for table in TABLES:
            try:
                scheduler.sql(f"CALL peer.system.rewrite_data_files(table => 'db.{table}')").collect()
                runs["done"] += 1
            except Exception as exc:
                runs["failed"] += 1
                print(f"  rewrite_data_files failed: {cause(exc)}", flush=True)

    def schedule() -> None:
        while not stop.wait(args.peer_every):
            compact()

    thread = threading.Thread(target=schedule, daemon=True)
    thread.start()
    print(f"peer: {len(job.statements)} statements", flush=True)
    failures, took = run_job(spark, "peer", job)
    stop.set()
    thread.join(600)
    compact()  # the scheduled run that follows the job: the tables at rest
    return {
        "statements": len(job.statements),
        "failed": len(failures),
        "failures": failures[:20],
        "job_seconds": round(took, 1),
        "files_per_partition": round(files_per_partition(spark, "peer"), 2),
        "rewrite_runs": runs["done"],
        "rewrite_runs_failed": runs["failed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=300)
    parser.add_argument("--peer-every", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=240.0, help="seconds lakewarden may take to settle after")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--setups", default=",".join(SETUPS))
    args = parser.parse_args()
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.metadata.catalogs import initialize_catalog
    from lakewarden.spark.session import build_spark_session

    job = Job.of(args.statements, args.seed)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        spec = CatalogSpec("peer", "sql", {"uri": f"sqlite:///{tmp}/peer.db", "warehouse": f"{tmp}/warehouse"})
        initialize_catalog(spec)
        spark = build_spark_session([spec], master="local[2]", driver_memory="2g", app_name="bench-user-job")
        for setup in args.setups.split(","):
            if setup == "peer":
                results[setup] = peer(spark, job, args)
            else:
                results[setup] = lakewarden(setup, spark, job, args)
            print(setup, {k: v for k, v in results[setup].items() if k != "failures"}, flush=True)
        spark.stop()
    if "peer" in results:
        for setup in (s for s in results if s != "peer"):
            ratio = results[setup]["files_per_partition"] / max(results["peer"]["files_per_partition"], 1e-9)
            results[setup]["files_per_partition_vs_peer"] = round(ratio, 3)
    write("writer_conflicts", {"args": vars(args), "results": results})
    bar_chart(
        "writer_conflicts",
        f"{args.statements} row-level statements of a Spark job while its tables are compacted",
        {f"{s} failed": float(r["failed"]) for s, r in results.items()}
        | {f"{s} files/partition": float(r["files_per_partition"]) for s, r in results.items()},
        "statements / files",
    )


if __name__ == "__main__":
    main()
