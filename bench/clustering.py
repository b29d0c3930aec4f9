"""What clustering buys a selective query: data files read before and after a full optimizing, side by side.

Four copies of the same rows (x and y uniform over 0..9,999, written as --files appends that each span every
value, as a stream writes them):

  raw       never optimized
  bin-pack  full optimizing with plain bin-packing (self-optimizing.full.rewrite-all-files)
  sort      full optimizing of a table whose Iceberg sort order is x
  z-order   full optimizing with self-optimizing.z-order.columns = 'x, y'

Each optimized copy is planned by lakewarden's evaluator and planner and rewritten by the optimizer's executor in
process. For each selective query: the data files Iceberg's planning keeps (its pruning by column bounds,
which Spark's scan uses too) and Spark's query time (median of 5).

    .venv/bin/python bench/clustering.py [--rows 2000000] [--files 40] [--target-mb 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import bar_chart, bench_catalog, in_temporary_dir, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.evaluator import OptimizingClock
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.optimizer.executor import execute_task
from lakewarden.protocol.messages import Assignment, CatalogConnection
from lakewarden.protocol.results import OptimizingResult
from lakewarden.services.processes.self_optimizing import plan_process

MB = 1024 * 1024
DAY_MS = 86_400_000
COPIES = ("raw", "bin-pack", "sort", "z-order")
QUERIES = {
    "x < 100": "x < 100",
    "y < 100": "y < 100",
    "x, y < 1000": "x < 1000 AND y < 1000",
    "x = 5000": "x = 5000",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=40, help="appends, one file each")
    parser.add_argument("--target-mb", type=int, default=8, help="self-optimizing.target-size")
    args = parser.parse_args()
    in_temporary_dir(lambda tmp: run(args, tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    spec, spark = bench_catalog(tmp, "lakewarden-bench-cluster")
    props = {
        "format-version": "2",
        "write.target-file-size-bytes": str(args.target_mb * MB),
        "self-optimizing.target-size": str(args.target_mb * MB),
        "self-optimizing.full.trigger.interval": str(DAY_MS),
    }
    extra = {"z-order": {"self-optimizing.z-order.columns": "x, y"}}
    per_file = args.rows // args.files
    for copy in COPIES:
        name = table_name(copy)
        properties = ", ".join(f"'{k}'='{v}'" for k, v in {**props, **extra.get(copy, {})}.items())
        spark.sql(
            f"CREATE TABLE {name} (id BIGINT, x INT, y INT, payload STRING) USING iceberg TBLPROPERTIES ({properties})"
        )
        if copy == "sort":
            spark.sql(f"ALTER TABLE {name} WRITE LOCALLY ORDERED BY x")  # writers sort their own files only
    started = time.perf_counter()
    for i in range(args.files):
        for copy in COPIES:
            spark.sql(
                f"INSERT INTO {table_name(copy)} SELECT /*+ REPARTITION(1) */ id, "
                f"CAST(pmod(xxhash64(id, 1), 10000) AS INT), CAST(pmod(xxhash64(id, 2), 10000) AS INT), "
                f"sha2(CAST(id AS STRING), 256) FROM range({i * per_file}, {(i + 1) * per_file})"
            )
        print(f"\rwriting: {i + 1}/{args.files} appends, {time.perf_counter() - started:.0f} s", end="", flush=True)
    print()

    optimizing: dict[str, dict[str, Any]] = {}
    for copy in COPIES[1:]:
        begun = time.perf_counter()
        results = optimize(spark, spec, copy)
        took = time.perf_counter() - begun
        optimizing[copy] = {
            "seconds": round(took, 1),
            "files_in": sum(r.files_in for r in results),
            "files_out": sum(r.files_out for r in results),
        }
        counts = f"{optimizing[copy]['files_in']} -> {optimizing[copy]['files_out']} files"
        print(f"{copy}: full optimizing {took:.1f} s, {counts}")

    checks = {
        c: spark.sql(f"SELECT count(*), sum(xxhash64(id, x, y, payload)) FROM {table_name(c)}").first() for c in COPIES
    }
    assert len({tuple(v) for v in checks.values() if v is not None}) == 1, f"the copies differ: {checks}"

    files_read: dict[str, dict[str, int]] = {}
    seconds: dict[str, dict[str, float]] = {}
    totals: dict[str, int] = {}
    for copy in COPIES:
        table = open_catalog(spec).load_table(("db", table_name(copy).rsplit(".", 1)[1]))
        totals[copy] = len(list(table.scan().plan_files()))
        files_read[copy] = {q: len(list(table.scan(row_filter=f).plan_files())) for q, f in QUERIES.items()}
        seconds[copy] = {q: query_seconds(spark, table_name(copy), f) for q, f in QUERIES.items()}
    spark.stop()

    print(f"{args.rows:,} rows in {args.files} appends; target-size {args.target_mb} MiB")
    header = f"  {'copy':<9} {'files':>5}  " + "  ".join(f"{q:>16}" for q in QUERIES)
    print(header + "    (data files read / query ms)")
    for copy in COPIES:
        cells = "  ".join(f"{files_read[copy][q]:>6} / {seconds[copy][q] * 1000:>6.0f} ms" for q in QUERIES)
        print(f"  {copy:<9} {totals[copy]:>5}  {cells}")
    share = {c: sum(files_read[c].values()) / max(1, sum(files_read["bin-pack"].values())) for c in COPIES}
    print("files read over the four queries, vs bin-pack: " + ", ".join(f"{c} {share[c]:.2f}x" for c in COPIES))
    write(
        "clustering",
        {
            "rows": args.rows,
            "appends": args.files,
            "target_mb": args.target_mb,
            "queries": QUERIES,
            "data_files": totals,
            "files_read": files_read,
            "query_seconds": {c: {q: round(v, 4) for q, v in s.items()} for c, s in seconds.items()},
            "files_read_vs_bin_pack": {c: round(v, 3) for c, v in share.items()},
            "optimizing": optimizing,
        },
    )
    bar_chart(
        "clustering",
        "Data files read by four selective queries, vs a bin-packed copy",
        share,
        "x bin-pack",
    )


def table_name(copy: str) -> str:
    return f"bench.db.{copy.replace('-', '_')}"


def optimize(spark: Any, spec: CatalogSpec, copy: str) -> list[OptimizingResult]:
    """A full optimizing of one copy, planned by lakewarden and run by the optimizer's executor."""
    short = table_name(copy).rsplit(".", 1)[1]
    table = open_catalog(spec).load_table(("db", short))
    now = int(time.time() * 1000)
    clock = OptimizingClock(now, last_minor_ms=now, last_full_ms=0)
    planned = plan_process(
        f"db.{short}", table, snapshot_files(table, ManifestCache()), OptimizingConfig.of(table.properties), clock
    )
    connection = CatalogConnection(name=spec.name, type=spec.type, properties=dict(spec.properties))
    results = []
    for task_id, task in sorted(enumerate(planned.tasks, start=1), key=lambda t: t[1].stage):
        work = Assignment(
            process_id=1, task_id=task_id, attempt=1, type=task.type, catalog=connection, input=task.input
        )
        result = execute_task(spark, work, "bench")
        assert isinstance(result, OptimizingResult)
        results.append(result)
    return results


def query_seconds(spark: Any, table: str, where: str) -> float:
    """The median over 5 runs (after one to warm up) of a filtered aggregation."""
    runs = []
    for attempt in range(6):
        started = time.perf_counter()
        spark.sql(f"SELECT count(*), max(payload) FROM {table} WHERE {where}").collect()
        if attempt:
            runs.append(time.perf_counter() - started)
    return statistics.median(runs)


if __name__ == "__main__":
    main()
