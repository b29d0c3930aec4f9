"""One optimizer task against Iceberg's `rewrite_data_files` on the same shape of table, in one warm Spark session.

Where `small_files.py` measures a whole service (the server's planning, polls, bounded processes, commits
through the REST catalog), this isolates the data work of one task: identical tables of small files (--files,
written --per-append files at a time, so they have a manifest per append as streaming writers leave them, in
--partitions partitions) in a local SQL catalog; for each pair, lakewarden's planner plans one table and the
optimizer's executor runs its task, and `rewrite_data_files` compacts the other. The two alternate; the first
half of the --rounds warms the JVM and is not counted. Per table: wall seconds and CPU-seconds of the Python
process and of its JVM, planning included on both sides (lakewarden's planner, pyiceberg in this process, where
the server would run it; Iceberg's procedure plans in the JVM).

    .venv/bin/python bench/optimizer_task.py [--files 300] [--per-append 10] [--partitions 1] [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bar_chart, in_temporary_dir, write
from lakewarden.optimizer.cpu import process_cpu_seconds
from lakewarden.spark.session import build_spark_session
from tests.helpers import planned_process, run_task, spark_sql_catalog

PROPERTIES = "'self-optimizing.minor.trigger.file-count'='3', 'format-version'='2'"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--per-append", type=int, default=10)
    parser.add_argument(
        "--partitions", type=int, default=1, help="identity partitions; >1 writes a file of each per append instead"
    )
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    in_temporary_dir(lambda tmp: run(args, tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    spark: Any = build_spark_session(master="local[2]", driver_memory="2g", app_name="lakewarden-bench-task")
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    spec = spark_sql_catalog(spark, tmp, "bench")

    partitioned = args.partitions > 1
    per_append = args.partitions if partitioned else args.per_append  # partitioned: a file of each per append

    def make(name: str) -> None:
        columns = "id BIGINT, v STRING, p INT" if partitioned else "id BIGINT, v STRING"
        how = "PARTITIONED BY (p)" if partitioned else ""
        spark.sql(f"CREATE TABLE bench.db.{name} ({columns}) USING iceberg {how} TBLPROPERTIES ({PROPERTIES})")
        rows = 200
        for i in range(args.files // per_append):
            first = i * per_append * rows
            data = spark.range(first, first + per_append * rows).selectExpr("id", "repeat('x', 40) AS v")
            if partitioned:
                data = data.selectExpr("*", f"CAST(id % {args.partitions} AS INT) AS p").repartition("p")
            else:
                data = data.repartition(per_append)
            data.writeTo(f"bench.db.{name}").append()

    def measured(work: Callable[[], None]) -> dict[str, float]:
        py, jvm, wall = time.process_time(), process_cpu_seconds([jvm_pid]), time.perf_counter()
        work()
        return {
            "wall_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - py + process_cpu_seconds([jvm_pid]) - jvm,
        }

    def lakewarden(name: str) -> None:
        planned = planned_process(spec, f"bench.db.{name}")
        assert len(planned.tasks) == 1, "one task per table: the pair compares one task with one rewrite"
        result = run_task(spark, spec, planned.tasks[0].input.model_dump(mode="json"))
        assert getattr(result, "files_in", 0) == args.files, result

    def iceberg(name: str) -> None:
        options = "map('min-input-files', '3')"
        spark.sql(f"CALL bench.system.rewrite_data_files(table => 'db.{name}', options => {options})").collect()

    runs: dict[str, list[dict[str, float]]] = {"lakewarden task": [], "rewrite_data_files": []}
    for round_ in range(args.rounds):
        make(f"ours{round_}")
        make(f"theirs{round_}")
        pair = [
            ("lakewarden task", partial(lakewarden, f"ours{round_}")),
            ("rewrite_data_files", partial(iceberg, f"theirs{round_}")),
        ]
        for label, work in pair if round_ % 2 == 0 else reversed(pair):
            runs[label].append(measured(work))
        print(
            f"round {round_ + 1}: "
            + ", ".join(f"{k} {v[-1]['wall_s']:.3f} s / {v[-1]['cpu_s']:.2f} CPU-s" for k, v in runs.items()),
            flush=True,
        )
    spark.stop()

    counted = {k: v[args.rounds // 2 :] for k, v in runs.items()}
    median = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s")} for k, v in counted.items()}
    ours, theirs = median["lakewarden task"], median["rewrite_data_files"]
    ratio = {m: ours[m] / theirs[m] for m in ("wall_s", "cpu_s")}
    shape = f"{args.files} files ({per_append} per append, {args.partitions} partitions)"
    print(f"{shape}, warm medians of {len(counted['lakewarden task'])}:")
    for label, values in median.items():
        print(f"  {label}: {values['wall_s']:.3f} s, {values['cpu_s']:.2f} CPU-s")
    print(f"lakewarden / Iceberg: wall {ratio['wall_s']:.2f}x, CPU {ratio['cpu_s']:.2f}x")
    result: dict[str, Any] = {
        "files": args.files,
        "per_append": per_append,
        "partitions": args.partitions,
        "rounds": args.rounds,
        "runs": runs,
        "median": median,
        "ratio": {m: round(r, 3) for m, r in ratio.items()},
    }
    write("optimizer_task", result)
    bar_chart(
        "optimizer_task",
        f"One task of {args.files} small files: wall seconds",
        {k: v["wall_s"] for k, v in median.items()},
        "s",
    )


if __name__ == "__main__":
    main()
