"""Scan planning through lakewarden's REST catalog (`scan-planning-mode=server`) against pyiceberg planning the
same scan itself, side by side in one run, for tables of 1,000, 10,000 and 100,000 data files.

The tables are written by pyiceberg's fast appends of file metadata alone (1,000 files a manifest, 100
partitions, bounds on `id` for each file): planning reads manifests, never data files, so no data file is
needed. Two scans of each table: a selective one (`id` in a range that 0.1% of the files' bounds reach) and
a non-selective one (every file). The client's planning runs on a fresh table object each time (pyiceberg
keeps no parsed manifests between scans). The server is measured four ways:
- cold: its first plan after a restart with `read-ahead: false`, so that nothing is parsed (a restart before
  each kind of scan; the median of `--cold-restarts` such restarts);
- restarted: its first plan after a restart with the defaults, once the start-up warm-up of the manifest
  cache is done (the tables committed last are read first);
- first: its first plan of the scan after the writes, the manifests read ahead as the commits landed;
- warm: the median of the next runs (answered from the cache of planning results).
Goal: warm server planning of the selective scan on the 100,000-file table >= 20x faster than client
planning, and never slower cold.

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

import httpx
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, write
from lakewarden.config import ACTION_INTERVALS

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


def scans(files: int) -> dict[str, str | None]:
    low = files * ROWS_PER_FILE // 2
    # ids that the bounds of 0.1% of the files reach (at least one file)
    return {"selective": f"id >= {low} and id < {low + max(1, files // 1000) * ROWS_PER_FILE}", "all": None}


def catalogs(url: str, token: str) -> tuple[RestCatalog, RestCatalog]:
    local = RestCatalog("lake", uri=f"{url}/iceberg", warehouse="lake", token=token)
    remote = RestCatalog(
        "lake", uri=f"{url}/iceberg", warehouse="lake", token=token, **{"scan-planning-mode": "server"}
    )
    return local, remote


def planner(catalog: RestCatalog, name: str, row_filter: str | None) -> Any:
    def plan() -> Any:
        table = catalog.load_table(name)
        return (table.scan(row_filter=row_filter) if row_filter is not None else table.scan()).plan_files()

    return plan


def read_ahead(url: str, token: str) -> float:
    metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    line = next(x for x in metrics.splitlines() if x.startswith("lakewarden_scan_planning_read_ahead_manifests_total "))
    return float(line.split()[1])


def settle(url: str, token: str) -> None:
    """Wait for a restarted server's start-up work (its local optimizer's Spark JVM) to end, so that a cold
    plan is measured against nothing parsed, not against a JVM starting on the same cores."""
    for _ in range(120):
        answer = httpx.get(
            f"{url}/api/v1/resource-groups/default/optimizers", headers={"Authorization": f"Bearer {token}"}
        )
        if answer.status_code == 200 and answer.json():
            time.sleep(5)
            return
        time.sleep(1)
    print("warning: no optimizer registered within 2 minutes; measuring anyway")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold-restarts", type=int, default=3, help="restarts for the cold plans (their median)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # pyiceberg 0.12 does not poll a `submitted` plan: the cold plan of the largest table must come back whole
    planning = "  scan-planning: {sync-timeout: 300s}\n"
    cold_planning = "  scan-planning: {sync-timeout: 300s, read-ahead: false}\n"
    # no maintenance either (the 100-manifest table would get a manifest rewrite): Spark jobs on the same cores
    # would be measured with the plans
    no_maintenance = "".join(f"  {action}: {{enabled: false}}\n" for action in ACTION_INTERVALS)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        with running_server(tmp, planning + no_maintenance) as url:
            token = admin_token(tmp)
            local, remote = catalogs(url, token)
            local.create_namespace("db")
            for files in sizes:
                started = time.perf_counter()
                # file metadata only: nothing for lakewarden's self-optimizing to compact
                table = local.create_table(
                    f"db.t{files}", SCHEMA, partition_spec=SPEC, properties={"self-optimizing.enabled": "false"}
                )
                fill(table, files)
                print(f"{files:,} files written in {time.perf_counter() - started:.0f} s")
            manifests = sum(-(-files // PER_MANIFEST) for files in sizes)
            deadline = time.monotonic() + 600
            while read_ahead(url, token) < manifests and time.monotonic() < deadline:
                time.sleep(0.5)
            print(f"{read_ahead(url, token):.0f} of {manifests} manifests read ahead as the commits landed")
            for files in sizes:
                name = f"db.t{files}"
                for label, row_filter in scans(files).items():
                    first, first_count = timed(planner(remote, name, row_filter))
                    warm_runs = [timed(planner(remote, name, row_filter))[0] for _ in range(args.runs)]
                    client_runs, client_count = [], 0
                    for _ in range(max(1, args.runs if files <= 10_000 else 2)):
                        seconds, client_count = timed(planner(local, name, row_filter))
                        client_runs.append(seconds)
                    assert first_count == client_count, (first_count, client_count)
                    warm, client = statistics.median(warm_runs), statistics.median(client_runs)
                    results[f"{files}-{label}"] = {
                        "files": files,
                        "scan": label,
                        "tasks": client_count,
                        "client_s": round(client, 4),
                        "server_first_s": round(first, 4),
                        "server_warm_s": round(warm, 4),
                        "first_speedup": round(client / first, 2),
                        "warm_speedup": round(client / warm, 2),
                    }
        colds: dict[str, list[float]] = {key: [] for key in results}
        for _ in range(args.cold_restarts):  # one sample per restart: their median
            for label in ("selective", "all"):
                with running_server(tmp, cold_planning + no_maintenance) as url:  # restarted: nothing parsed
                    settle(url, token)
                    _, remote = catalogs(url, token)
                    for files in sizes:
                        cold, count = timed(planner(remote, f"db.t{files}", scans(files)[label]))
                        assert count == results[f"{files}-{label}"]["tasks"]
                        colds[f"{files}-{label}"].append(cold)
        for key, result in results.items():
            cold = statistics.median(colds[key])
            result["server_cold_s"] = round(cold, 4)
            result["server_cold_runs_s"] = [round(c, 4) for c in colds[key]]
            result["cold_speedup"] = round(result["client_s"] / cold, 2)
        with running_server(tmp, planning + no_maintenance) as url:  # restarted, the cache warmed at start
            settle(url, token)
            deadline = time.monotonic() + 600
            while read_ahead(url, token) < manifests and time.monotonic() < deadline:
                time.sleep(0.5)
            _, remote = catalogs(url, token)
            for files in sizes:
                for label, row_filter in scans(files).items():
                    restarted, count = timed(planner(remote, f"db.t{files}", row_filter))
                    result = results[f"{files}-{label}"]
                    assert count == result["tasks"]
                    result["server_restarted_s"] = round(restarted, 4)
                    result["restarted_speedup"] = round(result["client_s"] / restarted, 2)
    for r in results.values():
        print(
            f"{r['files']:>7,} {r['scan']:<9} {r['tasks']:>7,} tasks: client {r['client_s']:.3f} s, "
            f"server cold {r['server_cold_s']:.3f} s ({r['cold_speedup']:.1f}x), "
            f"restarted {r['server_restarted_s']:.3f} s ({r['restarted_speedup']:.1f}x), "
            f"first {r['server_first_s']:.3f} s ({r['first_speedup']:.1f}x), "
            f"warm {r['server_warm_s']:.3f} s ({r['warm_speedup']:.1f}x)"
        )
    biggest = f"{max(sizes)}-selective"
    goal = results[biggest]
    slowest_cold = min(r["cold_speedup"] for r in results.values())
    print(
        f"goal: warm selective on {max(sizes):,} files {goal['warm_speedup']}x the client (>= 20x); "
        f"cold at worst {slowest_cold}x the client (>= 1x)"
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
