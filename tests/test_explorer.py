"""The table explorer against tables real Spark writes into a real Iceberg SQL catalog."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.services.tables.explorer import TableExplorer
from lakewarden.spark.session import configure_catalogs
from tests.servers import ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def use_in_spark(spark: SparkSession, spec: CatalogSpec) -> None:
    configure_catalogs(spark, [spec])


def register(client: TestClient, spec: CatalogSpec, **extra: str) -> None:
    body = {"name": spec.name, "type": spec.type, "properties": {**spec.properties, **extra}}
    response = client.post("/api/v1/catalogs", json=body)
    assert response.status_code == 201, response.text


def refresh(client: TestClient, name: str) -> dict[str, Any]:
    response = client.post(f"/api/v1/catalogs/{name}/refresh")
    assert response.status_code == 200, response.text
    return dict(response.json())


def listed(client: TestClient, **params: str) -> list[str]:
    return [t["identifier"] for t in client.get("/api/v1/tables", params=params).json()]


def test_explorer_discovers_updates_and_disposes(
    client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec
) -> None:
    c = sql_catalog.name
    register(client, sql_catalog, **{"database-filter": "db(\\..*)?"})
    use_in_spark(spark, sql_catalog)
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE NAMESPACE {c}.db.inner")
    spark.sql(f"CREATE NAMESPACE {c}.scratch")
    spark.sql(f"CREATE TABLE {c}.db.events (id BIGINT, ts TIMESTAMP, v STRING) USING iceberg PARTITIONED BY (days(ts))")
    spark.sql(f"CREATE TABLE {c}.db.plain (id BIGINT) USING iceberg")
    spark.sql(f"CREATE TABLE {c}.db.inner.deep (id BIGINT) USING iceberg")
    spark.sql(f"CREATE TABLE {c}.scratch.tmp (id BIGINT) USING iceberg")
    for day in (1, 2, 3):
        spark.sql(f"INSERT INTO {c}.db.events VALUES ({day}, TIMESTAMP '2026-01-0{day} 10:00:00', 'x')")

    result = refresh(client, c)
    assert result["health"] == "healthy", result
    assert sorted(result["added"]) == [f"{c}.db.events", f"{c}.db.inner.deep", f"{c}.db.plain"]
    assert listed(client, catalog=c) == [f"{c}.db.events", f"{c}.db.plain", f"{c}.db.inner.deep"]

    shown = client.get(f"/api/v1/tables/{c}/db/events").json()
    files = spark.sql(f"SELECT count(*) AS n, sum(file_size_in_bytes) AS b FROM {c}.db.events.files").first()
    assert files is not None
    assert shown["status"] == "idle"
    assert shown["group"] == "default"
    assert shown["data_files"] == files["n"] == 3
    assert shown["files_size_bytes"] == files["b"]
    assert shown["summary"]["records"] == 3
    assert shown["summary"]["partition-spec"] == ["day(ts)"]
    assert shown["config"]["self-optimizing.target-size"] == "134217728"
    assert shown["metadata_location"].endswith(".metadata.json")

    # nothing changed: nothing updated, and no table read (the SQL catalog lists each table's metadata location)
    unchanged = refresh(client, c)
    assert unchanged["updated"] == [] and unchanged["loaded"] == 0 and unchanged["tables"] == 3
    # nor after a restart (an explorer with nothing in memory): the defaults every table was loaded with are kept
    ctx = client.app.state.context  # type: ignore[attr-defined]
    assert TableExplorer(ctx.db, 60, 2, internal=ctx.internal).refresh(c).loaded == 0

    # a commit moves the metadata location: the runtime follows
    spark.sql(f"INSERT INTO {c}.db.events VALUES (4, TIMESTAMP '2026-01-04 10:00:00', 'y')")
    spark.sql(f"ALTER TABLE {c}.db.plain SET TBLPROPERTIES ('self-optimizing.target-size'='1048576')")
    result = refresh(client, c)
    assert sorted(result["updated"]) == [f"{c}.db.events", f"{c}.db.plain"] and result["loaded"] == 2
    assert client.get(f"/api/v1/tables/{c}/db/events").json()["data_files"] == 4
    plain = client.get(f"/api/v1/tables/{c}/db/plain").json()
    assert plain["config"]["self-optimizing.target-size"] == "1048576"

    # a table Spark drops is disposed
    spark.sql(f"DROP TABLE {c}.db.plain")
    result = refresh(client, c)
    assert result["disposed"] == [f"{c}.db.plain"]
    assert listed(client, catalog=c) == [f"{c}.db.events", f"{c}.db.inner.deep"]
    assert client.get(f"/api/v1/tables/{c}/db/plain").status_code == 404

    # a table whose metadata could not be read is read again at the next pass, though its location did not move
    spark.sql(f"CREATE TABLE {c}.db.flaky (id BIGINT) USING iceberg")
    row = spark.sql(f"SELECT file FROM {c}.db.flaky.metadata_log_entries").first()
    assert row is not None
    metadata = Path(str(row[0]).removeprefix("file:"))
    metadata.rename(metadata.with_name("hidden"))
    result = refresh(client, c)
    assert result["added"] == [f"{c}.db.flaky"] and result["loaded"] == 1
    assert client.get(f"/api/v1/tables/{c}/db/flaky").json()["refresh_error"]
    metadata.with_name("hidden").rename(metadata)
    result = refresh(client, c)
    assert result["updated"] == [f"{c}.db.flaky"] and result["loaded"] == 1
    assert client.get(f"/api/v1/tables/{c}/db/flaky").json()["refresh_error"] is None


def test_unreachable_catalog_keeps_its_tables(
    client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec
) -> None:
    c = sql_catalog.name
    register(client, sql_catalog)
    use_in_spark(spark, sql_catalog)
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE TABLE {c}.db.t1 (id BIGINT) USING iceberg")
    spark.sql(f"CREATE TABLE {c}.db.t2 (id BIGINT) USING iceberg")
    assert len(refresh(client, c)["added"]) == 2

    database = Path(sql_catalog.properties["uri"].removeprefix("sqlite:///"))
    moved = database.with_suffix(".away")
    database.rename(moved)
    try:
        result = refresh(client, c)
        assert result["health"] == "unhealthy"
        assert result["disposed"] == []
        assert "unable to open database file" in result["error"]
        catalog = client.get(f"/api/v1/catalogs/{c}").json()
        assert (catalog["health"], catalog["last_error"]) == ("unhealthy", result["error"])
        assert listed(client, catalog=c) == [f"{c}.db.t1", f"{c}.db.t2"]
        assert not database.exists()  # exploring must not create an empty catalog in its place
    finally:
        moved.rename(database)
    result = refresh(client, c)
    assert result["health"] == "healthy"
    assert client.get(f"/api/v1/catalogs/{c}").json()["last_error"] is None
    assert listed(client, catalog=c) == [f"{c}.db.t1", f"{c}.db.t2"]


def test_groups_follow_catalog_defaults_and_table_properties(
    client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec
) -> None:
    c = sql_catalog.name
    for group in ("etl", "adhoc"):
        assert client.post("/api/v1/resource-groups", json={"name": group, "container": "local"}).status_code == 201
    register(client, sql_catalog, **{"table.self-optimizing.group": "etl", "table.self-optimizing.quota": "0.25"})
    use_in_spark(spark, sql_catalog)
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE TABLE {c}.db.a (id BIGINT) USING iceberg")
    spark.sql(f"CREATE TABLE {c}.db.b (id BIGINT) USING iceberg TBLPROPERTIES ('self-optimizing.group'='adhoc')")
    refresh(client, c)

    assert listed(client, group="etl") == [f"{c}.db.a"]
    assert listed(client, group="adhoc") == [f"{c}.db.b"]
    assert listed(client, status="idle", catalog=c) == [f"{c}.db.a", f"{c}.db.b"]
    assert listed(client, status="pending") == []
    a = client.get(f"/api/v1/tables/{c}/db/a").json()
    assert a["config"]["self-optimizing.quota"] == "0.25"

    response = client.delete("/api/v1/resource-groups/adhoc")
    assert response.status_code == 409
    assert "used by 1 table" in response.json()["error"]["message"]
    groups = {g["name"]: g["table_count"] for g in client.get("/api/v1/resource-groups").json()}
    assert groups == {"default": 0, "etl": 1, "adhoc": 1}

    # changing the catalog default moves the tables that do not set their own group
    props = {**sql_catalog.properties, "table.self-optimizing.group": "default"}
    assert client.put(f"/api/v1/catalogs/{c}", json={"properties": props}).status_code == 200
    refresh(client, c)
    assert listed(client, group="default") == [f"{c}.db.a"]
    assert client.delete("/api/v1/resource-groups/etl").status_code == 204


def test_removing_a_catalog_forgets_its_tables_only(
    client: TestClient, spark: SparkSession, sql_catalog: CatalogSpec, tmp_path: Path
) -> None:
    c = sql_catalog.name
    register(client, sql_catalog)
    use_in_spark(spark, sql_catalog)
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE TABLE {c}.db.t (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {c}.db.t VALUES (1), (2)")
    refresh(client, c)
    assert client.delete(f"/api/v1/catalogs/{c}").status_code == 204
    assert listed(client) == []
    assert spark.sql(f"SELECT count(*) FROM {c}.db.t").collect()[0][0] == 2  # the data is untouched


def test_an_internal_catalog_is_listed_from_its_pointers(server: ServerProcess) -> None:
    """lakewarden's own catalog lists every table's metadata location in one read: a pass over unchanged tables
    reads none of them, nested namespaces included, and drops none."""
    catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    catalog.create_namespace("outer")
    catalog.create_namespace(("outer", "inner"))
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    catalog.create_table("outer.a", schema)
    nested = catalog.create_table(("outer", "inner", "b"), schema)
    api = server.api()
    first = api.post("/catalogs/lake/refresh").json()
    assert first["tables"] == 2 and first["disposed"] == [], first
    again = api.post("/catalogs/lake/refresh").json()
    assert (again["tables"], again["loaded"], again["added"], again["disposed"]) == (2, 0, [], []), again
    nested.append(pa.table({"id": pa.array([1], pa.int64())}))
    moved = api.post("/catalogs/lake/refresh").json()
    # the commit's own event may have refreshed the table already: then nothing is left to read
    assert moved["loaded"] in (0, 1) and moved["disposed"] == [], moved
    assert api.get("/tables/lake/outer.inner/b").json()["summary"]["records"] == 1
