"""The evaluator service on real tables: IDLE <-> PENDING with reasons, persisted, compare-and-swap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.api.context import ServerContext
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import IllegalTransition
from lakewarden.domain.tables import TableStatus
from lakewarden.spark.session import configure_catalogs
from lakewarden.store.runtime import transition_table
from lakewarden.store.tables import get_table
from tests.helpers import record_scans
from tests.test_explorer import refresh, register
from tests.test_scheduling import poll
from tests.test_scheduling import register as register_optimizer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
TWO = "'self-optimizing.minor.trigger.file-count'='2'"


def ctx(client: TestClient) -> ServerContext:
    return client.app.state.context  # type: ignore[attr-defined, no-any-return]


def table(client: TestClient, c: str, name: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/tables/{c}/db/{name}").json())


def test_tables_turn_pending_with_reasons(client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec) -> None:
    c = sql_catalog.name
    register(client, sql_catalog)
    configure_catalogs(spark, [sql_catalog])
    spark.sql(f"CREATE NAMESPACE {c}.db")
    few = "'self-optimizing.minor.trigger.file-count'='3'"
    spark.sql(
        f"CREATE TABLE {c}.db.busy (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ({few})"
    )
    spark.sql(f"CREATE TABLE {c}.db.quiet (id BIGINT) USING iceberg")
    spark.sql(
        f"CREATE TABLE {c}.db.broken (id BIGINT) USING iceberg TBLPROPERTIES ('self-optimizing.target-size'='big')"
    )
    spark.sql(
        f"CREATE TABLE {c}.db.off (id BIGINT) USING iceberg TBLPROPERTIES ({few}, 'self-optimizing.enabled'='false')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO {c}.db.busy VALUES ({i}, 'a'), ({i}, 'b')")
        spark.sql(f"INSERT INTO {c}.db.off VALUES ({i})")
    spark.sql(f"INSERT INTO {c}.db.quiet VALUES (1)")
    spark.sql(f"INSERT INTO {c}.db.broken VALUES (1)")
    refresh(client, c)
    assert table(client, c, "busy")["evaluation"] is None  # not evaluated yet

    ctx(client).evaluator.run_once()

    busy = table(client, c, "busy")
    assert busy["status"] == "pending"
    evaluation = busy["evaluation"]
    assert evaluation["type"] == "minor"
    assert evaluation["reasons"] == ["2 of 2 partition(s) need optimizing (2 minor)"]
    assert evaluation["snapshot_id"] == busy["current_snapshot_id"]
    assert [p["partition"] for p in evaluation["partitions"]] == ["cat=a", "cat=b"]
    assert all(
        p["reasons"] == ["3 fragment(s) + 0 equality-delete file(s) >= minor.trigger.file-count 3"]
        for p in evaluation["partitions"]
    )
    quiet = table(client, c, "quiet")
    assert quiet["status"] == "idle"
    assert quiet["evaluation"]["reasons"] == ["no partition needs optimizing"]
    assert "< minor.trigger.file-count 12" in quiet["evaluation"]["partitions"][0]["reasons"][0]
    broken = table(client, c, "broken")
    assert broken["status"] == "idle"
    assert broken["evaluation"]["reasons"] == [
        "invalid table property self-optimizing.target-size: 'big' is not an integer"
    ]
    off = table(client, c, "off")
    assert (off["status"], off["evaluation"]["reasons"]) == ("idle", ["self-optimizing.enabled is false"])
    pending = client.get("/api/v1/tables", params={"status": "pending", "catalog": c}).json()
    assert [t["identifier"] for t in pending] == [f"{c}.db.busy"]

    # evaluating again without a new snapshot parses no manifest: they are cached
    again = client.post(f"/api/v1/tables/{c}/db/busy/evaluate")
    assert again.status_code == 200, again.text
    assert again.json()["evaluation"]["manifests_read"] == 0

    # turning optimizing off makes a pending table idle again
    spark.sql(f"ALTER TABLE {c}.db.busy SET TBLPROPERTIES ('self-optimizing.enabled'='false')")
    refresh(client, c)
    ctx(client).evaluator.run_once()
    busy = table(client, c, "busy")
    assert (busy["status"], busy["evaluation"]["reasons"]) == ("idle", ["self-optimizing.enabled is false"])


def test_transitions_are_compare_and_swap(client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec) -> None:
    c = sql_catalog.name
    register(client, sql_catalog)
    configure_catalogs(spark, [sql_catalog])
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE TABLE {c}.db.t (id BIGINT) USING iceberg TBLPROPERTIES ({TWO})")
    for i in range(2):
        spark.sql(f"INSERT INTO {c}.db.t VALUES ({i})")
    refresh(client, c)
    ctx(client).evaluator.run_once()
    db = ctx(client).db
    with db.read() as session:
        table_id = get_table(session, _name(c)).runtime.table_id
    with db.write() as session:
        assert not transition_table(session, table_id, TableStatus.IDLE, TableStatus.PENDING)  # it is PENDING
        assert transition_table(session, table_id, TableStatus.PENDING, TableStatus.PLANNING)
        with pytest.raises(IllegalTransition):
            transition_table(session, table_id, TableStatus.PLANNING, TableStatus.COMMITTING)
    # a table being planned is left alone by the evaluator, and cannot be evaluated on demand
    spark.sql(f"INSERT INTO {c}.db.t VALUES (9)")
    refresh(client, c)
    ctx(client).evaluator.run_once()
    assert table(client, c, "t")["status"] == "planning"
    response = client.post(f"/api/v1/tables/{c}/db/t/evaluate")
    assert response.status_code == 409
    assert "is planning" in response.json()["error"]["message"]


def _name(catalog: str) -> Any:
    from lakewarden.domain.tables import TableIdentifier

    return TableIdentifier(catalog, "db", "t")


def test_a_budgeted_group_makes_a_table_read_lately_pending_sooner(
    client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec
) -> None:
    c = sql_catalog.name
    register(client, sql_catalog)
    configure_catalogs(spark, [sql_catalog])
    spark.sql(f"CREATE NAMESPACE {c}.db")
    for name in ("read", "unread"):
        spark.sql(f"CREATE TABLE {c}.db.{name} (id BIGINT) USING iceberg")
        for i in range(3):  # 3 small files: fewer than minor.trigger.file-count's 12
            spark.sql(f"INSERT INTO {c}.db.{name} VALUES ({i})")
    refresh(client, c)
    record_scans(ctx(client).db, (c, "db", "read"), 5, files=3)
    ctx(client).evaluator.run_once()
    assert table(client, c, "read")["status"] == table(client, c, "unread")["status"] == "idle"  # no budget

    budget = {"optimizing.budget.cpu-seconds-per-hour": "60", "optimizing.budget.read-trigger.file-count": "3"}
    assert client.put("/api/v1/resource-groups/default", json={"properties": budget}).status_code == 200
    for name in ("read", "unread"):
        assert client.post(f"/api/v1/tables/{c}/db/{name}/evaluate").status_code == 200
    read = table(client, c, "read")
    assert read["status"] == "pending"
    assert read["evaluation"]["reasons"][0] == (
        "scanned 5 time(s) in the last hour: in budgeted group default, pending at "
        "optimizing.budget.read-trigger.file-count 3 small files instead of minor.trigger.file-count 12"
    )
    assert read["evaluation"]["read_trigger_file_count"] == 3
    assert table(client, c, "unread")["status"] == "idle"  # Amoro's trigger still holds for a table not read
    # the planner plans with the trigger the verdict was judged with: a task over the 3 small files
    task = poll(client, register_optimizer(client, "default"))
    assert task is not None and task["input"]["table"] == "db.read", task
    assert sum(len(g["rewrite"]) for g in task["input"]["groups"]) == 3
