"""Spark 3.5 + Iceberg (`type=rest`) against lakewarden's REST catalog, and the optimizer compacting it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.spark.session import configure_catalogs
from tests.helpers import PROPS, checksum, running_optimizer, started_server, wait_for
from tests.test_server_process import ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def lake(tmp_path: Path, spark: SparkSession) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    with started_server(tmp_path, extra="  evaluator: {interval: 1s, recheck-interval: 1s}\n") as server:
        api = httpx.Client(base_url=f"{server.url}/api/v1", timeout=30)
        created = api.post("/catalogs", json={"name": f"rest{server.port}", "type": "internal"}).json()
        configure_catalogs(spark, [CatalogSpec(created["name"], "internal", created["properties"])])
        yield server, api


def test_spark_sql_over_the_rest_catalog(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    server, api = lake
    c = f"rest{server.port}"
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE TABLE {c}.db.t (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
              f"TBLPROPERTIES ({PROPS})")  # fmt: skip
    spark.sql(f"INSERT INTO {c}.db.t SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v' FROM range(50)")
    spark.sql(f"INSERT INTO {c}.db.t SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v' FROM range(50, 100)")
    spark.sql(f"MERGE INTO {c}.db.t t USING (SELECT id FROM range(0, 100, 10)) s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET t.v = 'merged'")  # fmt: skip
    spark.sql(f"DELETE FROM {c}.db.t WHERE id % 7 = 0")
    spark.sql(f"UPDATE {c}.db.t SET v = 'updated' WHERE id = 1")
    spark.sql(f"ALTER TABLE {c}.db.t ADD COLUMN extra STRING")
    spark.sql(f"ALTER TABLE {c}.db.t SET TBLPROPERTIES ('note'='hello')")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.t").first()[0] == 100 - 15  # type: ignore[index]
    assert spark.sql(f"SELECT v FROM {c}.db.t WHERE id = 10").first()[0] == "merged"  # type: ignore[index]
    deletes = spark.sql(f"SELECT count(*) FROM {c}.db.t.delete_files").first()[0]  # type: ignore[index]
    assert deletes > 0  # merge-on-read
    timeline = api.get(f"/tables/{c}/db/t/timeline").json()
    assert [e["operation"] for e in reversed(timeline)][:3] == ["create", "append", "append"]
    assert "overwrite" in {e["operation"] for e in timeline}  # MERGE/UPDATE/DELETE as row deltas
    assert "Java" in (timeline[0]["client"] or "") or timeline[0]["client"]

    # the optimizer compacts the internal table; lakewarden's own commit does not re-plan it
    before = checksum(spark, f"{c}.db.t")
    wait_for("pending", lambda: api.get(f"/tables/{c}/db/t").json().get("status") == "pending", timeout=60)
    with running_optimizer(server, spark):
        process = wait_for(
            "a finished process",
            lambda: next((p for p in api.get("/processes").json() if p["status"] != "running"), None),
        )
    assert process["status"] == "success", process
    spark.sql(f"REFRESH TABLE {c}.db.t")
    assert checksum(spark, f"{c}.db.t") == before
    assert wait_for("idle", lambda: api.get(f"/tables/{c}/db/t").json()["status"] == "idle")
    assert len(api.get("/processes").json()) == 1
