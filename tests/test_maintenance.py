"""Maintenance actions on real tables, run by a real optimizer on Spark, planned by a real server."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.helpers import PROPS, assignment, checksum, open_lake, running_optimizer, spark_sql_catalog, wait_for
from tests.servers import FAST_EVALUATOR, MAINTENANCE_OFF, ServerProcess, cli, cli_json, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
QUIET = "'self-optimizing.enabled'='false'"  # these tables are only maintained, never compacted


def run(api: httpx.Client, table: str, action: str, **body: Any) -> int:
    """Run an action now through the API; returns the new process's id."""
    api.post("/catalogs/local/refresh")  # lakewarden knows the table (and its latest metadata)
    response = api.post(f"/tables/local/db/{table}/actions/{action}", json=body)
    assert response.status_code == 201, response.text
    return int(response.json()["process_id"])


def finished(api: httpx.Client, process_id: int) -> dict[str, Any]:
    return dict(
        wait_for(
            f"process {process_id} to end",
            lambda: (lambda p: p if p["status"] != "running" else None)(api.get(f"/processes/{process_id}").json()),
            timeout=180,
        )
    )


def run_on_optimizer(
    server: ServerProcess, spark: SparkSession, api: httpx.Client, table: str, action: str, **body: Any
) -> dict[str, Any]:
    process_id = run(api, table, action, **body)
    with running_optimizer(server, spark):
        process = finished(api, process_id)
    assert process["status"] == "success", process
    assert process["action"] == action and process["type"] == "manual"
    return process


