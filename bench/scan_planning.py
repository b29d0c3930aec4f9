"""Scan planning through lakewarden's REST catalog (`scan-planning-mode=server`) against pyiceberg planning the
same scan itself, side by side in one run, for tables of 1,000, 10,000 and 100,000 data files.

The tables are written by pyiceberg's fast appends of file metadata alone (1,000 files a manifest, 100
partitions, bounds on `id` for each file): planning reads manifests, never data files, so no data file is
needed. Two scans of each table: a selective one (`id` in a range that 0.1% of the files' bounds reach) and
a non-selective one (every file). The client's planning runs on a fresh table object each time (pyiceberg
keeps no parsed manifests between scans). The server is measured cold (its first plan of the table, with
its manifest cache empty) and warm (the median of the next runs). Goal: warm server planning of the
selective scan on the 100,000-file table >= 20x faster than the client planning it, and never slower cold.

    .venv/bin/python bench/scan_planning.py [--sizes 1000,10000,100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, write

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "day", LongType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day"))
ROWS_PER_FILE = 1000
PER_MANIFEST = 1000


def fill(table: Any, files: int) -> None:
    """`files` data files of ROWS_PER_FILE ids each, file i holding ids [i*R, (i+1)*R), in 100 partitions."""
    for start in range(0, files, PER_MANIFEST):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for i in range(start, min(files, start + PER_MANIFEST)):
                low, high = i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE - 1
                data_file = DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=f"{table.location()}/data/day={i % 100}/f{i:07d}.parquet",
                    file_format=FileFormat.PARQUET,
                    partition=Record(i % 100),
                    record_count=ROWS_PER_FILE,
                    file_size_in_bytes=1_000_000,
                    value_counts={1: ROWS_PER_FILE, 2: ROWS_PER_FILE},
                    null_value_counts={1: 0, 2: 0},
                    lower_bounds={1: low.to_bytes(8, "little", signed=True), 2: (i % 100).to_bytes(8, "little")},
                    upper_bounds={1: high.to_bytes(8, "little", signed=True), 2: (i % 100).to_bytes(8, "little")},
                )
                data_file.spec_id = 0
                append.append_data_file(data_file)


def timed(plan: Any) -> tuple[float, int]:
    started = time.perf_counter()
    count = sum(1 for _ in plan())
    return time.perf_counter() - started, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # pyiceberg 0.12 does not poll a `submitted` plan: the cold plan of the largest table must come back whole
    settings = "  scan-planning: {sync-timeout: 300s}\n"
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as url:
        token = admin_token(tmp)
        local = RestCatalog("lake", uri=f"{url}/iceberg", warehouse="lake", token=token)
        remote = RestCatalog(
            "lake", uri=f"{url}/iceberg", warehouse="lake", token=token, **{"scan-planning-mode": "server"}
        )
        local.create_namespace("db")
        results: dict[str, Any] = {}
        for files in sizes:
            name = f"db.t{files}"
            started = time.perf_counter()
            # file metadata only: nothing for lakewarden's self-optimizing to compact
            table = local.create_table(
                name, SCHEMA, partition_spec=SPEC, properties={"self-optimizing.enabled": "false"}
            )
            fill(table, files)
            time.sleep(5)  # the server's evaluator hears of every commit: let it finish before timing anything
            print(f"{files:,} files written in {time.perf_counter() - started:.0f} s")
            total = files * ROWS_PER_FILE
            low = total // 2
            scans = {
                # ids that the bounds of 0.1% of the files reach (at least one file)
                "selective": f"id >= {low} and id < {low + max(1, files // 1000) * ROWS_PER_FILE}",
                "all": None,
            }
            for label, row_filter in scans.items():

                def server_plan(f: Any = row_filter, name: str = name) -> Any:
                    table = remote.load_table(name)
                    return (table.scan(row_filter=f) if f is not None else table.scan()).plan_files()

                def client_plan(f: Any = row_filter, name: str = name) -> Any:
                    table = local.load_table(name)
                    return (table.scan(row_filter=f) if f is not None else table.scan()).plan_files()

                cold, cold_count = timed(server_plan)
                warm_runs = [timed(server_plan)[0] for _ in range(args.runs)]
                client_runs, client_count = [], 0
                for _ in range(max(1, args.runs if files <= 10_000 else 2)):
                    seconds, client_count = timed(client_plan)
                    client_runs.append(seconds)
                assert cold_count == client_count, (cold_count, client_count)
                warm, client = statistics.median(warm_runs), statistics.median(client_runs)
                key = f"{files}-{label}"
                results[key] = {
                    "files": files,
                    "scan": label,
                    "tasks": client_count,
                    "client_s": round(client, 4),
                    "server_cold_s": round(cold, 4),
                    "server_warm_s": round(warm, 4),
                    "warm_speedup": round(client / warm, 2),
                    "cold_speedup": round(client / cold, 2),
                }
                print(
                    f"  {label:<9} {client_count:>7,} tasks: client {client:.3f} s, server cold {cold:.3f} s "
                    f"({client / cold:.1f}x), warm {warm:.3f} s ({client / warm:.1f}x)"
                )
    biggest = f"{max(sizes)}-selective"
    goal = results[biggest]
    print(
        f"goal: warm selective on {max(sizes):,} files {goal['warm_speedup']}x the client (>= 20x), "
        f"cold {goal['cold_speedup']}x (>= 1x)"
    )
    write("scan_planning", {"runs": args.runs, "results": results, "goals": {"warm_speedup": 20, "cold_speedup": 1}})
    bar_chart(
        "scan_planning",
        "Scan planning: client time / server time (warm)",
        {k: v["warm_speedup"] for k, v in results.items()},
        "x faster than the client",
        goal=20,
    )


if __name__ == "__main__":
    main()
