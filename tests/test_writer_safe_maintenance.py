"""Maintenance that never hurts a writer, on histories as writers leave them: Flink jobs' checkpoint commits,
branches and tags with retention of their own, write-audit-publish with a staged write published and one
abandoned. Each runs through a real server and optimizer and asserts what remains: snapshots, refs, files and
rows per ref. The retention rules themselves (lakewarden/domain/retention.py) are checked against Iceberg's own
expiry on the same tables."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from lakewarden.domain.retention import Policy, plan_expiry
from lakewarden.optimizer.history import table_history
from tests.cdc import java_table
from tests.helpers import open_lake, running_optimizer, wait_for
from tests.servers import FAST_EVALUATOR, ServerProcess, cli, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
QUIET = "'self-optimizing.enabled'='false', 'snapshot.keep.duration'='0min', 'snapshot.keep.min-count'='1'"
JOB_A, JOB_B = "a" * 32, "b" * 32  # Flink job ids are 32 hex digits


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    with started_server(tmp_path_factory.mktemp("writers"), extra=FAST_EVALUATOR) as server:
        yield server, open_lake(server, spark)


def run_action(
    server: ServerProcess, spark: SparkSession, api: httpx.Client, table: str, action: str
) -> dict[str, Any]:
    api.post("/catalogs/local/refresh")
    created = api.post(f"/tables/local/db/{table}/actions/{action}", json={})
    assert created.status_code == 201, created.text
    process_id = created.json()["process_id"]
    with running_optimizer(server, spark):
        process = wait_for(
            f"{action} to end",
            lambda: (lambda p: p if p["status"] != "running" else None)(api.get(f"/processes/{process_id}").json()),
            timeout=180,
        )
    assert process["status"] == "success", process
    return dict(process["summary"])


def snapshots(spark: SparkSession, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    return [int(r[0]) for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()]


def refs(spark: SparkSession, table: str) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in spark.sql(f"SELECT name, snapshot_id FROM {table}.refs").collect()}


def ids(spark: SparkSession, table: str, version: str | int | None = None) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    at = (
        ""
        if version is None
        else f" VERSION AS OF {version!r}"
        if isinstance(version, str)
        else f" VERSION AS OF {version}"
    )
    return sorted(int(r[0]) for r in spark.sql(f"SELECT id FROM {table}{at}").collect())


def append(spark: SparkSession, table: str, start: int, **summary: str) -> int:
    """Appends ids start..start+5, with `summary` entries in the snapshot's summary (as Flink's committer
    writes them); returns the new snapshot's id."""
    writer = spark.range(start, start + 5).writeTo(table)
    for key, value in summary.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()
    spark.sql(f"REFRESH TABLE {table}")
    return int(java_table(spark, table).currentSnapshot().snapshotId())


def flink(job: str, checkpoint: int) -> dict[str, str]:
    return {"flink.job-id": job, "flink.operator-id": "sink", "flink.max-committed-checkpoint-id": str(checkpoint)}


def location(spark: SparkSession, table: str) -> Path:
    return Path(str(java_table(spark, table).location()).removeprefix("file:"))


def old_file(path: Path) -> Path:
    path.write_bytes(b"x" * 100)
    two_hours_ago = time.time() - 7200
    os.utime(path, (two_hours_ago, two_hours_ago))
    return path


def agrees_with_iceberg(spark: SparkSession, table: str, policy: Policy) -> list[int]:
    """The snapshots lakewarden's plan says an expiry removes, checked against what Iceberg's own expiry would
    remove at the same cutoff (its `apply`, which commits nothing)."""
    java = java_table(spark, table)
    java.refresh()
    history, found_refs = table_history(java)
    plan = plan_expiry(history, found_refs, policy, int(time.time() * 1000))
    doomed = java.expireSnapshots().expireOlderThan(plan.cutoff_ms).retainLast(max(policy.min_count, 1)).apply()
    assert sorted(int(s.snapshotId()) for s in doomed) == sorted(plan.expired)
    return plan.expired


