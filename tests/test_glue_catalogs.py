"""Tables in AWS Glue (moto's Glue, checking table versions as Glue does), and lakewarden's REST catalog as one
endpoint for a team's catalogs: every request forwarded to the catalog of record, a commit there its own
compare-and-swap; lakewarden's optimizers reach Glue tables that way, since Spark has no Glue client here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from lakewarden.domain.catalogs import CatalogSpec, validate_catalog
from lakewarden.domain.errors import InvalidField
from lakewarden.metadata.glue import GlueTables
from tests.glue import GlueServer, glue_server
from tests.helpers import running_optimizer, wait_for
from tests.servers import ServerProcess, free_port, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("cat", pa.string())])
SMALL_FILES = {"self-optimizing.minor.trigger.file-count": "3", "self-optimizing.min-plan-interval": "0"}


def _rows(start: int, count: int = 5) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "cat": pa.array(["a" if i % 2 else "b" for i in ids])})


@pytest.mark.parametrize(
    ("properties", "field"),
    [
        ({"glue.endpoint": "127.0.0.1:5000"}, "properties.glue.endpoint"),
        ({"glue.access-key-id": "id"}, "properties.glue.secret-access-key"),
        ({"rest-endpoint.enabled": "yes"}, "properties.rest-endpoint.enabled"),
        ({"glue.max-retries": "many"}, "properties.glue.max-retries"),
    ],
)
def test_a_glue_catalog_is_checked_before_it_is_registered(properties: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidField) as raised:
        validate_catalog(CatalogSpec("g", "glue", properties))
    assert raised.value.field == field
    with pytest.raises(InvalidField, match="filesystem catalogs cannot be served"):
        validate_catalog(CatalogSpec("f", "filesystem", {"warehouse": "/w", "rest-endpoint.enabled": "true"}))


@pytest.fixture(scope="module")
def glue() -> Iterator[GlueServer]:
    with glue_server() as server:
        yield server


@pytest.fixture(scope="module")
def team(glue: GlueServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The team's Glue catalog, as pyiceberg's GlueCatalog is configured, with a database `db`."""
    properties = glue.properties(f"file://{tmp_path_factory.mktemp('glue-warehouse')}")
    GlueTables("team", **properties).create_namespace("db")
    return properties


