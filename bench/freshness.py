"""Freshness under ingest: query latency over time on the same stream written three ways.

A real `lakewarden server` (SQLite, its REST catalog `bench`, one local Spark optimizer started by the
server's `local` container) manages the tables. One Spark writer streams the same small appends and
merge-on-read MERGE updates into two tables: `optimized` (lakewarden keeps it compacted) and `raw`
(self-optimizing off). A third, `ideal`, is rebuilt from `raw` as fully compacted files before each
measurement: the best layout the same data could have at that moment. Every few rounds the same
aggregation query runs on all three (median of 3), timed with the tables' file counts. Goal on 2
cores: optimized <= 1.2x ideal while raw >= 3x ideal (medians over the run, after the first point).

    .venv/bin/python bench/freshness.py [--rounds 60] [--rows 4000] [--measure-every 6]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import RESULTS, admin_token, running_server, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.spark.session import build_spark_session

TABLES = ("optimized", "raw", "ideal")
QUERY = "SELECT key % 50 AS k, count(*), sum(amount), max(payload) FROM {} WHERE amount > 10 GROUP BY 1"
MOR = "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"


def files(spark: Any, table: str) -> tuple[int, int]:
    rows = dict(spark.sql(f"SELECT content, count(*) FROM {table}.files GROUP BY content").collect())
    return int(rows.get(0, 0)), int(rows.get(1, 0)) + int(rows.get(2, 0))


def latency(spark: Any, table: str) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        spark.sql(QUERY.format(table)).collect()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(spark: Any, started: float, round_: int) -> dict[str, Any]:
    spark.sql("INSERT OVERWRITE bench.f.ideal SELECT * FROM bench.f.raw")  # the same rows, fully compacted
    point: dict[str, Any] = {"round": round_, "elapsed_s": round(time.monotonic() - started, 1)}
    for table in TABLES:
        name = f"bench.f.{table}"
        spark.sql(f"REFRESH TABLE {name}")
        data, deletes = files(spark, name)
        point[table] = {"latency_ms": round(latency(spark, name), 1), "data_files": data, "delete_files": deletes}
    return point


def plot(points: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    x = [p["elapsed_s"] for p in points]
    for table, color in zip(TABLES, ("tab:green", "tab:red", "tab:blue"), strict=True):
        top.plot(x, [p[table]["latency_ms"] for p in points], marker="o", label=table, color=color)
        bottom.plot(
            x, [p[table]["data_files"] + p[table]["delete_files"] for p in points], marker="o", label=table, color=color
        )
    top.set_ylabel("query latency (ms, median of 3)")
    top.set_title("Freshness under ingest: the same stream, three layouts")
    top.legend()
    bottom.set_ylabel("data + delete files")
    bottom.set_xlabel("seconds into the stream")
    bottom.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--rows", type=int, default=4000, help="rows per append")
    parser.add_argument("--measure-every", type=int, default=6)
    args = parser.parse_args()
    settings = (
        "  evaluator: {interval: 1s, recheck-interval: 5s}\n"
        "catalogs: [{name: bench, type: internal}]\n"
        "resource-groups: [{name: default, container: local, properties: {instances: '1', memory: 2g}}]\n"
    )
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, settings) as root:
        spark = build_spark_session(
            [CatalogSpec("bench", "internal", {"uri": f"{root}/iceberg", "token": admin_token(tmp)})],
            app_name="lakewarden-bench-writer",
            driver_memory="2g",
        )
        spark.sql("CREATE NAMESPACE bench.f")
        for table in TABLES:
            optimizing = (
                "'self-optimizing.minor.trigger.file-count'='4', 'self-optimizing.min-plan-interval'='0'"
                if table == "optimized"
                else "'self-optimizing.enabled'='false'"
            )
            spark.sql(
                f"CREATE TABLE bench.f.{table} (id BIGINT, key BIGINT, amount DOUBLE, payload STRING) "
                f"USING iceberg PARTITIONED BY (bucket(8, id)) TBLPROPERTIES ({MOR}, {optimizing})"
            )
        started = time.monotonic()
        points = []
        for round_ in range(1, args.rounds + 1):
            start = (round_ - 1) * args.rows
            batch = (
                f"SELECT id, id * 7 AS key, rand({round_}) * 100 AS amount, sha2(CAST(id AS STRING), 256) "
                f"AS payload FROM range({start}, {start + args.rows})"
            )
            spark.sql(batch).createOrReplaceTempView("batch")
            spark.sql("CACHE TABLE batch")
            for table in ("optimized", "raw"):
                spark.sql(f"INSERT INTO bench.f.{table} SELECT * FROM batch")
            spark.sql("UNCACHE TABLE batch")
            if round_ % 3 == 0:  # merge-on-read updates: position deletes in both tables
                changed = f"SELECT id FROM range(0, {start + args.rows}, 97)"
                for table in ("optimized", "raw"):
                    for _ in range(10):  # a MERGE that lost to a concurrent compaction is retried
                        try:
                            spark.sql(
                                f"MERGE INTO bench.f.{table} t USING ({changed}) s ON t.id = s.id "
                                f"WHEN MATCHED THEN UPDATE SET t.amount = t.amount + 1"
                            )
                            break
                        except Exception as exc:
                            if "ValidationException" not in str(exc) and "CommitFailed" not in str(exc):
                                raise
            if round_ % args.measure_every == 0:
                point = measure(spark, started, round_)
                points.append(point)
                tables = "  ".join(
                    f"{t} {point[t]['latency_ms']:7.0f} ms ({point[t]['data_files']}+{point[t]['delete_files']} files)"
                    for t in TABLES
                )
                print(f"round {round_:3d} @ {point['elapsed_s']:6.1f}s  {tables}", flush=True)
        # the stream has stopped: let lakewarden catch up once, then the last word
        api = httpx.Client(
            base_url=f"{root}/api/v1", timeout=30, headers={"Authorization": f"Bearer {admin_token(tmp)}"}
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and api.get("/tables/bench/f/optimized").json()["status"] != "idle":
            time.sleep(1)
        final = measure(spark, started, args.rounds)
        spark.stop()

    def ratio(point: dict[str, Any], table: str) -> float:
        return float(point[table]["latency_ms"]) / max(1.0, float(point["ideal"]["latency_ms"]))

    steady = points[1:] or points
    medians = {t: round(statistics.median(ratio(p, t) for p in steady), 2) for t in ("optimized", "raw")}
    finals = {t: round(ratio(final, t), 2) for t in ("optimized", "raw")}
    met = medians["optimized"] <= 1.2 and medians["raw"] >= 3.0
    result = {
        "options": vars(args),
        "points": points,
        "final": final,
        "median_ratio_to_ideal": medians,
        "final_ratio_to_ideal": finals,
        "goals": {"optimized_max_ratio": 1.2, "raw_min_ratio": 3.0},
        "goals_met": met,
    }
    print(
        f"median latency vs ideal: optimized {medians['optimized']}x (goal <= 1.2x), raw {medians['raw']}x "
        f"(goal >= 3x); after the stream: optimized {finals['optimized']}x, raw {finals['raw']}x"
    )
    write("freshness", result)
    plot([*points, final], RESULTS / "freshness.png")
    print(f"plot written to {RESULTS / 'freshness.png'}")


if __name__ == "__main__":
    main()