def test_flink_jobs_keep_their_last_checkpoint_and_their_pending_manifests(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, api = lake
    table = "local.db.flink"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET})")
    s1 = append(spark, table, 0, **flink(JOB_A, 1))
    s2 = append(spark, table, 10, **flink(JOB_A, 2))  # job a's last checkpoint
    s3 = append(spark, table, 20, **flink(JOB_B, 7))  # job b's
    s4 = append(spark, table, 30)  # a batch job's
    s5 = append(spark, table, 40)
    assert agrees_with_iceberg(spark, table, Policy(keep_ms=0, min_count=1)) == [s1]

    result = run_action(server, spark, api, "flink", "expire-snapshots")
    assert snapshots(spark, table) == [s2, s3, s4, s5]  # job a, restoring, walks back from the head to s2
    assert [(k["snapshot_id"], k["need"]) for k in result["kept"]] == [
        (s2, "flink-checkpoint"),
        (s3, "flink-checkpoint"),
        (s5, "last-commit"),
    ]
    assert result["snapshots_expired"] == 1
    assert ids(spark, table) == [*range(0, 5), *range(10, 15), *range(20, 25), *range(30, 35), *range(40, 45)]
    monkeypatch.setenv("COLUMNS", "300")  # one line a row
    shown = cli(server, "table", "show", "local.db.flink").stdout
    assert f"Flink job {JOB_A} (operator sink) restores from checkpoint 2" in shown, shown

    # a checkpoint's manifest that job a wrote and has not committed yet is not an orphan; a stray file is
    metadata = location(spark, table) / "metadata"
    pending = old_file(metadata / f"{JOB_A}-sink-00000-0-3-00001.avro")
    stray = old_file(location(spark, table) / "data" / "stray.parquet")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('clean-orphan-file.min-existing-time-minutes'='60')")
    cleaned = run_action(server, spark, api, "flink", "clean-orphan-files")
    assert pending.exists() and not stray.exists()
    assert cleaned["skipped_flink_manifests"] == 1 and cleaned["files_deleted"] == 1

    # past the checkpoint retention the jobs are gone for good: only data expiration's base holds snapshots now
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('snapshot.keep.flink.checkpoint-retention'='1s')")
    time.sleep(1.5)
    result = run_action(server, spark, api, "flink", "expire-snapshots")
    assert snapshots(spark, table) == [s5] and [k["need"] for k in result["kept"]] == ["last-commit"]


def test_each_ref_keeps_by_its_own_retention_and_its_rows_stay_readable(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    server, api = lake
    table = "local.db.refs"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET})")
    s1 = append(spark, table, 0)
    s2 = append(spark, table, 10)
    java = java_table(spark, table)
    manage = java.manageSnapshots()
    manage.createTag("release", s1).createTag("nightly", s2).setMaxRefAgeMs("nightly", 1000)
    manage.createBranch("audit", s2).setMinSnapshotsToKeep("audit", 2).commit()
    b1 = append_to_branch(spark, table, "audit", 100)
    b2 = append_to_branch(spark, table, "audit", 110)
    b3 = append_to_branch(spark, table, "audit", 120)
    s3 = append(spark, table, 20)
    s4 = append(spark, table, 30)
    rows = {ref: ids(spark, table, ref) for ref in ("release", "audit")}
    main_rows = ids(spark, table)
    time.sleep(1.5)  # the nightly tag is past its max-ref-age
    expected = [s2, b1, s3]  # oldest first: the tag's snapshot goes with the tag; audit keeps 2; main its head
    assert sorted(agrees_with_iceberg(spark, table, Policy(keep_ms=0, min_count=1))) == sorted(expected)

    result = run_action(server, spark, api, "refs", "expire-snapshots")
    assert sorted(snapshots(spark, table)) == sorted([s1, b2, b3, s4])
    assert refs(spark, table) == {"main": s4, "release": s1, "audit": b3}
    assert result["refs_expired"] == ["nightly"] and result["snapshots_expired"] == 3
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('clean-orphan-file.min-existing-time-minutes'='0')")
    run_action(server, spark, api, "refs", "clean-orphan-files")
    assert {ref: ids(spark, table, ref) for ref in ("release", "audit")} == rows
    assert ids(spark, table) == main_rows
    assert ids(spark, table, b2) == [*range(0, 5), *range(10, 15), *range(100, 105), *range(110, 115)]


