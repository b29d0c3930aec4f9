"""Compaction of real tables of every partition layout, major and full optimizing, and a concurrent writer."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.helpers import PROPS, checksum, running_optimizer, table_status, wait_for
from tests.servers import ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
LAYOUTS = {
    "by_identity": "PARTITIONED BY (cat)",
    "by_day": "PARTITIONED BY (days(ts))",
    "by_bucket": "PARTITIONED BY (bucket(2, id))",
    "by_truncate": "PARTITIONED BY (truncate(1, cat))",
    "flat": "",
}


def counts(spark: SparkSession, table: str) -> tuple[int, int]:
    spark.sql(f"REFRESH TABLE {table}")
    rows = {r[0]: r[1] for r in spark.sql(f"SELECT content, count(*) FROM {table}.files GROUP BY content").collect()}
    return rows.get(0, 0), rows.get(1, 0) + rows.get(2, 0)


def run_optimizer_until(api: httpx.Client, server: ServerProcess, spark: SparkSession, done: Any) -> Any:
    with running_optimizer(server, spark, parallelism=2):
        return wait_for("optimizing to finish", done, timeout=240)


def write(spark: SparkSession, table: str, rounds: int) -> None:
    for i in range(rounds):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b'), "
            f"TIMESTAMP '2026-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id % 2 AS INT)), 'v{i}' "
            f"FROM range({i * 50}, {i * 50 + 50})"
        )


def test_every_layout_is_compacted_with_data_unchanged(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    server, api = lake
    before: dict[str, tuple[int, int]] = {}
    files_before: dict[str, tuple[int, int]] = {}
    for name, layout in LAYOUTS.items():
        table = f"local.db.{name}"
        spark.sql(
            f"CREATE TABLE {table} (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg {layout} "
            f"TBLPROPERTIES ({PROPS})"
        )
        write(spark, table, rounds=4)
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
        spark.sql(
            f"MERGE INTO {table} t USING (SELECT id FROM range(0, 200, 5)) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.v = 'merged'"
        )
        before[name] = checksum_with_ts(spark, table)
        files_before[name] = counts(spark, table)
        assert files_before[name][1] > 0, f"{name}: merge-on-read wrote no delete files"
    api.post("/catalogs/local/refresh")
    for name in LAYOUTS:
        shown = table_status(api, name, "pending")
        assert shown["evaluation"]["type"] == "minor", (name, shown["evaluation"])
        assert all("fragment(s)" in " ".join(p["reasons"]) for p in shown["evaluation"]["partitions"] if p["type"])

    def all_done() -> bool:
        processes = api.get("/processes").json()
        finished = {p["table"] for p in processes if p["status"] == "success"}
        return all(f"local.db.{name}" in finished for name in LAYOUTS)

    run_optimizer_until(api, server, spark, all_done)
    for name in LAYOUTS:
        table = f"local.db.{name}"
        assert checksum_with_ts(spark, table) == before[name], name
        data_after, deletes_after = counts(spark, table)
        assert data_after < files_before[name][0], (name, files_before[name], data_after)
        assert deletes_after < files_before[name][1], (name, files_before[name], deletes_after)


def checksum_with_ts(spark: SparkSession, table: str) -> tuple[int, int]:
    return checksum(spark, table, "id, cat, ts, v")


def test_major_and_full_are_executed(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    server, api = lake
    # every file is a segment (tiny target): only the delete ratio can make a major
    segments = (
        "'self-optimizing.target-size'='1024', 'self-optimizing.fragment-ratio'='1024', "
        "'self-optimizing.min-target-size-ratio'='0.001'"
    )
    spark.sql(
        f"CREATE TABLE local.db.major (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({PROPS}, {segments})"
    )
    write(spark, "local.db.major", rounds=2)
    spark.sql("DELETE FROM local.db.major WHERE cat = 'a' AND id % 4 = 0")  # half the rows of every `a` file
    spark.sql(
        f"CREATE TABLE local.db.full (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
        f"TBLPROPERTIES ({PROPS}, 'self-optimizing.full.trigger.interval'='1')"
    )
    write(spark, "local.db.full", rounds=2)
    spark.sql(
        f"CREATE TABLE local.db.clustered (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({PROPS}, 'self-optimizing.full.trigger.interval'='1', "
        "'self-optimizing.z-order.columns'='cat, id, ts')"
    )
    write(spark, "local.db.clustered", rounds=2)
    expected = {t: checksum_with_ts(spark, f"local.db.{t}") for t in ("major", "full", "clustered")}
    major_files = counts(spark, "local.db.major")
    api.post("/catalogs/local/refresh")
    major = table_status(api, "major", "pending")
    assert major["evaluation"]["type"] == "major"
    assert [p["type"] for p in major["evaluation"]["partitions"]] == ["major", None]
    full = table_status(api, "full", "pending")
    assert full["evaluation"]["type"] == "full"

    def both() -> dict[str, Any] | None:
        ended = {p["table"]: p for p in api.get("/processes").json() if p["status"] != "running"}
        return ended if {"local.db.major", "local.db.full", "local.db.clustered"} <= set(ended) else None

    ended = run_optimizer_until(api, server, spark, both)
    assert ended["local.db.major"]["status"] == "success" and ended["local.db.major"]["type"] == "major"
    assert ended["local.db.full"]["status"] == "success" and ended["local.db.full"]["type"] == "full"
    for table, value in expected.items():
        assert checksum_with_ts(spark, f"local.db.{table}") == value
    data, deletes = counts(spark, "local.db.major")
    assert deletes == 0 < major_files[1]  # the over-ratio segments were rewritten without their deletes
    assert data <= major_files[0]
    assert counts(spark, "local.db.full") == (1, 0)  # everything rewritten into one file
    assert api.get("/tables/local/db/full").json()["last_full_optimizing_at"] is not None
    # the clustered table: each partition z-ordered whole (cat, an identity partition column, is dropped), and
    # remembered as clustered, so the next full optimizing (its interval passes at once) has nothing to do
    assert ended["local.db.clustered"]["status"] == "success" and ended["local.db.clustered"]["type"] == "full"
    assert counts(spark, "local.db.clustered") == (2, 0)

    def clustered_and_idle() -> dict[str, Any] | None:
        shown = api.get("/tables/local/db/clustered").json()
        reasons = " ".join((shown.get("evaluation") or {}).get("reasons", []))
        return shown if shown["status"] == "idle" and "every partition is clustered" in reasons else None

    shown = wait_for("the clustered table to be idle", clustered_and_idle, timeout=60)
    assert shown["evaluation"]["clustering"] == "z-order(id, ts)"
    assert len(api.get("/processes", params={"table": "local.db.clustered"}).json()) == 1


@pytest.mark.parametrize(
    ("catalog", "extra"),
    [("local", ""), ("lake", ", 'lakewarden.commit.conflict-strategy'='partition'")],
    ids=["sql-catalog", "internal-catalog-partition-strategy"],
)
def test_a_writer_committing_during_compaction_loses_nothing(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession, catalog: str, extra: str
) -> None:
    server, api = lake
    table = f"{catalog}.db.busy"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({PROPS}{extra})"
    )
    write(spark, table, rounds=6)
    api.post(f"/catalogs/{catalog}/refresh")
    wait_for("pending", lambda: api.get(f"/tables/{catalog}/db/busy").json()["status"] == "pending")

    stop = threading.Event()
    written: list[int] = []

    conflicts: list[str] = []

    def commit(statement: str) -> None:
        # like any writer, retry a commit that lost to a concurrent one (here: the compaction)
        for _ in range(10):
            try:
                spark.sql(statement)
                return
            except Exception as exc:
                if "ValidationException" not in str(exc) and "CommitFailed" not in str(exc):
                    raise
                conflicts.append(statement)
        raise AssertionError(f"gave up on {statement}")

    def writer() -> None:
        i = 1000
        while not stop.is_set() and i < 1030:
            commit(f"INSERT INTO {table} VALUES ({i}, 'a', TIMESTAMP '2026-01-01 00:00:00', 'late')")
            commit(f"DELETE FROM {table} WHERE id = {i - 1000}")  # rows the compaction may be rewriting
            written.append(i)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        process = run_optimizer_until(
            api,
            server,
            spark,
            lambda: next((p for p in api.get("/processes").json() if p["status"] == "success"), None),
        )
    finally:
        stop.set()
        thread.join(120)
    # a process whose files the writer changed under it failed on its stale plan, and the table was planned
    # again on its new snapshot until one went through
    assert process["status"] == "success", process
    for lost in (p for p in api.get("/processes").json() if p["status"] == "failed"):
        assert "ValidationException" in lost["fail_reason"] or "StalePlan" in lost["fail_reason"], lost
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(f"SELECT id FROM {table}").collect()
    ids = sorted(r[0] for r in rows)
    deleted = {i - 1000 for i in written}
    assert ids == sorted([i for i in range(300) if i not in deleted] + written)
