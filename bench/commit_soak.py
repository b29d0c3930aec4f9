"""A long stream of commits into the REST catalog: does the server's memory level off, and does its share of a
commit's time stay flat as the tables' metadata grows?

A real `lakewarden server` (SQLite system database, internal catalog, no optimizer) takes `--commits` appends
spread over `--tables` tables by `--writers` pyiceberg threads and `--spark-writers` Spark threads (one local[2]
SparkSession with Iceberg's REST catalog pointed at the server; `INSERT INTO`), each writer on its own tables
(each append: a data file, a manifest, a manifest list, a new metadata file and the pointer's
compare-and-swap). After each sample every table's snapshots but the newest `--keep-snapshots` are expired
(a REST `remove-snapshots` commit, as lakewarden's expire-snapshots would), each table's data files are compacted
into one (Spark's `rewrite_data_files`, as lakewarden's self-optimizing would; `--no-compact` leaves them), and
appends merge manifests past 100 (as Java's do): the tables' own metadata stops growing, so memory that still
grows would be the server's. (Without compaction each table's current manifests name every file it was ever
appended, and the manifest cache keeps them, as it should: they are live metadata.)
Every `--sample` commits the bench records the server's resident memory (/proc), its caches'
sizes (`lakewarden_metadata_cache_bytes`, `lakewarden_manifest_cache_bytes`), the server's time per commit in that
window (from its own request-duration histogram, so the client's parsing is not counted) and the client's.
Results and a plot (memory and latency against commits) land in bench/results/commit_soak.*.

    .venv/bin/python bench/commit_soak.py [--commits 10000] [--tables 10] [--writers 2] [--spark-writers 2]
        [--sample 500] [--keep-snapshots 100] [--no-compact] [--cache-mib N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import LAKE_ALONE, admin_token, line_charts, running_server, server_pid, write

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
COMMIT_ROUTE = 'method="POST",route="/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}",'


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def scrape(root: str, token: str) -> dict[str, float]:
    """The server's metadata cache and its commit route's total seconds and count so far."""
    text = httpx.get(f"{root}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    found = {"cache_bytes": 0.0, "manifest_cache_bytes": 0.0, "commit_seconds": 0.0, "commits": 0.0}
    for line in text.splitlines():
        if line.startswith("lakewarden_metadata_cache_bytes "):
            found["cache_bytes"] = float(line.split()[1])
        elif line.startswith("lakewarden_manifest_cache_bytes "):
            found["manifest_cache_bytes"] = float(line.split()[1])
        elif line.startswith("lakewarden_http_request_duration_seconds_sum{") and COMMIT_ROUTE in line:
            found["commit_seconds"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("lakewarden_http_request_duration_seconds_count{") and COMMIT_ROUTE in line:
            found["commits"] += float(line.rsplit(" ", 1)[1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--writers", type=int, default=2, help="pyiceberg writers")
    parser.add_argument("--spark-writers", type=int, default=2, help="Spark writers (0: none)")
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument(
        "--keep-snapshots",
        type=int,
        default=100,
        help="after each sample, expire each table's snapshots but the newest N, as lakewarden's expire-snapshots "
        "would (0: keep all)",
    )
    parser.add_argument(
        "--no-compact",
        dest="compact",
        action="store_false",
        help="leave the data files as written (by default, after each sample, each table's are rewritten into one)",
    )
    parser.add_argument(
        "--cache-mib", type=int, default=None, help="bound both metadata caches (MiB; default: the server's defaults)"
    )
    args = parser.parse_args()
    config = LAKE_ALONE
    if args.cache_mib is not None:
        bound = f"{{max-size: {args.cache_mib}MiB}}"
        config = f"  metadata-cache: {bound}\n  manifest-cache: {bound}\n{LAKE_ALONE}"
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, config) as root:
        soak(args, tmp, root)


def soak(args: argparse.Namespace, tmp: str, root: str) -> None:
    token = admin_token(tmp)
    pid = server_pid(tmp)
    catalog = RestCatalog("lake", uri=f"{root}/iceberg", warehouse="lake", token=token)
    catalog.create_namespace("soak")
    for t in range(args.tables):
        # as Iceberg's Java writers (Spark) do by default, appends merge manifests past 100
        catalog.create_table(f"soak.t{t}", SCHEMA, properties={"commit.manifest-merge.enabled": "true"})
    done = 0
    claimed = 0
    client_seconds = 0.0
    by_kind = {"pyiceberg": 0, "spark": 0}
    lock = threading.Lock()
    failures: list[str] = []
    writers = args.writers + args.spark_writers

    def claim() -> bool:
        """A commit left to make (writers stop once `--commits` are claimed)."""
        nonlocal claimed
        with lock:
            claimed += 1
            return bool(claimed <= args.commits)

    def counted(kind: str, started: float) -> None:
        nonlocal done, client_seconds
        with lock:
            done += 1
            by_kind[kind] += 1
            client_seconds += time.perf_counter() - started

    def writer(w: int) -> None:
        own = RestCatalog("lake", uri=f"{root}/iceberg", warehouse="lake", token=token)
        tables = [own.load_table(f"soak.t{t}") for t in range(w, args.tables, writers)]
        i = 0
        while claim():
            table = tables[i % len(tables)]
            started = time.perf_counter()
            try:
                table.append(pa.table({"id": pa.array([i], pa.int64())}))
            except Exception as exc:  # a lost race is retried by pyiceberg; anything else is reported
                failures.append(f"{type(exc).__name__}: {exc}")
                tables[i % len(tables)] = own.load_table(table.name())
                continue
            finally:
                i += 1
            counted("pyiceberg", started)

    def spark_writer(w: int, spark: Any) -> None:
        names = [f"lake.soak.t{t}" for t in range(w, args.tables, writers)]
        i = 0
        while claim():
            started = time.perf_counter()
            try:
                spark.sql(f"INSERT INTO {names[i % len(names)]} VALUES ({i})")
            except Exception as exc:
                failures.append(f"spark: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            finally:
                i += 1
            counted("spark", started)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(args.writers)]
    spark = soak_spark(root, token) if args.spark_writers or args.compact else None
    if args.spark_writers:
        threads += [
            threading.Thread(target=spark_writer, args=(args.writers + w, spark)) for w in range(args.spark_writers)
        ]
    samples: list[dict[str, Any]] = []
    before = scrape(root, token)
    last_client, last_done, started = 0.0, 0, time.monotonic()
    print(
        f"{args.commits:,} appends to {args.tables} tables by {args.writers} pyiceberg and {args.spark_writers} "
        f"Spark writers; server pid {pid}"
    )
    print(f"start: rss {rss_mb(pid):.0f} MB")
    for thread in threads:
        thread.start()
    next_sample = args.sample
    while any(t.is_alive() for t in threads) or done >= next_sample:
        time.sleep(0.5)
        if done < next_sample and any(t.is_alive() for t in threads):
            continue
        now = scrape(root, token)
        with lock:
            commits, client = done, client_seconds
        window = max(1.0, now["commits"] - before["commits"])
        sample = {
            "commits": commits,
            "snapshots_per_table": commits / args.tables,
            "rss_mb": rss_mb(pid),
            "metadata_cache_mb": now["cache_bytes"] / 1e6,
            "manifest_cache_mb": now["manifest_cache_bytes"] / 1e6,
            "server_ms_per_commit": (now["commit_seconds"] - before["commit_seconds"]) / window * 1000,
            "client_ms_per_commit": (client - last_client) / max(1, commits - last_done) * 1000,
            "commits_per_s": (commits - last_done) / (time.monotonic() - started),
        }
        samples.append(sample)
        print(
            f"{commits:>6,} commits: rss {sample['rss_mb']:.0f} MB, "
            f"metadata cache {sample['metadata_cache_mb']:.1f} MB, "
            f"manifest cache {sample['manifest_cache_mb']:.1f} MB, "
            f"server {sample['server_ms_per_commit']:.1f} ms/commit, client {sample['client_ms_per_commit']:.1f} "
            f"ms/commit, {sample['commits_per_s']:.1f} commits/s"
        )
        before, last_client, last_done, started = now, client, commits, time.monotonic()
        next_sample = commits + args.sample
        if args.compact:
            failures.extend(compact(spark, args.tables))
        if args.keep_snapshots:
            expire(root, token, args.tables, args.keep_snapshots)
        if not any(t.is_alive() for t in threads):
            break
    for thread in threads:
        thread.join()
    half = samples[len(samples) // 2]
    result = {
        "commits": done,
        "commits_by_writer": by_kind,
        "tables": args.tables,
        "writers": args.writers,
        "spark_writers": args.spark_writers,
        "cache_mib": args.cache_mib,
        "keep_snapshots": args.keep_snapshots,
        "compact": args.compact,
        "failures": failures[:20],
        "failure_count": len(failures),
        "samples": samples,
        "rss_growth_second_half_mb": samples[-1]["rss_mb"] - half["rss_mb"],
        "rss_growth_first_half_mb": half["rss_mb"] - samples[0]["rss_mb"],
    }
    print(
        f"rss grew {result['rss_growth_first_half_mb']:.0f} MB in the first half and "
        f"{result['rss_growth_second_half_mb']:.0f} MB in the second; {len(failures)} failed appends; "
        f"commits by pyiceberg {by_kind['pyiceberg']:,}, by Spark {by_kind['spark']:,}"
    )
    write("commit_soak", result)
    plot(samples)


def compact(spark: Any, tables: int) -> list[str]:
    """Each table's data files rewritten into one, by Spark (its commit retries a race with the writers)."""
    failed = []
    for t in range(tables):
        try:
            spark.sql(
                f"CALL lake.system.rewrite_data_files(table => 'soak.t{t}', options => map('rewrite-all', 'true'))"
            )
        except Exception as exc:
            failed.append(f"compaction: {type(exc).__name__}: {str(exc)[:300]}")
    return failed