def snapshot_ids(spark: SparkSession, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    return [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()]


def test_expire_snapshots_keeps_a_running_optimizing_process_base(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.ex (id BIGINT, cat STRING) USING iceberg TBLPROPERTIES ({PROPS}, "
        "'snapshot.keep.duration'='0min', 'snapshot.keep.min-count'='1')"
    )
    for i in range(4):
        spark.sql(f"INSERT INTO local.db.ex VALUES ({i}, 'a')")
    api.post("/catalogs/local/refresh")
    wait_for("pending", lambda: api.get("/tables/local/db/ex").json()["status"] == "pending")
    # an optimizer takes the optimizing task and sits on it: the process runs, planned on snapshot `base`
    token = api.post("/optimizer/register", json={"group": "default", "parallelism": 1}).json()["token"]
    assigned = api.post("/optimizer/poll", json={"token": token, "thread_id": 0, "timeout_seconds": 3}).json()
    base = assigned["input"]["snapshot_id"]
    for i in range(4, 6):  # the table moves on: `base` is no longer current
        spark.sql(f"INSERT INTO local.db.ex VALUES ({i}, 'b')")
    before = snapshot_ids(spark, "local.db.ex")
    assert len(before) == 6 and base in before
    api.post("/catalogs/local/refresh")
    wait_for("the new snapshot", lambda: api.get("/tables/local/db/ex").json()["current_snapshot_id"] == before[-1])

    process = run_on_optimizer(server, spark, api, "ex", "expire-snapshots")
    after = snapshot_ids(spark, "local.db.ex")
    assert base in after, "the running process's base snapshot was expired"
    assert after == [s for s in before if before.index(s) >= before.index(base)]  # older ones are gone
    result = process["summary"]
    assert result["snapshots_expired"] == before.index(base) > 0
    assert result["protected_snapshot_ids"] == [base]
    assert "snapshot(s) older than" in result["reasons"][0]
    assert spark.sql("SELECT count(*) FROM local.db.ex").first()[0] == 6  # type: ignore[index]
    spark.sql("ALTER TABLE local.db.ex SET TBLPROPERTIES ('self-optimizing.enabled'='false')")
    api.post("/catalogs/local/refresh")
    wait_for(
        "the new config", lambda: api.get("/tables/local/db/ex").json()["config"]["self-optimizing.enabled"] == "false"
    )
    api.post(f"/processes/{assigned['process_id']}/cancel")

    # once nothing protects them, everything but the newest snapshot goes; files of no snapshot are freed
    spark.sql("DELETE FROM local.db.ex WHERE id = 0")  # copy-on-write: rewrites a file, the old one is unreferenced
    process = run_on_optimizer(server, spark, api, "ex", "expire-snapshots")
    assert len(snapshot_ids(spark, "local.db.ex")) == 1
    assert process["summary"]["data_files_deleted"] >= 1 and process["summary"]["bytes_freed"] > 0
    assert spark.sql("SELECT count(*) FROM local.db.ex").first()[0] == 5  # type: ignore[index]


def test_expiry_never_deletes_outside_the_table_location(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession, tmp_path: Path
) -> None:
    """A data file outside the table's location (added by reference) is left alone when the snapshots
    that referenced it expire; the table's own unreferenced files go."""
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.refs (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, 'snapshot.keep.duration'='0min')"
    )
    outside = tmp_path / "shared-parquet"
    spark.range(0, 50).write.parquet(str(outside))
    spark.sql(f"CALL local.system.add_files(table => 'db.refs', source_table => '`parquet`.`{outside}`')")
    spark.sql("INSERT INTO local.db.refs SELECT id FROM range(50, 100)")
    spark.sql("INSERT OVERWRITE local.db.refs SELECT id FROM range(1000, 1010)")  # both files unreferenced now
    outside_files = sorted(outside.glob("*.parquet"))
    assert outside_files

    process = run_on_optimizer(server, spark, api, "refs", "expire-snapshots")
    summary = process["summary"]
    assert summary["skipped_outside_location"] == len(outside_files)
    assert summary["data_files_deleted"] >= 1 and summary["bytes_freed"] > 0  # the table's own old file
    assert all(path.exists() for path in outside_files)
    spark.sql("REFRESH TABLE local.db.refs")
    assert sorted(r[0] for r in spark.sql("SELECT id FROM local.db.refs").collect()) == list(range(1000, 1010))


def test_orphan_files_dry_run_and_clean(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    """With the table's min-existing-time of 60 minutes, which Iceberg's procedure would refuse (< 24 h)."""
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.orph (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, "
        "'clean-orphan-file.min-existing-time-minutes'='60')"
    )
    spark.sql("INSERT INTO local.db.orph SELECT id FROM range(100)")
    spark.sql("INSERT INTO local.db.orph SELECT id FROM range(100, 200)")
    before = checksum(spark, "local.db.orph", "id")
    described = spark.sql("DESCRIBE TABLE EXTENDED local.db.orph").where("col_name = 'Location'").first()
    assert described is not None
    location = Path(described[1].removeprefix("file:"))
    two_hours_ago, ten_minutes_ago = time.time() - 7200, time.time() - 600
    old_orphan = location / "data" / "left-behind.parquet"
    young_orphan = location / "data" / "just-written.parquet"
    outside = location.parent / "not-this-table.parquet"
    for path in (old_orphan, young_orphan, outside):
        path.write_bytes(b"x" * 1234)
    for path in (
        old_orphan,
        outside,
        *location.rglob("*.parquet"),
        *location.rglob("*.avro"),
        *location.rglob("*.json"),
    ):
        if path != young_orphan:
            os.utime(path, (two_hours_ago, two_hours_ago))  # referenced files look old too: they must stay
    os.utime(young_orphan, (ten_minutes_ago, ten_minutes_ago))

    # the dry run through the CLI, as an operator would
    api.post("/catalogs/local/refresh")
    created = cli_json(server, "table", "run", "local.db.orph", "clean-orphan-files", "--dry-run")
    assert created["created"] is True
    with running_optimizer(server, spark):
        process = finished(api, created["process_id"])
    listed = cli(server, "process", "list", "--action", "clean-orphan-files").stdout
    assert "dry run:" in listed and "orphan files found 1" in listed
    assert "error: action: 'vacuum'" in cli(server, "table", "run", "local.db.orph", "vacuum", ok=False).stderr
    result = process["summary"]
    assert result["dry_run"] is True and result["orphan_files_found"] == 1 and result["files_deleted"] == 0
    assert result["files"] == [f"file:{old_orphan}"] and result["orphan_bytes_found"] == 1234
    assert old_orphan.exists()  # a dry run deletes nothing

    process = run_on_optimizer(server, spark, api, "orph", "clean-orphan-files")
    assert process["tasks"][0]["attempt"] == 1  # no failed attempt before it
    assert process["summary"]["files_deleted"] == 1 and process["summary"]["bytes_freed"] == 1234
    assert "older than 60 min" in process["summary"]["reasons"][0]
    assert not old_orphan.exists()
    assert young_orphan.exists() and outside.exists()  # too young; outside the table's location
    spark.sql("REFRESH TABLE local.db.orph")
    assert checksum(spark, "local.db.orph", "id") == before  # every referenced file is still there


def test_orphan_cleanup_sees_the_table_as_it_is_now(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    """The optimizer's Spark keeps the tables it loaded (Iceberg's CachingCatalog, 30 s). Another writer commits
    meanwhile: orphan cleanup must work on the table as it is now, not on the cached version, whose reachable
    files leave out the newest metadata file and data files (found by the chaos harness, tests/chaos.py: the
    cleanup deleted the current metadata file and the table could no longer be loaded)."""
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.stale (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, "
        "'clean-orphan-file.min-existing-time-minutes'='0')"
    )
    spark.sql("INSERT INTO local.db.stale SELECT id FROM range(100)")
    run_on_optimizer(server, spark, api, "stale", "clean-orphan-files")  # the optimizer's Spark now holds it
    catalogs = {c["name"]: c for c in api.get("/catalogs").json()}
    other_writer = SqlCatalog("local", **catalogs["local"]["properties"])
    other_writer.load_table("db.stale").append(pa.table({"id": pa.array([100, 101], pa.int64())}))
    table = other_writer.load_table("db.stale")
    newest = table.metadata_location
    process = run_on_optimizer(server, spark, api, "stale", "clean-orphan-files")
    assert process["summary"]["files_deleted"] == 0, process["summary"]
    assert Path(newest.removeprefix("file:")).exists()
    assert other_writer.load_table("db.stale").scan().to_arrow().num_rows == 102


def test_gc_disabled_forbids_expiry_and_orphan_cleanup(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    """A process Iceberg refuses fails at once, not retried; once lakewarden sees the setting, no process
    is created for the actions it forbids, and table show says why."""
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.nogc (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, 'snapshot.keep.duration'='0min')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO local.db.nogc VALUES ({i})")
    process_id = run(api, "nogc", "expire-snapshots")  # created while GC is on…
    spark.sql("ALTER TABLE local.db.nogc SET TBLPROPERTIES ('gc.enabled'='false')")  # …turned off before it runs
    with running_optimizer(server, spark):
        process = finished(api, process_id)
    assert process["status"] == "failed"
    final = "task 1 failed with an error no retry can change (not retried): ValidationException: Cannot expire"
    assert process["fail_reason"].startswith(f"{final} snapshots: GC is disabled")
    task = process["tasks"][0]
    assert (task["attempt"], task["retry_count"], task["failure"]) == (1, 0, "final")
    assert len(snapshot_ids(spark, "local.db.nogc")) == 3  # nothing expired

    api.post("/catalogs/local/refresh")
    wait_for("the new config", lambda: api.get("/tables/local/db/nogc").json()["config"].get("gc.enabled") == "false")
    for action, verb in (("expire-snapshots", "expire snapshots"), ("clean-orphan-files", "delete orphan files")):
        answer = api.post(f"/tables/local/db/nogc/actions/{action}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["created"] is False
        assert answer.json()["reason"].startswith(f"gc.enabled=false on the table: Iceberg does not {verb}")
    assert (
        "no process created: gc.enabled=false"
        in cli(server, "table", "run", "local.db.nogc", "expire-snapshots").stdout
    )
    shown = {m["action"]: m for m in cli_json(server, "table", "show", "local.db.nogc")["maintenance"]}
    assert shown["expire-snapshots"]["blocked_by"].startswith("gc.enabled=false")
    assert shown["clean-orphan-files"]["blocked_by"].startswith("gc.enabled=false")
    # the trigger's last look (checked_at, work_expected_at) depends on when its pass ran: not compared here
    manifests = {k: v for k, v in shown["rewrite-manifests"].items() if k not in ("checked_at", "work_expected_at")}
    assert manifests == {
        "action": "rewrite-manifests",
        "enabled": True,
        "blocked_by": None,
        "failures": 0,
        "retry_after": None,
    }
    assert {"checked_at", "work_expected_at"} <= shown["rewrite-manifests"].keys()
    text = cli(server, "table", "show", "local.db.nogc").stdout
    assert "maintenance" in text and "gc.enabled=false on the table" in text
    assert len([p for p in api.get("/processes").json() if p["action"] == "expire-snapshots"]) == 1


def test_dangling_delete_files_are_removed(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.dang (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({QUIET}, 'format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql("INSERT INTO local.db.dang SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range(100)")
    spark.sql("DELETE FROM local.db.dang WHERE id % 5 = 0")  # position deletes in both partitions
    # a rewrite that gives the new files fresh sequence numbers leaves the old deletes applying to nothing
    spark.sql(
        "CALL local.system.rewrite_data_files(table => 'db.dang', "
        "options => map('rewrite-all', 'true', 'use-starting-sequence-number', 'false'))"
    )
    before = checksum(spark, "local.db.dang", "id, cat")
    deletes = spark.sql("SELECT count(*) FROM local.db.dang.delete_files").first()[0]  # type: ignore[index]
    assert deletes == 2
    api.post("/catalogs/local/refresh")
    wait_for("the rewrite", lambda: api.get("/tables/local/db/dang").json()["delete_files"] == 2)

    process = run_on_optimizer(server, spark, api, "dang", "clean-dangling-delete-files")
    assert process["summary"]["delete_files_removed"] == 2 and process["summary"]["bytes_freed"] > 0
    assert process["summary"]["reasons"] == ["2 delete file(s) in 2 partition(s) apply to no live data file"]
    spark.sql("REFRESH TABLE local.db.dang")
    assert spark.sql("SELECT count(*) FROM local.db.dang.delete_files").first()[0] == 0  # type: ignore[index]
    assert checksum(spark, "local.db.dang", "id, cat") == before


@pytest.mark.parametrize("level", ["partition", "file"])
def test_data_expiration(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession, level: str) -> None:
    server, api = lake
    table = f"exp_{level}"
    spark.sql(
        f"CREATE TABLE local.db.{table} (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({QUIET}, 'data-expire.enabled'='true', "
        f"'data-expire.field'='ts', 'data-expire.retention-time'='7d', 'data-expire.level'='{level}', "
        "'data-expire.base-on-rule'='CURRENT_TIME')"
    )
    old, new = "current_timestamp() - INTERVAL 30 DAYS", "current_timestamp()"
    spark.sql(f"INSERT INTO local.db.{table} SELECT id, 'a', {old} FROM range(0, 10)")  # a: all old
    spark.sql(f"INSERT INTO local.db.{table} SELECT id, 'b', {old} FROM range(10, 20)")  # b: one old file…
    spark.sql(f"INSERT INTO local.db.{table} SELECT id, 'b', {new} FROM range(20, 30)")  # …and one new file
    process = run_on_optimizer(server, spark, api, table, "expire-data")
    spark.sql(f"REFRESH TABLE local.db.{table}")
    ids = sorted(r[0] for r in spark.sql(f"SELECT id FROM local.db.{table}").collect())
    if level == "partition":  # a goes whole; b keeps everything, since part of it is young
        assert ids == list(range(10, 30))
        assert process["summary"]["data_files_deleted"] == 1 and process["summary"]["records_deleted"] == 10
    else:  # every file whose newest row is older than 7 days goes
        assert ids == list(range(20, 30))
        assert process["summary"]["data_files_deleted"] == 2 and process["summary"]["records_deleted"] == 20
    assert process["summary"]["bytes_freed"] > 0


def test_auto_tag_task_creates_the_tag(spark: SparkSession, tmp_path: Path) -> None:
    """The Spark side of auto tags (which tag is due when is tested in test_maintenance_domain)."""
    from lakewarden.optimizer.executor import execute_task
    from lakewarden.protocol.results import AutoCreateTagsResult

    spec = spark_sql_catalog(spark, tmp_path, "tagcat")
    spark.sql("CREATE TABLE tagcat.db.t (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO tagcat.db.t VALUES (1)")
    first = snapshot_ids(spark, "tagcat.db.t")[0]
    spark.sql("INSERT INTO tagcat.db.t VALUES (2)")
    work = {
        "action": "auto-create-tags",
        "table": "db.t",
        "tag": "tag-20261120",
        "snapshot_id": first,
        "max_age_ms": 86400000,
    }
    task = assignment(spec, work)
    created = execute_task(spark, task, "test")
    assert created.model_copy(update={"duration_ms": 0}) == AutoCreateTagsResult(
        tags_created=1, tags=["tag-20261120"], snapshot_id=first
    )
    again = execute_task(spark, task, "test")  # a retried task does not fail on it
    assert isinstance(again, AutoCreateTagsResult) and again.tags_created == 0
    refs = {r[0]: (r[1], r[2]) for r in spark.sql("SELECT name, type, snapshot_id FROM tagcat.db.t.refs").collect()}
    assert refs["tag-20261120"] == ("TAG", first)
    assert spark.sql("SELECT count(*) FROM tagcat.db.t VERSION AS OF 'tag-20261120'").first()[0] == 1  # type: ignore[index]


def test_scheduled_manifest_rewrite(tmp_path: Path, spark: SparkSession) -> None:
    """The trigger starts maintenance by itself: the server's interval, the table's threshold."""
    maintenance = MAINTENANCE_OFF.replace("rewrite-manifests: {enabled: false}", "rewrite-manifests: {interval: 1s}")
    with started_server(tmp_path, extra=FAST_EVALUATOR, maintenance=maintenance) as server:
        api = open_lake(server, spark)
        spark.sql(
            f"CREATE TABLE local.db.man (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, "
            "'rewrite-manifests.trigger.manifest-count'='5')"
        )
        for i in range(6):
            spark.sql(f"INSERT INTO local.db.man VALUES ({i})")
        before = checksum(spark, "local.db.man", "id")
        api.post("/catalogs/local/refresh")
        with running_optimizer(server, spark):
            process = wait_for(
                "a scheduled manifest rewrite",
                lambda: next(
                    (
                        p
                        for p in api.get("/processes", params={"action": "rewrite-manifests"}).json()
                        if p["status"] == "success"
                    ),
                    None,
                ),
                timeout=120,
            )
        assert process["type"] == "scheduled" and process["summary"]["manifests_rewritten"] == 6
        # the trigger looks every second, also while the inserts run: it may fire at the fifth manifest or the
        # sixth; the rewrite takes the table as it is when it runs (all six)
        assert process["summary"]["reasons"] in (["5 manifests (at least 5)"], ["6 manifests (at least 5)"])
        spark.sql("REFRESH TABLE local.db.man")
        assert spark.sql("SELECT count(*) FROM local.db.man.manifests").first()[0] == 1  # type: ignore[index]
        assert checksum(spark, "local.db.man", "id") == before
        time.sleep(2)  # one manifest now: the trigger looks again every second and plans nothing more
        assert len(api.get("/processes", params={"action": "rewrite-manifests"}).json()) == 1


def test_server_killed_mid_action_ends_terminal_with_nothing_lost(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    server, api = lake
    spark.sql(
        f"CREATE TABLE local.db.rs (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, 'snapshot.keep.duration'='0min')"
    )
    for i in range(5):
        spark.sql(f"INSERT INTO local.db.rs SELECT id FROM range({i * 1000}, {(i + 1) * 1000})")
    before = checksum(spark, "local.db.rs", "id")
    process_id = run(api, "rs", "expire-snapshots")
    with running_optimizer(server, spark):
        wait_for(
            "the task in flight",
            lambda: api.get(f"/processes/{process_id}").json()["tasks"][0]["status"] != "planned",
            interval=0.05,
        )
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
        server.start()  # same data directory: the process and its task are where they were
        process = finished(api, process_id)
    assert process["status"] == "success", process
    assert len(snapshot_ids(spark, "local.db.rs")) == 1
    assert checksum(spark, "local.db.rs", "id") == before
    assert not [p for p in api.get("/processes").json() if p["status"] == "running"]