@pytest.fixture(scope="module")
def glue_lake(team: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with the Glue catalog registered (its REST endpoint off, as by default)."""
    with started_server(tmp_path_factory.mktemp("glue-server"), extra="  evaluator: {interval: 1s}\n") as server:
        created = server.api().post("/catalogs", json={"name": "team", "type": "glue", "properties": team})
        assert created.status_code == 201, created.text
        yield server


def _through_lakewarden(server: ServerProcess, **extra: str) -> RestCatalog:
    return RestCatalog("via", uri=f"{server.url}/iceberg", warehouse="team", token=server.token, **extra)


def test_the_server_lists_glue_tables_and_reads_only_the_moved_ones(
    glue_lake: ServerProcess, team: dict[str, str]
) -> None:
    writer = GlueTables("team", **team)
    for name in ("listed1", "listed2"):
        writer.create_table(f"db.{name}", SCHEMA).append(_rows(0))
    api = glue_lake.api()
    refreshed = api.post("/catalogs/team/refresh").json()
    assert refreshed["health"] == "healthy", refreshed
    names = {t["identifier"] for t in api.get("/tables", params={"catalog": "team"}).json()}
    assert {"team.db.listed1", "team.db.listed2"} <= names
    assert api.post("/catalogs/team/refresh").json()["loaded"] == 0  # nothing moved: nothing read
    writer.load_table("db.listed1").append(_rows(10))
    again = api.post("/catalogs/team/refresh").json()
    assert again["loaded"] <= 1 and api.get("/tables/team/db/listed1").json()["metadata_location"] == (
        writer.load_table("db.listed1").metadata_location
    )
    shown = api.get("/catalogs/team").json()["properties"]
    assert shown["glue.secret-access-key"] == "****"


def test_forwarding_is_off_until_the_catalog_enables_it_then_any_client_reads_and_writes(
    glue_lake: ServerProcess, team: dict[str, str]
) -> None:
    writer = GlueTables("team", **team)
    writer.create_table("db.shared", SCHEMA).append(_rows(0))
    refused = httpx.get(f"{glue_lake.url}/iceberg/v1/config", params={"warehouse": "team"}, headers=glue_lake.headers)
    assert refused.status_code == 403 and "rest-endpoint.enabled=true" in refused.text

    api = glue_lake.api()
    properties = {**api.get("/catalogs/team").json()["properties"], "rest-endpoint.enabled": "true"}
    assert api.put("/catalogs/team", json={"properties": properties}).status_code == 200
    try:
        client = _through_lakewarden(glue_lake)
        assert ("db",) in client.list_namespaces()
        assert ("db", "shared") in client.list_tables("db")
        table = client.load_table("db.shared")
        assert table.metadata_location == writer.load_table("db.shared").metadata_location
        table.append(_rows(100))  # through lakewarden, committed in Glue: the catalog of record has it
        in_glue = writer.load_table("db.shared")
        assert in_glue.metadata_location == client.load_table("db.shared").metadata_location
        assert sorted(in_glue.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104]

        # a client's stale view is refused (409), never applied over the newer commit
        stale = client.load_table("db.shared")
        writer.load_table("db.shared").append(_rows(200))
        snapshot = stale.metadata.current_snapshot_id
        body = {
            "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot}],
            "updates": [{"action": "set-properties", "updates": {"stale": "yes"}}],
        }
        url = f"{glue_lake.url}/iceberg/v1/team/namespaces/db/tables/shared"
        conflict = httpx.post(url, json=body, headers=glue_lake.headers)
        assert conflict.status_code == 409, conflict.text
        assert "stale" not in writer.load_table("db.shared").properties
        # the same stale client appending: refused, retried on the fresh table as pyiceberg retries, both kept
        stale.append(_rows(300))
        ids = writer.load_table("db.shared").scan().to_arrow()["id"].to_pylist()
        assert {200, 300} <= set(ids) and len(ids) == 20

        # entity tags: an unchanged table answers 304
        loaded = httpx.get(url, headers=glue_lake.headers)
        etag = loaded.headers["etag"]
        assert httpx.get(url, headers={**glue_lake.headers, "If-None-Match": etag}).status_code == 304

        # the commit reached the evaluator as an event: the table's runtime has the new location
        location = writer.load_table("db.shared").metadata_location
        wait_for("the runtime moved", lambda: api.get("/tables/team/db/shared").json()["metadata_location"] == location)
        # dropped through lakewarden: gone from Glue, its files left where they are
        files = [f.file.file_path for f in writer.load_table("db.shared").scan().plan_files()]
        assert httpx.delete(url, params={"purgeRequested": "true"}, headers=glue_lake.headers).status_code == 406
        assert httpx.delete(url, headers=glue_lake.headers).status_code == 204
        assert ("db", "shared") not in writer.list_tables("db")
        assert all(Path(f.removeprefix("file:")).exists() for f in files)
    finally:
        properties["rest-endpoint.enabled"] = "false"
        api.put("/catalogs/team", json={"properties": properties})


@pytest.mark.spark
@pytest.mark.slow
def test_an_optimizer_compacts_a_glue_table_through_lakewardens_rest_catalog(
    glue_lake: ServerProcess, team: dict[str, str], spark: SparkSession
) -> None:
    writer = GlueTables("team", **team)
    table = writer.create_table("db.small", SCHEMA, properties=SMALL_FILES)
    for start in range(0, 20, 5):
        writer.load_table("db.small").append(_rows(start))
    before = sorted(writer.load_table("db.small").scan().to_arrow()["id"].to_pylist())
    assert len(list(writer.load_table("db.small").scan().plan_files())) == 4
    api = glue_lake.api()

    def pending() -> dict[str, Any] | None:
        found = api.get("/tables/team/db/small")
        return found.json() if found.status_code == 200 and found.json()["status"] == "pending" else None

    wait_for("the table pending", pending, timeout=60)
    with running_optimizer(glue_lake, spark):
        process = wait_for(
            "a finished process",
            lambda: next(
                (p for p in api.get("/processes").json() if p["table"] == "team.db.small" and p["status"] != "running"),
                None,
            ),
        )
    assert process["status"] == "success", process
    in_glue = writer.load_table("db.small")
    assert sorted(in_glue.scan().to_arrow()["id"].to_pylist()) == before
    assert len(list(in_glue.scan().plan_files())) == 1
    assert in_glue.metadata_location != table.metadata_location
    current = in_glue.current_snapshot()
    summary = None if current is None else current.summary
    assert summary is not None and summary["lakewarden.process-id"] == str(process["process_id"])


def test_glue_that_cannot_be_reached_marks_the_catalog_unhealthy_and_keeps_its_tables(
    glue_lake: ServerProcess, team: dict[str, str]
) -> None:
    GlueTables("team", **team).create_table("db.kept_through", SCHEMA).append(_rows(0))
    api = glue_lake.api()
    body = {"name": "flaky", "type": "glue", "properties": {**team, "glue.max-retries": "1"}}
    assert api.post("/catalogs", json=body).status_code == 201
    assert api.post("/catalogs/flaky/refresh").json()["health"] == "healthy"
    listed = {t["identifier"] for t in api.get("/tables", params={"catalog": "flaky"}).json()}
    assert "flaky.db.kept_through" in listed
    gone = {**api.get("/catalogs/flaky").json()["properties"], "glue.endpoint": f"http://127.0.0.1:{free_port()}"}
    assert api.put("/catalogs/flaky", json={"properties": gone}).status_code == 200
    refreshed = api.post("/catalogs/flaky/refresh").json()
    assert refreshed["health"] == "unhealthy" and "Could not connect" in refreshed["error"]
    assert {t["identifier"] for t in api.get("/tables", params={"catalog": "flaky"}).json()} == listed
    back = {**gone, "glue.endpoint": team["glue.endpoint"]}
    assert api.put("/catalogs/flaky", json={"properties": back}).status_code == 200
    assert api.post("/catalogs/flaky/refresh").json()["health"] == "healthy"
    assert api.delete("/catalogs/flaky").status_code == 204
