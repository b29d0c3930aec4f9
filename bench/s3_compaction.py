"""Compaction on S3 (through Hadoop's S3A and lakewarden's StorageFileIO) against floors measured in the same run.

1. Throughput: a table of `--files` files on an S3 server (moto's, in a process of its own) is planned by
   lakewarden's evaluator and planner and rewritten by the optimizer's executor (`--threads` tasks in flight);
   the same files are read and written as plain zstd Parquet by Spark on the same S3, both through S3A
   (`--runs` optimizer runs, each between two raw copies; medians compared). Goal: the optimizer >= 0.9x the
   raw copy, as MB of input per second.
2. Small files on a slow store: a streaming-shaped table of `--small-files` files of about 20 KB is compacted on
   the local disk, and the same files on the same S3 behind a proxy that adds `--latency-ms` to every request
   (tests/netproxy.py). Reported as files per second, with the optimizer's read-ahead of small objects
   (StorageFileIO's `lakewarden.read-parallelism`) off (1) and at `--read-parallelism`. Goal: the slow store
   within 1.5x of the local disk's time.

    .venv/bin/python bench/s3_compaction.py [--files 60] [--rows-per-file 20000] [--small-files 1000]
        [--latency-ms 20] [--runs 3] [--threads 4] [--parallelism 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import bar_chart, free_port, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.evaluator import OptimizingClock
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.metadata.catalogs import initialize_catalog, opened_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.optimizer.executor import execute_task
from lakewarden.protocol.messages import Assignment, CatalogConnection
from lakewarden.protocol.results import OptimizingResult
from lakewarden.services.processes.self_optimizing import plan_process
from lakewarden.spark.session import build_spark_session
from tests.netproxy import LatencyProxy

MB = 1024 * 1024
BUCKET = "bench"
KEYS = {"s3.region": "us-east-1", "s3.path-style-access": "true", "s3.access-key-id": "x", "s3.secret-access-key": "x"}


def s3_server(port: int, log: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    import boto3

    boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    ).create_bucket(Bucket=BUCKET)
    return server


def sql_catalog(
    tmp: Path, name: str, warehouse: str, endpoint: str | None = None, read_parallelism: int | None = None
) -> CatalogSpec:
    properties = {"uri": f"sqlite:///{tmp}/{name}.db", "warehouse": warehouse}
    if endpoint is not None:
        properties |= {"s3.endpoint": endpoint, **KEYS}
    if read_parallelism is not None:
        properties["lakewarden.read-parallelism"] = str(read_parallelism)
    spec = CatalogSpec(name, "sql", properties)
    initialize_catalog(spec)
    return spec


def compact(spark: Any, spec: CatalogSpec, table: str, threads: int) -> tuple[float, int, int]:
    """Plan the table as lakewarden does and run its tasks as an optimizer does: seconds, files in, files out."""
    with opened_catalog(spec) as catalog:
        loaded = catalog.load_table(("db", table))
        config = OptimizingConfig.of(loaded.properties)
        files = snapshot_files(loaded, ManifestCache())
        now = int(time.time() * 1000)
        planned = plan_process(f"db.{table}", loaded, files, config, OptimizingClock(now, now, now))
    connection = CatalogConnection(name=spec.name, type=spec.type, properties=dict(spec.properties))
    tasks = [
        Assignment(process_id=1, task_id=i, attempt=1, type=t.type, catalog=connection, input=t.input)
        for i, t in enumerate(planned.tasks, start=1)
    ]
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        outputs = list(pool.map(lambda task: execute_task(spark, task, "bench"), tasks))
    seconds = time.perf_counter() - started
    assert all(isinstance(o, OptimizingResult) for o in outputs)
    return seconds, len(files.data), sum(o.files_out for o in outputs if isinstance(o, OptimizingResult))


def write_table(spark: Any, name: str, files: int, rows_per_file: int) -> None:
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, name STRING, amount DOUBLE, day DATE, note STRING) USING iceberg "
        "TBLPROPERTIES ('write.parquet.compression-codec'='zstd', 'self-optimizing.minor.trigger.file-count'='2')"
    )
    (
        spark.range(files * rows_per_file)
        .selectExpr(
            "id",
            "concat('name-', CAST(id % 100003 AS STRING)) AS name",
            "rand(7) * 1000 AS amount",
            "date_add(DATE '2026-01-01', CAST(id % 365 AS INT)) AS day",
            "sha2(CAST(id AS STRING), 256) AS note",
        )
        .repartition(files)
        .writeTo(name)
        .append()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--rows-per-file", type=int, default=20_000)
    parser.add_argument("--small-files", type=int, default=1_000)
    parser.add_argument("--small-rows", type=int, default=300, help="rows per small file (about 20 KB each)")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3, help="optimizer runs, each between two raw copies")
    parser.add_argument("--threads", type=int, default=4, help="optimizer threads (tasks in flight)")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark cores (local[N])")
    parser.add_argument("--read-parallelism", type=int, default=16, help="splits a small-file group is read in")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lakewarden-bench-s3-"))
    port = free_port()
    server = s3_server(port, tmp / "s3.log")
    endpoint = f"http://127.0.0.1:{port}"
    proxy = LatencyProxy("127.0.0.1", port, args.latency_ms / 1000)
    result: dict[str, Any] = {}
    try:
        s3 = sql_catalog(tmp, "s3", f"s3://{BUCKET}/wh", endpoint)
        local = sql_catalog(tmp, "local", str(tmp / "local"))
        slow = {
            n: sql_catalog(tmp, f"slow{n}", f"s3://{BUCKET}/slow", proxy.endpoint, n)
            for n in sorted({1, args.read_parallelism})
        }
        s3a = {  # the raw copy reads and writes with the session's own S3A settings
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": "x",
            "spark.hadoop.fs.s3a.secret.key": "x",
            "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }
        spark = build_spark_session(
            [s3, local, *slow.values()],
            master=f"local[{args.parallelism}]",
            driver_memory="4g",
            app_name="lakewarden-bench-s3",
            extra_conf={
                **s3a,
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            },
        )
        for catalog in ("s3", "local", *(spec.name for spec in slow.values())):
            spark.sql(f"CREATE NAMESPACE {catalog}.db")

        # 1. throughput on S3
        print(f"writing {args.files} files ({args.files * args.rows_per_file:,} rows) to S3…", flush=True)
        write_table(spark, "s3.db.big", args.files, args.rows_per_file)
        paths = [r[0].replace("s3://", "s3a://") for r in spark.sql("SELECT file_path FROM s3.db.big.files").collect()]
        input_bytes = sum(r[0] for r in spark.sql("SELECT file_size_in_bytes FROM s3.db.big.files").collect())

        def raw_copy(run: int) -> float:
            started = time.perf_counter()
            spark.read.parquet(*paths).write.option("compression", "zstd").mode("overwrite").parquet(
                f"s3a://{BUCKET}/raw-{run}"
            )
            return time.perf_counter() - started

        raw_copy(0)  # warms the JVM and S3A's clients
        metadata_big = spark.sql("SELECT file FROM s3.db.big.metadata_log_entries ORDER BY timestamp DESC").first()
        assert metadata_big is not None
        raw_runs: list[float] = [raw_copy(1)]
        optimizer_runs: list[float] = []
        for run in range(args.runs):  # interleaved, so that a slow moment of the machine weighs on both alike
            # each run compacts the same files, registered again as a table of its own
            name = f"big{run}"
            spark.sql(f"CALL s3.system.register_table(table => 'db.{name}', metadata_file => '{metadata_big[0]}')")
            seconds, files_in, files_out = compact(spark, s3, name, args.threads)
            optimizer_runs.append(seconds)
            raw_runs.append(raw_copy(run + 2))
        optimizer_seconds, raw_seconds = statistics.median(optimizer_runs), statistics.median(raw_runs)
        optimizer_rate, raw_rate = input_bytes / MB / optimizer_seconds, input_bytes / MB / raw_seconds
        ratio = optimizer_rate / raw_rate
        print(f"S3: {files_in} files, {input_bytes / MB:.1f} MB; optimizer wrote {files_out} file(s)")
        print(
            f"  optimizer: {optimizer_seconds:.1f} s = {optimizer_rate:.1f} MB/s "
            f"(median of {', '.join(f'{s:.1f}' for s in optimizer_runs)})"
        )
        print(
            f"  raw Spark zstd copy on S3: {raw_seconds:.1f} s = {raw_rate:.1f} MB/s "
            f"(median of {', '.join(f'{s:.1f}' for s in raw_runs)})"
        )
        print(f"  ratio: {ratio:.2f}x (goal >= 0.9x)", flush=True)
        result["throughput"] = {
            "files": files_in,
            "input_mb": round(input_bytes / MB, 1),
            "optimizer_seconds": [round(s, 2) for s in optimizer_runs],
            "raw_seconds": [round(s, 2) for s in raw_runs],
            "ratio": round(ratio, 3),
            "goal": 0.9,
            "met": ratio >= 0.9,
        }

        # 2. small files: the local disk against S3 behind a proxy adding latency to every request
        print(f"writing {args.small_files} small files to the local disk and to S3…", flush=True)
        write_table(spark, "local.db.stream", args.small_files, args.small_rows)
        write_table(spark, "s3.db.stream", args.small_files, args.small_rows)
        small_bytes = sum(r[0] for r in spark.sql("SELECT file_size_in_bytes FROM s3.db.stream.files").collect())
        metadata = spark.sql("SELECT file FROM s3.db.stream.metadata_log_entries ORDER BY timestamp DESC").first()
        assert metadata is not None
        local_seconds, small_in, _ = compact(spark, local, "stream", args.threads)
        slow_runs: dict[int, float] = {}
        for parallelism, spec in slow.items():
            # each compacts the table as it was written, registered in a catalog of its own
            spark.sql(f"CALL {spec.name}.system.register_table(table => 'db.stream', metadata_file => '{metadata[0]}')")
            before = proxy.requests
            slow_runs[parallelism], _, _ = compact(spark, spec, "stream", args.threads)
            print(
                f"  slow store, read-ahead of {parallelism}: {slow_runs[parallelism]:.1f} s, "
                f"{proxy.requests - before} requests",
                flush=True,
            )
        best = min(slow_runs.values())
        slow_ratio = best / local_seconds
        print(
            f"small files ({small_in} of {small_bytes / small_in / 1024:.0f} KB): local disk {local_seconds:.1f} s "
            f"= {small_in / local_seconds:.0f} files/s; S3 with {args.latency_ms:g} ms a request: {best:.1f} s = "
            f"{small_in / best:.0f} files/s; {slow_ratio:.2f}x the local time (goal <= 1.5x)"
        )
        result["small_files"] = {
            "files": small_in,
            "kb_per_file": round(small_bytes / small_in / 1024, 1),
            "latency_ms": args.latency_ms,
            "local_seconds": round(local_seconds, 2),
            "slow_seconds_by_read_parallelism": {str(k): round(v, 2) for k, v in slow_runs.items()},
            "local_files_per_s": round(small_in / local_seconds, 1),
            "slow_files_per_s": round(small_in / best, 1),
            "slow_over_local": round(slow_ratio, 3),
            "goal": 1.5,
            "met": slow_ratio <= 1.5,
        }
        spark.stop()
    finally:
        proxy.close()
        server.terminate()
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    write("s3_compaction", {**result, "threads": args.threads, "parallelism": args.parallelism})
    bar_chart(
        "s3_compaction",
        f"Compaction on S3: {result['throughput']['ratio']:.2f}x a raw copy; small files on a slow store "
        f"{result['small_files']['slow_over_local']:.2f}x the local time",
        {
            "optimizer on S3 (MB/s)": optimizer_rate,
            "raw copy on S3 (MB/s)": raw_rate,
            "small files, local (files/s)": result["small_files"]["local_files_per_s"],
            "small files, slow S3 (files/s)": result["small_files"]["slow_files_per_s"],
        },
        "rate",
    )


if __name__ == "__main__":
    main()