def expire(root: str, token: str, tables: int, keep: int) -> None:
    """Each table's snapshots but the newest `keep` removed by a REST commit (`remove-snapshots`), so that the
    tables' own metadata stops growing and what is left to grow would be the server's."""
    headers = {"Authorization": f"Bearer {token}"}
    prefix = httpx.get(f"{root}/iceberg/v1/config", params={"warehouse": "lake"}, headers=headers).json()
    base = f"{root}/iceberg/v1/{prefix['overrides']['prefix']}/namespaces/soak/tables"
    for t in range(tables):
        metadata = httpx.get(f"{base}/t{t}", headers=headers, timeout=60).json()["metadata"]
        newest = sorted(metadata.get("snapshots", []), key=lambda s: s["sequence-number"])[-keep:]
        kept = {s["snapshot-id"] for s in newest} | {metadata.get("current-snapshot-id")}
        old = [s["snapshot-id"] for s in metadata.get("snapshots", []) if s["snapshot-id"] not in kept]
        if old:
            body = {"requirements": [], "updates": [{"action": "remove-snapshots", "snapshot-ids": old}]}
            httpx.post(f"{base}/t{t}", json=body, headers=headers, timeout=60).raise_for_status()


def soak_spark(root: str, token: str) -> Any:
    """A local[2] SparkSession whose catalog `lake` is the server's internal catalog (Iceberg's REST catalog)."""
    import os

    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import build_spark_session

    os.environ.setdefault("LAKEWARDEN_SPARK_LOG_LEVEL", "ERROR")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    properties = httpx.get(f"{root}/api/v1/catalogs/lake", headers={"Authorization": f"Bearer {token}"}).json()
    spec = CatalogSpec("lake", "internal", {**properties["properties"], "token": token})
    loopback = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.showConsoleProgress": "false",
    }
    return build_spark_session(
        [spec], master="local[2]", driver_memory="2g", app_name="commit-soak", extra_conf=loopback
    )


def plot(samples: list[dict[str, Any]]) -> None:
    def series(key: str) -> list[float]:
        return [s[key] for s in samples]

    memory = {
        "server resident memory": series("rss_mb"),
        "metadata cache (estimate)": series("metadata_cache_mb"),
        "manifest cache (estimate)": series("manifest_cache_mb"),
    }
    latency = {"server": series("server_ms_per_commit"), "client (pyiceberg append)": series("client_ms_per_commit")}
    line_charts(
        "commit_soak",
        "commits",
        series("commits"),
        [("Server memory", "MB", memory, False), ("Time per commit", "ms", latency, False)],
    )


if __name__ == "__main__":
    main()
