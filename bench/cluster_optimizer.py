"""An optimizer on a Spark standalone cluster against one in local[2], on the same two cores, side by side.

1. Throughput: the same table of small files (zstd Parquet) is compacted by lakewarden's planner and the
   optimizer's executor, once in a Spark application on a standalone cluster (the driver here, the rewrites on
   the executors: two one-core workers, or with --worker-cores 2 one worker whose one executor has both cores)
   and once in local[2]. Each variant runs in a process of its own (one SparkContext per JVM), on a fresh copy
   of the table, alternating, --rounds times; medians. Before the measured compaction each variant compacts a
   first copy of the same rows (its tasks at once, so every executor runs one), as an optimizer that has been
   running has warm JVMs; that first one is reported too.
   Goal: cluster >= 0.95x local (the cluster costs little).
2. Reaction: a real server whose `spark` container submits optimizers to the cluster; from `group scale` to
   the first task acked (spark-submit, the driver's start, registration, the first poll).

    .venv/bin/python bench/cluster_optimizer.py [--files 120] [--rows-per-file 40000] [--rounds 2] [--threads 1]
        [--worker-cores 1|2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bar_chart, in_temporary_dir, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.evaluator import OptimizingClock
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.metadata.catalogs import initialize_catalog, open_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.optimizer.executor import execute_task
from lakewarden.protocol.messages import Assignment, CatalogConnection
from lakewarden.protocol.results import OptimizingResult
from lakewarden.services.processes.self_optimizing import plan_process
from lakewarden.spark.session import build_spark_session
from tests.clusters import standalone_cluster
from tests.servers import MAINTENANCE_OFF, started_server

MB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=120)
    parser.add_argument("--rows-per-file", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="the measured optimizer's threads")
    parser.add_argument(
        "--worker-cores",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: two workers of one core (two executors); 2: one worker of two cores (one executor)",
    )
    # internal: one variant's compaction in a process of its own
    parser.add_argument("--variant-master", help=argparse.SUPPRESS)
    parser.add_argument("--variant-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant_master:
        print(
            json.dumps(
                compact(
                    Path(args.variant_dir),
                    args.variant_master,
                    args.files,
                    args.rows_per_file,
                    args.threads,
                    args.worker_cores,
                )
            )
        )
        return
    in_temporary_dir(lambda tmp: run(args, tmp))


def catalog(directory: Path) -> CatalogSpec:
    return CatalogSpec(
        "bench", "sql", {"uri": f"sqlite:///{directory}/catalog.db", "warehouse": str(directory / "warehouse")}
    )


def write_table(spark: Any, name: str, files: int, rows_per_file: int) -> int:
    """A table of small files (the same rows every time); returns its bytes."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.db")
    spark.sql(
        f"CREATE TABLE bench.db.{name} (id BIGINT, name STRING, amount DOUBLE, note STRING) USING iceberg "
        "TBLPROPERTIES ('write.parquet.compression-codec'='zstd')"
    )
    (
        spark.range(files * rows_per_file)
        .selectExpr(
            "id",
            "concat('name-', CAST(id % 100003 AS STRING)) AS name",
            "rand(7) * 1000 AS amount",
            "sha2(CAST(id AS STRING), 256) AS note",
        )
        .repartition(files)
        .writeTo(f"bench.db.{name}")
        .append()
    )
    size = sum(r[0] for r in spark.sql(f"SELECT file_size_in_bytes FROM bench.db.{name}.files").collect())
    return int(size)


def compact(
    directory: Path, master: str, files: int, rows_per_file: int, threads: int, executor_cores: int
) -> dict[str, Any]:
    """One variant in a fresh directory: two tables of the same rows; the first is compacted to warm the
    optimizer's JVMs (every executor's: its tasks run at once), as a running optimizer's are; the second is
    the measure: planned and every task run with the optimizer's executor on `threads` threads."""
    spec = catalog(directory)
    initialize_catalog(spec)
    extra = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    if master.startswith("spark://"):
        extra.update(
            {"spark.executor.memory": "1g", "spark.cores.max": "2", "spark.executor.cores": str(executor_cores)}
        )
    started = time.perf_counter()
    spark = build_spark_session(
        [spec], master=master, driver_memory="2g", app_name="lakewarden-bench-variant", extra_conf=extra
    )
    up = time.perf_counter() - started
    spark.range(4).count()  # executors registered
    connection = CatalogConnection(name=spec.name, type=spec.type, properties=dict(spec.properties))
    write_table(spark, "first", files, rows_per_file)
    first_seconds, _ = optimize(spark, spec, connection, "first", threads=2)
    size = write_table(spark, "small", files, rows_per_file)
    seconds, results = optimize(spark, spec, connection, "small", threads)
    executors = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1  # minus the driver
    spark.stop()
    return {
        "seconds": seconds,
        "first_process_seconds": first_seconds,
        "startup_seconds": up,
        "bytes_in": sum(r.bytes_in for r in results),
        "files_in": sum(r.files_in for r in results),
        "files_out": sum(r.files_out for r in results),
        "executors": executors,
        "table_bytes": size,
    }


def optimize(
    spark: Any, spec: CatalogSpec, connection: CatalogConnection, name: str, threads: int
) -> tuple[float, list[OptimizingResult]]:
    """Plan the table as the server would and run its tasks as an optimizer's threads do; seconds of the
    tasks and their results."""
    table = open_catalog(spec).load_table(("db", name))
    now = int(time.time() * 1000)
    config = OptimizingConfig.of(table.properties)
    clock = OptimizingClock(now, last_minor_ms=0, last_full_ms=now)
    planned = plan_process(f"db.{name}", table, snapshot_files(table, ManifestCache()), config, clock)

    def run_task(numbered: tuple[int, Any]) -> OptimizingResult:
        task_id, task = numbered
        work = Assignment(
            process_id=1, task_id=task_id, attempt=1, type=task.type, catalog=connection, input=task.input
        )
        result = execute_task(spark, work, "bench")
        assert isinstance(result, OptimizingResult)
        return result

    begun = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(run_task, enumerate(planned.tasks, start=1)))
    return time.perf_counter() - begun, results


