"""Compaction throughput of lakewarden's optimizer vs a raw Spark Parquet read+write (zstd) of the same bytes.

A table of many small files is planned by lakewarden's own evaluator and planner, and the resulting
task is run by the optimizer's executor (Iceberg's rewrite, scoped and tuned by the plan). In the
same run and SparkSession, the same data files are read and written as plain zstd Parquet. Both are
timed as MB of input per second. Goal: optimizer >= 1.0x the raw copy.

    .venv/bin/python bench/compaction_throughput.py [--files 240] [--rows-per-file 40000] [--parallelism 2]
        [--threads 4]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import bar_chart, write
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

MB = 1024 * 1024
GOAL = 1.0  # the optimizer's rate over the raw copy's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=240)
    parser.add_argument("--rows-per-file", type=int, default=40_000)
    parser.add_argument("--parallelism", type=int, default=2, help="Spark cores (local[N])")
    # a group that becomes one file is read as one split, on one core: like Iceberg's own action (which runs
    # up to 5 groups at once), an optimizer keeps the cores busy with more tasks in flight than cores
    parser.add_argument("--threads", type=int, default=4, help="optimizer threads (tasks in flight)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lakewarden-bench-"))
    try:
        spec = CatalogSpec("bench", "sql", {"uri": f"sqlite:///{tmp}/catalog.db", "warehouse": str(tmp / "warehouse")})
        initialize_catalog(spec)
        spark = build_spark_session(
            [spec], master=f"local[{args.parallelism}]", driver_memory="4g", app_name="lakewarden-bench"
        )
        spark.sql("CREATE NAMESPACE bench.db")
        spark.sql(
            "CREATE TABLE bench.db.small (id BIGINT, name STRING, amount DOUBLE, day DATE, note STRING) "
            "USING iceberg TBLPROPERTIES ('write.parquet.compression-codec'='zstd')"
        )
        rows = args.files * args.rows_per_file
        print(f"writing {args.files} small files ({rows:,} rows)…", flush=True)
        (
            spark.range(rows)
            .selectExpr(
                "id",
                "concat('name-', CAST(id % 100003 AS STRING)) AS name",
                "rand(7) * 1000 AS amount",
                "date_add(DATE '2026-01-01', CAST(id % 365 AS INT)) AS day",
                "sha2(CAST(id AS STRING), 256) AS note",
            )
            .repartition(args.files)
            .writeTo("bench.db.small")
            .append()
        )
        paths = [r[0] for r in spark.sql("SELECT file_path FROM bench.db.small.files").collect()]
        input_bytes = sum(r[0] for r in spark.sql("SELECT file_size_in_bytes FROM bench.db.small.files").collect())

        def raw_copy() -> float:
            out = tmp / "raw"
            started = time.perf_counter()
            spark.read.parquet(*paths).write.option("compression", "zstd").mode("overwrite").parquet(str(out))
            seconds = time.perf_counter() - started
            shutil.rmtree(out, ignore_errors=True)
            return seconds

        print("warming up the JVM…", flush=True)
        spark.read.parquet(*paths[:20]).write.mode("overwrite").parquet(str(tmp / "warm"))
        raw_first = raw_copy()

        with opened_catalog(spec) as catalog:
            table = catalog.load_table(("db", "small"))
            config = OptimizingConfig.of(table.properties)
            files = snapshot_files(table, ManifestCache())
            now = int(time.time() * 1000)
            planned = plan_process("db.small", table, files, config, OptimizingClock(now, now, now))
            connection = CatalogConnection(name=spec.name, type=spec.type, properties=dict(spec.properties))
            tasks = [
                Assignment(process_id=1, task_id=i, attempt=1, type=t.type, catalog=connection, input=t.input)
                for i, t in enumerate(planned.tasks, start=1)
            ]
        print(
            f"optimizing: {planned.type}, {len(files.data)} files in {len(tasks)} task(s), {input_bytes / MB:.0f} MB…"
        )
        started = time.perf_counter()
        # as an optimizer runs them: its threads each run one task at a time
        with ThreadPoolExecutor(args.threads) as pool:
            outputs = list(pool.map(lambda task: execute_task(spark, task, "bench"), tasks))
        assert all(isinstance(o, OptimizingResult) for o in outputs)
        files_out = sum(o.files_out for o in outputs if isinstance(o, OptimizingResult))
        optimizer_seconds = time.perf_counter() - started
        raw_second = raw_copy()
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    raw_seconds = (raw_first + raw_second) / 2
    optimizer_rate = input_bytes / MB / optimizer_seconds
    raw_rate = input_bytes / MB / raw_seconds
    ratio = optimizer_rate / raw_rate
    print(f"input: {len(paths)} files, {input_bytes / MB:.1f} MB; optimizer wrote {files_out} file(s)")
    print(f"optimizer (Iceberg rewrite via lakewarden's plan): {optimizer_seconds:.1f} s = {optimizer_rate:.1f} MB/s")
    print(
        f"raw Spark Parquet read+write (zstd):             {raw_seconds:.1f} s = {raw_rate:.1f} MB/s "
        f"(runs {raw_first:.1f} s, {raw_second:.1f} s)"
    )
    print(f"ratio: {ratio:.2f}x (goal >= {GOAL}x)")
    write(
        "compaction_throughput",
        {
            "files": len(paths),
            "input_mb": round(input_bytes / MB, 1),
            "parallelism": args.parallelism,
            "threads": args.threads,
            "optimizer_seconds": round(optimizer_seconds, 2),
            "optimizer_mb_per_s": round(optimizer_rate, 1),
            "raw_seconds": [round(raw_first, 2), round(raw_second, 2)],
            "raw_mb_per_s": round(raw_rate, 1),
            "ratio": round(ratio, 3),
            "goal_ratio": GOAL,
            "met": ratio >= GOAL,
            "optimizer_outputs": [o.model_dump(mode="json") for o in outputs],
        },
    )
    bar_chart(
        "compaction_throughput",
        f"Compaction of {input_bytes / MB:.0f} MB in {len(paths)} files: {ratio:.2f}x",
        {"lakewarden optimizer": optimizer_rate, "raw Spark zstd copy": raw_rate},
        "MB/s of input",
    )


if __name__ == "__main__":
    main()
