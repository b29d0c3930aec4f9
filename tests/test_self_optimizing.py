"""Self-optimizing end to end: a real server process plans, a real PySpark optimizer compacts."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.optimizer.app import Optimizer
from lakewarden.spark.session import configure_catalogs
from tests.test_server_process import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
PROPS = ", ".join(
    f"'{k}'='{v}'"
    for k, v in {
        "self-optimizing.minor.trigger.file-count": "3",
        "self-optimizing.min-plan-interval": "0",
        "write.delete.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.merge.mode": "merge-on-read",
    }.items()
)


def checksum(spark: SparkSession, table: str) -> tuple[int, int]:
    row = spark.sql(f"SELECT count(*), sum(xxhash64(id, cat, v)) FROM {table}").first()
    assert row is not None
    return int(row[0]), int(row[1])


def wait_for(what: str, check: Any, timeout: float = 120.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def server(tmp_path: Path) -> Any:
    process = ServerProcess(tmp_path, extra="  evaluator: {interval: 1s, recheck-interval: 1s}\n")
    process.start()
    yield process
    if process.proc is not None and process.proc.poll() is None:
        process.stop()


def test_small_files_and_deletes_are_compacted(server: ServerProcess, spark: SparkSession) -> None:
    api = httpx.Client(base_url=f"{server.url}/api/v1", timeout=30)
    (local,) = api.get("/catalogs").json()
    configure_catalogs(spark, [CatalogSpec("local", "sql", local["properties"])])
    spark.sql("CREATE NAMESPACE local.db")
    spark.sql(f"CREATE TABLE local.db.t (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
              f"TBLPROPERTIES ({PROPS})")  # fmt: skip
    for i in range(4):
        spark.sql(
            f"INSERT INTO local.db.t SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v{i}' FROM range({i * 100}, {i * 100 + 100})"
        )
    spark.sql("DELETE FROM local.db.t WHERE id % 10 = 3")
    before = checksum(spark, "local.db.t")
    files_before = spark.sql("SELECT count(*) FROM local.db.t.files WHERE content = 0").first()[0]  # type: ignore[index]
    assert files_before == 8

    api.post("/catalogs/local/refresh")
    table = wait_for("pending", lambda: (t := api.get("/tables/local/db/t").json())["status"] == "pending" and t)
    assert table["evaluation"]["type"] == "minor"

    optimizer = Optimizer(server.url, "default", parallelism=1, spark=spark)
    runner = threading.Thread(target=optimizer.run, daemon=True)
    runner.start()
    try:
        process = wait_for(
            "a finished process",
            lambda: next((p for p in api.get("/processes").json() if p["status"] in ("success", "failed")), None),
        )
    finally:
        optimizer.stop.set()
        runner.join(60)
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
    summary = spark.sql("SELECT summary FROM local.db.t.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]  # type: ignore[index]
    assert summary["lakewarden.process-id"] == str(process["process_id"])
    assert summary["lakewarden.optimizing-type"] == "minor"
    after = wait_for("idle", lambda: (t := api.get("/tables/local/db/t").json())["status"] == "idle" and t)
    assert after["last_minor_optimizing_at"] is not None

    # history in the CLI; a finished process cannot be canceled
    listed = cli(server, "process", "list", "--table", "local.db.t").stdout
    assert "local.db.t" in listed and "minor" in listed and "success" in listed
    assert "cat=a, cat=b" in cli(server, "process", "show", str(process["process_id"])).stdout
    refused = cli(server, "process", "cancel", str(process["process_id"]), ok=False)
    assert refused.returncode == 1 and "is success, not running" in refused.stderr