def append_to_branch(spark: SparkSession, table: str, branch: str, start: int) -> int:
    spark.sql(f"INSERT INTO {table}.branch_{branch} SELECT id FROM range({start}, {start + 5})")
    java = java_table(spark, table)
    java.refresh()
    return int(java.refs()[branch].snapshotId())


def test_a_staged_write_survives_until_published_or_abandoned(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    server, api = lake
    table = "local.db.wap"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ({QUIET}, 'write.wap.enabled'='true')")
    append(spark, table, 0)
    staged: dict[str, int] = {}
    for wap_id, start in (("audit-1", 100), ("audit-2", 200)):
        spark.conf.set("spark.wap.id", wap_id)
        try:
            spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {start + 5})")
        finally:
            spark.conf.unset("spark.wap.id")
        history, _ = table_history(java_table(spark, table))
        staged[wap_id] = next(s.snapshot_id for s in history if s.summary.get("wap.id") == wap_id)
    assert ids(spark, table) == list(range(5))  # staged: not on main
    spark.sql("CALL local.system.publish_changes('db.wap', 'audit-1')")
    append(spark, table, 10)
    abandoned = staged["audit-2"]
    # the files only the abandoned write holds: in some snapshot, not in main's
    every = {str(r[0]) for r in spark.sql(f"SELECT file_path FROM {table}.all_data_files").collect()}
    abandoned_files = every - {str(r[0]) for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    result = run_action(server, spark, api, "wap", "expire-snapshots")
    assert abandoned in snapshots(spark, table)
    assert ("wap-staged", abandoned) in [(k["need"], k["snapshot_id"]) for k in result["kept"]]
    assert ids(spark, table, abandoned) == [*range(5), *range(200, 205)]  # the audit can still read it
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('clean-orphan-file.min-existing-time-minutes'='0')")
    run_action(server, spark, api, "wap", "clean-orphan-files")
    assert ids(spark, table, abandoned) == [*range(5), *range(200, 205)]
    assert ids(spark, table) == [*range(5), *range(10, 15), *range(100, 105)]

    # abandoned past the staged retention: it goes, and the files only it held with it
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('snapshot.keep.wap.staged-retention'='1s')")
    time.sleep(1.5)
    run_action(server, spark, api, "wap", "expire-snapshots")
    assert abandoned not in snapshots(spark, table)
    assert abandoned_files and not any(Path(f.removeprefix("file:")).exists() for f in abandoned_files)
    assert ids(spark, table) == [*range(5), *range(10, 15), *range(100, 105)]


def test_data_expiration_counts_from_the_last_commit_of_a_writer_not_its_own(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    """With `data-expire.base-on-rule` LAST_COMMIT_TIME the retention counts back from the newest snapshot a
    writer committed; lakewarden's own commits (here the first expiration's delete) do not move it."""
    server, api = lake
    table = "local.db.aging"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP) USING iceberg TBLPROPERTIES ({QUIET}, "
        "'data-expire.enabled'='true', 'data-expire.field'='ts', 'data-expire.retention-time'='10s', "
        "'data-expire.level'='file', 'data-expire.base-on-rule'='LAST_COMMIT_TIME')"
    )
    spark.sql(f"INSERT INTO {table} SELECT id, current_timestamp() - INTERVAL 20 SECONDS FROM range(0, 5)")
    spark.sql(f"INSERT INTO {table} SELECT id, current_timestamp() - INTERVAL 5 SECONDS FROM range(5, 10)")
    time.sleep(6)  # lakewarden's commit below comes more than 5 s after the writer's last one
    first = run_action(server, spark, api, "aging", "expire-data")
    assert first["records_deleted"] == 5 and ids(spark, table) == list(range(5, 10))
    # counted from lakewarden's own delete, the young file would be past 10 s now; from the writer's, it is not
    second = run_action(server, spark, api, "aging", "expire-data")
    assert second["records_deleted"] == 0 and ids(spark, table) == list(range(5, 10))


def test_a_branch_named_to_optimize_is_compacted_on_its_own_head_and_main_left_alone(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    """With `self-optimizing.branches`, a branch with small files is planned on its own head and compacted
    there; main, with nothing to do, keeps its head. A name that is no branch of the table is passed over."""
    server, api = lake
    table = "local.db.branchy"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ('self-optimizing.min-plan-interval'='0', "
        "'self-optimizing.minor.trigger.file-count'='3', 'self-optimizing.branches'='nosuch, audit')"
    )
    append(spark, table, 0)
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    for start in (100, 110, 120, 130):
        append_to_branch(spark, table, "audit", start)
    main_head, branch_rows = refs(spark, table)["main"], ids(spark, table, "audit")
    assert branch_rows == [*range(5), *range(100, 105), *range(110, 115), *range(120, 125), *range(130, 135)]

    def branch_files() -> int:
        spark.sql(f"REFRESH TABLE {table}")
        return int(spark.sql(f"SELECT count(DISTINCT _file) FROM {table} VERSION AS OF 'audit'").first()[0])  # type: ignore[index]

    assert branch_files() >= 5
    api.post("/catalogs/local/refresh")
    with running_optimizer(server, spark):
        wait_for("the branch compacted", lambda: branch_files() == 1, timeout=180)
    assert ids(spark, table, "audit") == branch_rows and refs(spark, table)["main"] == main_head
    assert ids(spark, table) == list(range(5))
    (process,) = api.get("/processes", params={"table": table, "action": "optimizing"}).json()
    assert process["status"] == "success" and process["summary"]["branch"] == "audit"
    assert process["target_snapshot_id"] != main_head  # planned on the branch's head


def test_the_base_of_lakewardens_own_commit_stays_for_the_yield_window(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    """lakewarden's commit (here a data expiration's delete) lands on the writer's snapshot `base`: a writer that
    planned on `base` may still be committing, so expiry keeps it, with the file the delete removed, for
    `lakewarden.commit.yield-window`; with `lakewarden.commit.maintenance-yields` off it goes like any other."""
    server, api = lake
    table = "local.db.yielding"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP) USING iceberg TBLPROPERTIES ({QUIET}, "
        "'data-expire.enabled'='true', 'data-expire.field'='ts', 'data-expire.retention-time'='10s', "
        "'data-expire.level'='file', 'data-expire.base-on-rule'='CURRENT_TIME')"
    )
    spark.sql(f"INSERT INTO {table} SELECT id, current_timestamp() - INTERVAL 1 HOUR FROM range(0, 5)")
    spark.sql(f"INSERT INTO {table} SELECT id, current_timestamp() FROM range(5, 10)")
    base = snapshots(spark, table)[-1]
    assert run_action(server, spark, api, "yielding", "expire-data")["records_deleted"] == 5
    own = snapshots(spark, table)[-1]
    spark.sql(f"INSERT INTO {table} SELECT id, current_timestamp() FROM range(10, 15)")  # the writer goes on
    newest = snapshots(spark, table)[-1]
    kept = run_action(server, spark, api, "yielding", "expire-snapshots")
    assert snapshots(spark, table) == [base, own, newest]
    assert ("yield-base", base) in [(k["need"], k["snapshot_id"]) for k in kept["kept"]]
    assert ids(spark, table, base) == list(range(10))  # the writer's view, files and all, is still there

    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('lakewarden.commit.maintenance-yields'='false')")
    run_action(server, spark, api, "yielding", "expire-snapshots")
    assert snapshots(spark, table) == [newest]
    assert ids(spark, table) == list(range(5, 15))
