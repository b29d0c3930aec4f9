"""An upsert stream with equality and position deletes, into three copies of one table, side by side:

  lakewarden   evaluated after every batch, and optimized (in process, by the optimizer's own executor) when
               the evaluator says so
  scheduled    Iceberg's rewrite_data_files procedure on the whole table every --every batches, with its
               default options, as teams run it from a scheduler
  never        never compacted

Each batch upserts rows by key as a Flink upsert sink does (an equality-delete file per partition, then the
new versions appended; tests/cdc.py), and every third batch also deletes rows with Spark's merge-on-read
DELETE (position deletes). One batch stands for a minute of streaming: the scheduled job runs every few
minutes, and lakewarden's time triggers see the same clock.

Reported, as ratios: query latency of each copy against an ideally compacted copy (the final rows written
once), measured twice: as the stream left the copies, and at rest (once the stream has stopped, after the
scheduled job's next run and lakewarden's evaluation an hour later); Spark CPU-seconds spent compacting (the
JVM's own CPU time during compaction, per run too), and write amplification (bytes compaction wrote / bytes
the stream wrote).
Goal: lakewarden <= 1.1x ideal latency, <= half the scheduled job's compaction CPU, write amplification <= 2.5.

    .venv/bin/python bench/cdc_compaction.py [--rows 200000] [--batches 32] [--upserts 2000] [--every 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import bar_chart, bench_catalog, in_temporary_dir, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import NothingToDo
from lakewarden.domain.evaluator import OptimizingClock
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.optimizer.executor import execute_task
from lakewarden.protocol.messages import Assignment, CatalogConnection
from lakewarden.protocol.results import OptimizingResult
from lakewarden.services.processes.self_optimizing import plan_process
from tests.cdc import upsert

MB = 1024 * 1024
COPIES = ("lakewarden", "scheduled", "never")
MINUTE_MS = 60_000
PROPS = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.target-file-size-bytes": str(4 * MB),
    "self-optimizing.target-size": str(4 * MB),
}
QUERIES = {
    "full scan": "SELECT count(*), sum(xxhash64(id, cat, v)) FROM {t}",
    "per category": "SELECT cat, count(*), max(v) FROM {t} GROUP BY cat",
    "point lookups": "SELECT id, v FROM {t} WHERE id IN ({keys})",
}


class JvmCpu:
    """CPU-seconds the Spark JVM (driver and local executors) has used so far, from /proc."""

    def __init__(self, spark: Any) -> None:
        self.pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        self.tick = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    # the stream ends two batches after the scheduled job's last run, where a look at a random moment lands on
    # average: not right after it
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--upserts", type=int, default=2_000)
    parser.add_argument("--every", type=int, default=5, help="the scheduled job runs every this many batches")
    args = parser.parse_args()
    in_temporary_dir(lambda tmp: run(args, tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    spec, spark = bench_catalog(tmp, "lakewarden-bench-cdc")
    cpu = JvmCpu(spark)
    props = ", ".join(f"'{k}'='{v}'" for k, v in PROPS.items())
    for copy in COPIES:
        spark.sql(
            f"CREATE TABLE bench.db.{copy} (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
            f"TBLPROPERTIES ({props})"
        )
        spark.sql(
            f"INSERT INTO bench.db.{copy} SELECT id, concat('c', CAST(id % 4 AS STRING)), "
            f"sha2(CAST(id AS STRING), 256) FROM range(0, {args.rows})"
        )
    rng = random.Random(11)
    compaction = dict.fromkeys(COPIES, 0.0)
    runs: dict[str, list[float]] = {"lakewarden": [], "scheduled": []}  # CPU-s of each run that did something
    results: list[OptimizingResult] = []
    cache = ManifestCache()
    last_minor = 0
    next_id = args.rows
    started = time.perf_counter()
    for batch in range(1, args.batches + 1):
        keys = rng.sample(range(next_id), args.upserts * 3 // 4) + list(range(next_id, next_id + args.upserts // 4))
        next_id += args.upserts // 4
        rows = [(k, f"c{k % 4}", f"b{batch}-{k}") for k in keys]
        for copy in COPIES:
            upsert(spark, f"bench.db.{copy}", rows, "id, cat, v", "id", lambda row: f"cat={row[1]}")
            if batch % 3 == 0:
                spark.sql(f"DELETE FROM bench.db.{copy} WHERE id % 211 = {batch}")
        now = batch * MINUTE_MS

        before = cpu.seconds()
        done, kind = optimize(spark, spec, cache, now, last_minor)
        compaction["lakewarden"] += cpu.seconds() - before
        if done:
            runs["lakewarden"].append(round(cpu.seconds() - before, 2))
        results += done
        if done and kind in ("minor", "full"):
            last_minor = now

        if batch % args.every == 0:
            before = cpu.seconds()
            spark.sql("CALL bench.system.rewrite_data_files(table => 'db.scheduled')")
            compaction["scheduled"] += cpu.seconds() - before
            runs["scheduled"].append(round(cpu.seconds() - before, 2))
        print(
            f"\rbatch {batch}/{args.batches}: lakewarden ran {len(done)} task(s), "
            f"{time.perf_counter() - started:.0f} s",
            end="",
            flush=True,
        )
    print()

    final = {r[0] for r in spark.sql("SELECT id FROM bench.db.never").collect()}
    lookups = ", ".join(str(k) for k in rng.sample(sorted(final), 50))
    spark.sql(
        f"CREATE TABLE bench.db.ideal USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ({props}) "
        "AS SELECT * FROM bench.db.never"
    )
    every = (*COPIES, "ideal")
    same_rows(spark, every)
    latency = query_seconds(spark, every, lookups)
    layout = {c: files_of(spark, f"bench.db.{c}") for c in every}

    # then the stream stops, and each copy gets what its schedule does next: the scheduled job's next run, and
    # lakewarden's evaluation an hour later (when minor.trigger.interval lets leftover small files be merged)
    resting = dict.fromkeys(COPIES, 0.0)
    before = cpu.seconds()
    rested, _ = optimize(spark, spec, cache, (args.batches + 61) * MINUTE_MS, last_minor)
    resting["lakewarden"] = cpu.seconds() - before
    before = cpu.seconds()
    spark.sql("CALL bench.system.rewrite_data_files(table => 'db.scheduled')")
    resting["scheduled"] = cpu.seconds() - before
    same_rows(spark, every)
    at_rest = query_seconds(spark, every, lookups)
    rest_layout = {c: files_of(spark, f"bench.db.{c}") for c in every}
    ingested = written_by(spark, "bench.db.never", lambda s: True)
    amplification = {
        "lakewarden": written_by(spark, "bench.db.lakewarden", lambda s: "lakewarden.process-id" in s) / ingested,
        "scheduled": written_by(spark, "bench.db.scheduled", lambda s: s.get("_operation") == "replace") / ingested,
    }
    ratio = {c: latency[c] / latency["ideal"] for c in COPIES}
    rest_ratio = {c: at_rest[c] / at_rest["ideal"] for c in COPIES}
    cpu_ratio = compaction["lakewarden"] / compaction["scheduled"] if compaction["scheduled"] else float("inf")
    spark.stop()

    print(
        f"stream: {args.batches} batches of {args.upserts} upserts into {args.rows:,} rows; "
        f"{ingested / MB:.1f} MB written"
    )
    for title, seconds, ratios, files in (
        ("as the stream left them", latency, ratio, layout),
        ("at rest (the scheduled job's next run; lakewarden an hour later)", at_rest, rest_ratio, rest_layout),
    ):
        print(title)
        for c in every:
            data, pos, eq = files[c]
            extra = f" = {ratios[c]:.2f}x ideal" if c in ratios else ""
            print(
                f"  {c:<11} queries {seconds[c] * 1000:.0f} ms{extra}; "
                f"files: {data} data, {pos} position-delete, {eq} equality-delete"
            )
    print(
        f"compaction CPU: lakewarden {compaction['lakewarden']:.1f} s, scheduled {compaction['scheduled']:.1f} s "
        f"= {cpu_ratio:.2f}x (goal <= 0.5x)"
    )
    for c, spent in runs.items():
        print(f"  {c} runs (CPU-s each): {', '.join(f'{x:.1f}' for x in spent)}")
    print(
        f"write amplification: lakewarden {amplification['lakewarden']:.2f} (goal <= 2.5), "
        f"scheduled {amplification['scheduled']:.2f}"
    )
    print(
        f"compaction CPU at rest: lakewarden {resting['lakewarden']:.1f} s ({len(rested)} task(s)), "
        f"scheduled {resting['scheduled']:.1f} s"
    )
    print(
        f"latency: lakewarden {ratio['lakewarden']:.2f}x ideal as the stream left it, "
        f"{rest_ratio['lakewarden']:.2f}x at rest (goal <= 1.1x)"
    )
    write(
        "cdc_compaction",
        {
            "rows": args.rows,
            "batches": args.batches,
            "upserts": args.upserts,
            "scheduled_every": args.every,
            "query_seconds": {c: round(v, 4) for c, v in latency.items()},
            "latency_vs_ideal": {c: round(v, 3) for c, v in ratio.items()},
            "files": {c: file_counts(v) for c, v in layout.items()},
            "at_rest": {
                "query_seconds": {c: round(v, 4) for c, v in at_rest.items()},
                "latency_vs_ideal": {c: round(v, 3) for c, v in rest_ratio.items()},
                "files": {c: file_counts(v) for c, v in rest_layout.items()},
                "compaction_cpu_seconds": {c: round(v, 2) for c, v in resting.items()},
            },
            "compaction_cpu_seconds": {c: round(v, 2) for c, v in compaction.items()},
            "cpu_lakewarden_vs_scheduled": round(cpu_ratio, 3),
            "compaction_cpu_seconds_per_run": runs,
            "ingested_mb": round(ingested / MB, 2),
            "write_amplification": {c: round(v, 3) for c, v in amplification.items()},
            "lakewarden_tasks": len(results),
            "goals": {"latency_vs_ideal": 1.1, "cpu_vs_scheduled": 0.5, "write_amplification": 2.5},
        },
    )
    bar_chart(
        "cdc_compaction",
        "Query latency vs an ideally compacted copy (upsert stream)",
        {**{c: ratio[c] for c in COPIES}, **{f"{c} at rest": rest_ratio[c] for c in COPIES}},
        "x ideal",
        goal=1.1,
    )


def optimize(
    spark: Any, spec: CatalogSpec, cache: ManifestCache, now: int, last_minor: int
) -> tuple[list[OptimizingResult], str | None]:
    """What lakewarden does for the table after a batch: evaluate, and when something is pending, plan a
    process and run its tasks stage by stage."""
    table = open_catalog(spec).load_table(("db", "lakewarden"))
    config = OptimizingConfig.of(table.properties)
    clock = OptimizingClock(now, last_minor_ms=last_minor, last_full_ms=now)
    try:
        planned = plan_process("db.lakewarden", table, snapshot_files(table, cache), config, clock)
    except NothingToDo:
        return [], None
    connection = CatalogConnection(name=spec.name, type=spec.type, properties=dict(spec.properties))
    done = []
    process_id = now // MINUTE_MS
    for task_id, task in sorted(enumerate(planned.tasks, start=1), key=lambda t: t[1].stage):
        work = Assignment(
            process_id=process_id, task_id=task_id, attempt=1, type=task.type, catalog=connection, input=task.input
        )
        result = execute_task(spark, work, "bench")
        assert isinstance(result, OptimizingResult)
        done.append(result)
    return done, planned.type


def same_rows(spark: Any, copies: tuple[str, ...]) -> None:
    checks = {c: spark.sql(QUERIES["full scan"].format(t=f"bench.db.{c}")).first() for c in copies}
    assert len({tuple(v) for v in checks.values() if v is not None}) == 1, f"the copies differ: {checks}"


def query_seconds(
    spark: Any, copies: tuple[str, ...], keys: str, rounds: int = 7, warm_up: int = 2
) -> dict[str, float]:
    """Per copy, the median over `rounds` of running every query once. The copies take turns within each round,
    each round starting with the next copy, after `warm_up` rounds that are not counted: the JVM compiles the
    queries' code as they run, so a copy measured first, or alone, would pay for the warming of all of them."""
    for c in copies:
        spark.sql(f"REFRESH TABLE bench.db.{c}")
    runs: dict[str, list[float]] = {c: [] for c in copies}
    for number in range(warm_up + rounds):
        for c in copies[number % len(copies) :] + copies[: number % len(copies)]:
            started = time.perf_counter()
            for sql in QUERIES.values():
                spark.sql(sql.format(t=f"bench.db.{c}", keys=keys)).collect()
            if number >= warm_up:
                runs[c].append(time.perf_counter() - started)
    return {c: statistics.median(v) for c, v in runs.items()}


def file_counts(files: tuple[int, int, int]) -> dict[str, int]:
    return dict(zip(("data", "position_deletes", "equality_deletes"), files, strict=True))


def files_of(spark: Any, table: str) -> tuple[int, int, int]:
    rows = {r[0]: r[1] for r in spark.sql(f"SELECT content, count(*) FROM {table}.files GROUP BY content").collect()}
    return rows.get(0, 0), rows.get(1, 0), rows.get(2, 0)


def written_by(spark: Any, table: str, which: Any) -> int:
    """Bytes of data and delete files added by the snapshots `which(summary)` selects."""
    total = 0
    for operation, summary in spark.sql(f"SELECT operation, summary FROM {table}.snapshots").collect():
        summary = {**summary, "_operation": operation}
        if which(summary):
            total += int(summary.get("added-files-size", 0))  # data and delete files
    return total


if __name__ == "__main__":
    main()
