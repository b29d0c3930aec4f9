"""Evaluating a table of 100,000 data files: cold (every manifest parsed) and after a small commit.

The table is built from metadata alone: pyiceberg fast-appends DataFile entries (paths of files that
need not exist) in several commits, so each commit writes its own manifest, as streaming writers do.
Goal: after a small commit, evaluation <= 0.2 s (the new manifest is the only one parsed).

    .venv/bin/python bench/evaluator_scale.py [--files 100000] [--partitions 1000] [--commits 20]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import bar_chart, write
from lakewarden.domain.evaluator import OptimizingClock, evaluate_table
from lakewarden.domain.files import group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "day", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))


def data_file(i: int, partitions: int, rng: random.Random) -> DataFile:
    day = f"d{i % partitions:05d}"
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"/bench/data/day={day}/f{i:07d}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(day),
        record_count=10_000,
        file_size_in_bytes=rng.choice([rng.randint(1 << 20, 15 << 20), rng.randint(100 << 20, 200 << 20)]),
        spec_id=0,
    )


def append(table, files: list[DataFile]) -> None:  # type: ignore[no-untyped-def]
    with table.transaction() as tx, tx.update_snapshot().fast_append() as fast_append:
        for f in files:
            fast_append.append_data_file(f)


def evaluate(table, cache: ManifestCache) -> tuple[float, int, int]:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    files = snapshot_files(table, cache)
    verdict = evaluate_table(
        files.snapshot_id,
        group_by_partition(files.data, files.deletes),
        OptimizingConfig.of(table.properties),
        OptimizingClock(int(time.time() * 1000), int(time.time() * 1000), int(time.time() * 1000)),
    )
    return time.perf_counter() - started, files.manifests_read, len(verdict.pending)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--commits", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/warehouse")
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.wide", SCHEMA, partition_spec=SPEC)
        per_commit = args.files // args.commits
        built = time.perf_counter()
        for c in range(args.commits):
            append(table, [data_file(c * per_commit + i, args.partitions, rng) for i in range(per_commit)])
            print(f"\rbuilding: {(c + 1) * per_commit:,} / {args.files:,} data files", end="", flush=True)
        print(f" ({time.perf_counter() - built:.0f} s)")

        cache = ManifestCache()
        table = catalog.load_table("bench.wide")
        cold, cold_read, pending = evaluate(table, cache)
        append(table, [data_file(args.files + i, args.partitions, rng) for i in range(10)])  # a small commit
        table = catalog.load_table("bench.wide")
        warm_runs = []
        for _ in range(5):
            seconds, _, _ = evaluate(table, cache)
            warm_runs.append(seconds)
        warm = min(warm_runs)
        load_started = time.perf_counter()
        catalog.load_table("bench.wide")
        load = time.perf_counter() - load_started

    cold_text = f"{cold:.2f} s ({cold_read} manifests parsed, {pending} partitions pending)"
    print(f"cold evaluation of {args.files:,} files: {cold_text}")
    print(f"after a small commit: {warm:.3f} s best of 5 (1 new manifest; goal <= 0.2 s); table load {load:.3f} s")
    write(
        "evaluator_scale",
        {
            "files": args.files,
            "partitions": args.partitions,
            "commits": args.commits,
            "cold_seconds": round(cold, 3),
            "cold_manifests_parsed": cold_read,
            "warm_seconds": round(warm, 4),
            "warm_runs": [round(w, 4) for w in warm_runs],
            "load_table_seconds": round(load, 4),
            "goal_warm_seconds": 0.2,
            "met": warm <= 0.2,
        },
    )
    bar_chart(
        "evaluator_scale",
        f"Evaluating a table of {args.files:,} data files",
        {"cold (every manifest)": cold, "after a small commit": warm, "table load": load},
        "seconds",
        goal=0.2,
    )


if __name__ == "__main__":
    main()
