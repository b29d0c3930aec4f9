"""Self-optimizing end to end: a real server process plans, a real PySpark optimizer compacts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import PROPS, checksum, open_lake, running_optimizer, table_status, wait_for
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_small_files_and_deletes_are_compacted(server: ServerProcess, spark: SparkSession) -> None:
    api = open_lake(server, spark)
    spark.sql(
        f"CREATE TABLE local.db.t (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({PROPS})"
    )
    for i in range(4):
        spark.sql(
            f"INSERT INTO local.db.t SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v{i}' FROM range({i * 100}, {i * 100 + 100})"
        )
    spark.sql("DELETE FROM local.db.t WHERE id % 10 = 3")
    before = checksum(spark, "local.db.t")
    files_before = spark.sql("SELECT count(*) FROM local.db.t.files WHERE content = 0").first()[0]  # type: ignore[index]
    assert files_before == 8

    api.post("/catalogs/local/refresh")
    table = table_status(api, "t", "pending")
    assert table["evaluation"]["type"] == "minor"

    with running_optimizer(server, spark):
        process = wait_for(
            "a finished process",
            lambda: next((p for p in api.get("/processes").json() if p["status"] in ("success", "failed")), None),
        )
    assert process["status"] == "success", process
    assert process["type"] == "minor"
    assert [t["status"] for t in process["tasks"]] == ["success"]
    task = process["tasks"][0]
    assert sorted(task["partitions"]) == ["cat=a", "cat=b"]
    assert task["output"]["files_in"] == 8 and task["output"]["files_out"] == 2
    assert process["summary"]["files_in"] == 8

    assert checksum(spark, "local.db.t") == before  # the data is unchanged
    spark.sql("REFRESH TABLE local.db.t")
    assert spark.sql("SELECT count(*) FROM local.db.t.files WHERE content = 0").first()[0] == 2  # type: ignore[index]
    written = spark.sql("SELECT sum(file_size_in_bytes) FROM local.db.t.files WHERE content = 0").first()[0]  # type: ignore[index]
    assert task["output"]["bytes_out"] == written > 0
    summary = spark.sql("SELECT summary FROM local.db.t.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]  # type: ignore[index]
    assert summary["lakewarden.process-id"] == str(process["process_id"])
    assert summary["lakewarden.optimizing-type"] == "minor"
    after = table_status(api, "t", "idle")
    assert after["last_minor_optimizing_at"] is not None

    # history in the CLI; a finished process cannot be canceled
    listed = cli(server, "process", "list", "--table", "local.db.t").stdout
    assert "local.db.t" in listed and "minor" in listed and "success" in listed
    shown = cli(server, "process", "show", str(process["process_id"])).stdout
    assert "cat=a, cat=b" in shown
    # the exact files: every file the process replaced and wrote, a page at a time, not in the process's record
    files = f"/processes/{process['process_id']}/files"
    rewritten = api.get(files, params={"kind": "rewritten_files"}).json()
    assert rewritten["total"] == 8 and len({f["path"] for f in rewritten["files"]}) == 8
    assert set(task["output"]).isdisjoint({"rewritten_files", "added_files"})
    assert not any(isinstance(v, list) for v in process["summary"].values())
    total = 8 + 2 + process["summary"]["delete_files_removed"]
    paged = [api.get(files, params={"offset": o, "limit": 3}).json() for o in range(0, total + 3, 3)]
    every = [f for page in paged for f in page["files"]]
    assert all(page["total"] == total for page in paged) and paged[-1]["files"] == []
    assert len(every) == paged[0]["total"] and len({(f["kind"], f["path"]) for f in every}) == len(every)
    assert {f["kind"] for f in every} == {"rewritten_files", "added_files", "removed_delete_files"}
    assert "data file rewritten" in shown and "data file written" in shown
    assert shown.count("delete file removed") == process["summary"]["delete_files_removed"] > 0
    listed_files = cli(server, "process", "files", str(process["process_id"]), "--kind", "added_files").stdout
    assert "1-2 of 2" in listed_files and listed_files.count("data file written") == 2
    bad = api.get(files, params={"kind": "everything"})
    assert bad.status_code == 400 and "kind" in bad.text
    assert api.get("/processes/999999/files").status_code == 404
    table_shown = cli(server, "table", "show", "local.db.t").stdout
    assert "recent optimizing" in table_shown and "8 -> 2 files" in table_shown
    refused = cli(server, "process", "cancel", str(process["process_id"]), ok=False)
    assert refused.returncode == 1 and "is success, not running" in refused.stderr


def test_a_process_takes_what_the_groups_threads_can_run_and_the_rest_follows(
    server: ServerProcess, spark: SparkSession
) -> None:
    """Amoro's bound on a plan: one thread x max-input-file-size-per-thread of 1 byte takes one partition a
    process, the costliest first; the others wait for the next rounds, and in the end every one is compacted."""
    api = open_lake(server, spark)
    assert api.put("/resource-groups/default", json={"properties": {"max-input-file-size-per-thread": "1"}}).is_success
    spark.sql(
        f"CREATE TABLE local.db.b3 (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({PROPS})"
    )
    for i in range(5):  # b gets 5 files, c 4, a 3
        cats = ["b", *(["c"] if i < 4 else []), *(["a"] if i < 3 else [])]
        rows = " UNION ALL ".join(f"SELECT id, '{c}', 'v{i}' FROM range({i * 10}, {i * 10 + 10})" for c in cats)
        spark.sql(f"INSERT INTO local.db.b3 {rows}")
    before = checksum(spark, "local.db.b3")
    api.post("/catalogs/local/refresh")
    table_status(api, "b3", "pending")

    def succeeded() -> list[dict[str, Any]] | None:
        found = api.get("/processes", params={"table": "local.db.b3", "action": "optimizing"}).json()
        return found if len(found) == 3 and all(p["status"] == "success" for p in found) else None

    with running_optimizer(server, spark):
        processes = wait_for("three processes", succeeded, timeout=180)
    taken = [[part for t in p["tasks"] for part in t["partitions"]] for p in reversed(processes)]
    assert taken == [["cat=b"], ["cat=c"], ["cat=a"]]
    assert checksum(spark, "local.db.b3") == before
    spark.sql("REFRESH TABLE local.db.b3")
    assert spark.sql("SELECT count(*) FROM local.db.b3.files").first()[0] == 3  # type: ignore[index]
    bad = api.put("/resource-groups/default", json={"properties": {"max-input-file-size-per-thread": "lots"}})
    assert bad.status_code == 400 and "max-input-file-size-per-thread" in bad.text
