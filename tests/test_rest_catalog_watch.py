"""External catalogs seen through REST: an external REST catalog watched with conditional loads (lakewarden's own
REST catalog, which sends entity tags, registered as a `rest` catalog of another name, its tables' locations
learned with `If-None-Match`), and an SQL catalog served by lakewarden's REST catalog, forwarded to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

from lakewarden._compat.pyiceberg import rest_session
from lakewarden.domain.catalogs import CatalogSpec, TableFilter
from lakewarden.metadata.catalogs import open_catalog, table_locations
from tests.servers import ServerProcess

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def test_a_rest_catalogs_unchanged_tables_answer_304_and_a_moved_one_its_new_location(server: ServerProcess) -> None:
    writer = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    writer.create_namespace("watched")
    for name in ("a", "b", "c"):
        writer.create_table(f"watched.{name}", SCHEMA).append(pa.table({"id": pa.array([1], pa.int64())}))
    spec = CatalogSpec("remote", "rest", {"uri": f"{server.url}/iceberg", "warehouse": "lake", "token": server.token})
    statuses: list[int] = []

    def watched() -> dict[tuple[str, str], str]:
        reader = open_catalog(spec)
        rest_session(reader).hooks["response"].append(lambda r, *args, **kwargs: statuses.append(r.status_code))
        found = table_locations(reader, TableFilter.of(spec))
        assert found is not None
        return {k: v for k, v in found.items() if k[0] == "watched"}

    first = watched()
    assert set(first) == {("watched", "a"), ("watched", "b"), ("watched", "c")}
    assert first[("watched", "a")] == writer.load_table("watched.a").metadata_location
    statuses.clear()
    writer.load_table("watched.b").append(pa.table({"id": pa.array([2], pa.int64())}))
    second = watched()
    loads: Any = [s for s in statuses if s in (200, 304)]
    assert loads.count(304) >= 2  # a and c unchanged: no body
    assert second[("watched", "b")] == writer.load_table("watched.b").metadata_location != first[("watched", "b")]
    assert second[("watched", "a")] == first[("watched", "a")] and second[("watched", "c")] == first[("watched", "c")]


def test_an_sql_catalog_served_through_the_rest_endpoint_commits_in_its_own_database(
    server: ServerProcess, tmp_path: Path
) -> None:
    properties = {"uri": f"sqlite:///{tmp_path}/team.db", "warehouse": f"file://{tmp_path}/warehouse"}
    outside = SqlCatalog("team", **properties)  # the catalog of record, as its writers open it
    outside.create_namespace("db")
    outside.create_table("db.t", SCHEMA).append(pa.table({"id": pa.array([1], pa.int64())}))
    api = server.api()
    body = {"name": "team", "type": "sql", "properties": {**properties, "rest-endpoint.enabled": "true"}}
    assert api.post("/catalogs", json=body).status_code == 201
    client = RestCatalog("via", uri=f"{server.url}/iceberg", warehouse="team", token=server.token)
    client.load_table("db.t").append(pa.table({"id": pa.array([2], pa.int64())}))
    assert sorted(outside.load_table("db.t").scan().to_arrow()["id"].to_pylist()) == [1, 2]
    created = client.create_table("db.made_here", SCHEMA)
    assert outside.load_table("db.made_here").metadata_location == created.metadata_location
    events = api.get("/events", params={"catalog": "team"}).json()
    kinds = {(e["type"], e["table"]) for e in events}
    assert ("table-committed", "t") in kinds and ("table-created", "made_here") in kinds