def run(args: argparse.Namespace, tmp: Path) -> None:
    measured: dict[str, list[dict[str, Any]]] = {"cluster": [], "local[2]": []}
    layout = f"{2 // args.worker_cores} worker(s) x {args.worker_cores} core(s)"
    with standalone_cluster(tmp, workers=2 // args.worker_cores, cores=args.worker_cores) as cluster:
        for round_ in range(args.rounds):
            order = ["cluster", "local[2]"] if round_ % 2 == 0 else ["local[2]", "cluster"]
            for variant in order:
                copy = tmp / f"{variant}-{round_}"
                copy.mkdir()
                master = cluster.master if variant == "cluster" else "local[2]"
                done = subprocess.run(
                    [
                        *(sys.executable, __file__, "--variant-master", master),
                        *("--variant-dir", str(copy), "--files", str(args.files)),
                        *("--rows-per-file", str(args.rows_per_file), "--threads", str(args.threads)),
                        *("--worker-cores", str(args.worker_cores)),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                result = json.loads(done.stdout.strip().splitlines()[-1])
                measured[variant].append(result)
                print(
                    f"round {round_ + 1} {variant:>8}: {result['bytes_in'] / MB / result['seconds']:.1f} MB/s "
                    f"({result['files_in']} -> {result['files_out']} files, {result['executors']} executor(s))",
                    flush=True,
                )
                shutil.rmtree(copy, ignore_errors=True)
        reaction = scale_to_first_ack(tmp, cluster.master)

    rate = {v: statistics.median(r["bytes_in"] / MB / r["seconds"] for r in runs) for v, runs in measured.items()}
    ratio = rate["cluster"] / rate["local[2]"]
    size = measured["local[2]"][0]["table_bytes"]
    print(f"{args.files} files, {size / MB:.0f} MB")
    print(f"cluster ({layout}): {rate['cluster']:.1f} MB/s; local[2]: {rate['local[2]']:.1f} MB/s")
    print(f"ratio: {ratio:.2f}x (goal >= 0.95x)")
    first = {
        v: statistics.median(r["bytes_in"] / MB / r["first_process_seconds"] for r in runs)
        for v, runs in measured.items()
    }
    print(
        f"first process of each application (cold JVMs, tasks at once): cluster {first['cluster']:.1f} MB/s, "
        f"local[2] {first['local[2]']:.1f} MB/s ({first['cluster'] / first['local[2]']:.2f}x)"
    )
    print(f"group scale -> first task acked: {reaction:.1f} s")
    name = "cluster_optimizer" if args.worker_cores == 1 else "cluster_optimizer_one_worker"
    write(
        name,
        {
            "files": args.files,
            "cluster": layout,
            "input_mb": round(size / MB, 1),
            "rounds": args.rounds,
            "mb_per_second": {v: round(r, 2) for v, r in rate.items()},
            "runs": measured,
            "cluster_vs_local": round(ratio, 3),
            "first_process_mb_per_second": {v: round(r, 2) for v, r in first.items()},
            "scale_to_first_ack_seconds": round(reaction, 2),
            "goal": 0.95,
        },
    )
    bar_chart(name, f"Compaction throughput: standalone cluster ({layout}) vs local[2]", rate, "MB/s")


def scale_to_first_ack(tmp: Path, master: str) -> float:
    """A server whose spark container submits to the cluster: seconds from `group scale` to a task acked."""
    properties = (
        f"spark-master: '{master}', driver-memory: 1g, executor-memory: 1g, total-executor-cores: '2', "
        "spark-conf.spark.driver.host: 127.0.0.1, spark-conf.spark.driver.bindAddress: 127.0.0.1"
    )
    cluster = f"{{name: cluster, container-impl: spark, properties: {{{properties}}}}}"
    containers = f"containers:\n  - {{name: local}}\n  - {cluster}\n"
    (tmp / "server").mkdir()
    with started_server(tmp / "server", maintenance=MAINTENANCE_OFF + containers) as server:
        api = server.api()
        api.post("/resource-groups", json={"name": "etl", "container": "cluster"}).raise_for_status()
        make_pending_table(server)
        started = time.perf_counter()
        api.post("/resource-groups/etl/scale", json={"instances": 1}).raise_for_status()
        while time.perf_counter() - started < 600:
            if any(t["acked_at"] for p in api.get("/processes").json() for t in p["tasks"]):
                return time.perf_counter() - started
            time.sleep(0.2)
        raise SystemExit("no task was acked within 10 minutes")


def make_pending_table(server: Any) -> None:
    """A table of the server's internal catalog in group etl, with enough small files to be pending."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    catalog_ = load_catalog("lake", type="rest", uri=f"{server.url}/iceberg", token=server.token, warehouse="lake")
    catalog_.create_namespace("db")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    table = catalog_.create_table(
        "db.t",
        schema=schema,
        properties={"self-optimizing.group": "etl", "self-optimizing.minor.trigger.file-count": "3"},
    )
    for i in range(4):
        table.append(pa.table({"id": list(range(i * 10, i * 10 + 10)), "v": ["x"] * 10}, schema=schema))


if __name__ == "__main__":
    main()
