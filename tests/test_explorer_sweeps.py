"""When the explorer sweeps an internal catalog: its changes arrive as events, so the full sweep is a safety
net (a node's first pass, new table defaults, then every `refresh-internal-catalogs.interval`)."""

from __future__ import annotations

import itertools
import time
from typing import Any

from fastapi.testclient import TestClient
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import ProcessPlan
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.services.tables.explorer import TableExplorer
from lakewarden.store import processes as process_store
from lakewarden.store import tables as table_store
from lakewarden.store.runtime import transition_table
from tests.helpers import minor_task

TABLE = {"schema": {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}
]}}  # fmt: skip


def known(client: TestClient) -> set[str]:
    return {t["identifier"] for t in client.get("/api/v1/tables", params={"catalog": "lake"}).json()}


def create(client: TestClient, name: str) -> None:
    """A table made through the REST catalog; its event is not handled (no services run in this app)."""
    created = client.post("/iceberg/v1/lake/namespaces/db/tables", json={"name": name, **TABLE})
    assert created.status_code == 200, created.text


def test_an_internal_catalog_is_swept_first_on_new_defaults_and_then_at_its_interval(client: TestClient) -> None:
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    create(client, "a")
    ctx = client.app.state.context  # type: ignore[attr-defined]
    explorer = TableExplorer(ctx.db, 60, 2, internal=ctx.internal, internal_interval=3600)

    explorer.run_once()  # a node's first pass sweeps
    assert known(client) == {"lake.db.a"}
    create(client, "b")
    explorer.run_once()  # within the interval: no sweep (the table's event would have brought it)
    assert known(client) == {"lake.db.a"}

    # new table defaults: every table's configuration changes, so the catalog is swept (and all of it loaded)
    changed = client.put("/api/v1/catalogs/lake", json={"properties": {"table.self-optimizing.target-size": "1048576"}})
    assert changed.status_code == 200, changed.text
    explorer.run_once()
    assert known(client) == {"lake.db.a", "lake.db.b"}
    shown = client.get("/api/v1/tables/lake/db/a").json()
    assert shown["config"]["self-optimizing.target-size"] == "1048576"
    create(client, "c")
    explorer.run_once()  # the defaults were loaded: no sweep again
    assert "lake.db.c" not in known(client)

    explorer.internal_interval = 0.0  # the interval passed
    explorer.run_once()
    assert "lake.db.c" in known(client)

    # a node that starts (or starts leading again) sweeps at once, whatever the interval says
    explorer.internal_interval = 3600
    create(client, "d")
    explorer.start()
    try:
        deadline = time.monotonic() + 30
        while "lake.db.d" not in known(client) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        explorer.stop()
    assert "lake.db.d" in known(client)


def test_a_watched_catalog_is_swept_every_watch_interval_others_every_interval(
    client: TestClient, sql_catalog: CatalogSpec
) -> None:
    body = {"name": sql_catalog.name, "type": sql_catalog.type, "properties": sql_catalog.properties}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    outside = SqlCatalog(sql_catalog.name, **sql_catalog.properties)
    outside.create_namespace("db")
    ctx = client.app.state.context  # type: ignore[attr-defined]

    def listed() -> set[str]:
        return {t["identifier"] for t in client.get("/api/v1/tables", params={"catalog": sql_catalog.name}).json()}

    # an SQL catalog's tables' locations are read in one pass: it is watched, every pass here
    watching = TableExplorer(ctx.db, 60, 2, internal=ctx.internal, internal_interval=3600, watch_interval=0)
    for name in ("a", "b"):
        outside.create_table(f"db.{name}", Schema(NestedField(1, "id", LongType(), required=False)))
        watching.run_once()
        assert f"{sql_catalog.name}.db.{name}" in listed()
    # not watched: swept at a node's first pass, then once a minute
    sweeping = TableExplorer(ctx.db, 60, 2, internal=ctx.internal, internal_interval=3600, watch_interval=None)
    sweeping.run_once()
    outside.create_table("db.c", Schema(NestedField(1, "id", LongType(), required=False)))
    sweeping.run_once()
    assert f"{sql_catalog.name}.db.c" not in listed()
    assert sweeping.interval_seconds == 60 and watching.interval_seconds == 0


def set_properties(client: TestClient, name: str, **properties: str) -> None:
    body = {"requirements": [], "updates": [{"action": "set-properties", "updates": properties}]}
    committed = client.post(f"/iceberg/v1/lake/namespaces/db/tables/{name}", json=body)
    assert committed.status_code == 200, committed.text


def running_process(client: TestClient, name: TableIdentifier) -> int:
    """A running minor-optimizing process of two tasks on the table, as the planner leaves it."""
    ctx = client.app.state.context  # type: ignore[attr-defined]
    with ctx.db.write() as session:
        rec = table_store.get_table(session, name)
        specs = [minor_task("p=0", [0]), minor_task("p=1", [1])]
        plan = ProcessPlan("minor", 1, specs)
        process_id: int = process_store.create_process(session, rec, "default", "optimizing", plan).process_id
        steps = [TableStatus.IDLE, TableStatus.PENDING, TableStatus.PLANNING, TableStatus.MINOR_OPTIMIZING]
        for a, b in itertools.pairwise(steps):
            assert transition_table(session, rec.runtime.table_id, a, b, optimizing_process_id=process_id)
    return process_id


def test_a_configuration_change_closes_the_running_process_as_amoro_does(client: TestClient) -> None:
    """A refresh that sees a table's self-optimizing turned off, or the table moved to another resource group,
    ends its running process CANCELED (Amoro's handleConfigChanged closes it without committing); any other
    change leaves it running, and so does turning off a table with no process."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/api/v1/resource-groups", json={"name": "etl", "container": "local"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    create(client, "t")
    ctx = client.app.state.context  # type: ignore[attr-defined]
    name = TableIdentifier("lake", "db", "t")
    ctx.explorer.refresh("lake")

    def process(process_id: int) -> dict[str, Any]:
        return dict(client.get(f"/api/v1/processes/{process_id}").json())

    def table() -> dict[str, Any]:
        return dict(client.get("/api/v1/tables/lake/db/t").json())

    def refresh(**properties: str) -> dict[int, str]:
        set_properties(client, "t", **properties)
        closing: dict[int, str] = ctx.explorer.refresh_tables("lake", {name}).closing
        return closing

    first = running_process(client, name)
    assert refresh(**{"self-optimizing.target-size": "1048576"}) == {}  # still on, same group
    assert process(first)["status"] == "running" and table()["status"] == "minor_optimizing"

    assert refresh(**{"self-optimizing.enabled": "false"}) == {first: "self-optimizing was turned off"}
    ended = process(first)
    assert ended["status"] == "canceled" and ended["fail_reason"] == "self-optimizing was turned off"
    assert {t["status"] for t in ended["tasks"]} == {"canceled"}
    assert table()["status"] == "idle"
    assert refresh(**{"self-optimizing.enabled": "true"}) == {}  # on again; off with no process: nothing to close
    assert refresh(**{"self-optimizing.enabled": "false"}) == {}
    assert refresh(**{"self-optimizing.enabled": "true"}) == {}

    second = running_process(client, name)
    assert refresh(**{"self-optimizing.group": "etl"}) == {second: "the table moved to resource group etl"}
    assert process(second)["status"] == "canceled" and table()["status"] == "idle"
    assert table()["group"] == "etl"


def test_an_events_refresh_reads_only_the_named_tables_and_adds_updates_and_disposes_them(client: TestClient) -> None:
    """refresh_tables (an event batch's) finds the named tables by their whole names: a new one is added, a
    committed one updated, a dropped one disposed; a name that exists nowhere is nothing, and a table not named
    (the same name in another namespace among them) is left alone."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    for namespace in ("db", "other"):
        assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": [namespace]}).status_code == 200
    for name in ("kept", "committed", "dropped"):
        create(client, name)
    made = client.post("/iceberg/v1/lake/namespaces/other/tables", json={"name": "committed", **TABLE})
    assert made.status_code == 200, made.text
    ctx = client.app.state.context  # type: ignore[attr-defined]
    ctx.explorer.refresh("lake")
    assert known(client) == {"lake.db.kept", "lake.db.committed", "lake.db.dropped", "lake.other.committed"}

    def location(name: str) -> str:
        return str(client.get(f"/api/v1/tables/lake/{name}").json()["metadata_location"])

    before = {name: location(name) for name in ("db/kept", "db/committed", "other/committed")}
    create(client, "new")
    set_properties(client, "committed", color="blue")
    committed = client.post(
        "/iceberg/v1/lake/namespaces/other/tables/committed",
        json={"updates": [{"action": "set-properties", "updates": {"color": "red"}}]},
    )
    assert committed.status_code == 200, committed.text
    assert client.delete("/iceberg/v1/lake/namespaces/db/tables/dropped").status_code == 204

    names = {TableIdentifier("lake", "db", t) for t in ("new", "committed", "dropped", "absent")}
    result = ctx.explorer.refresh_tables("lake", names)
    assert result.added == ["lake.db.new"] and result.updated == ["lake.db.committed"]
    assert result.disposed == ["lake.db.dropped"]
    assert known(client) == {"lake.db.kept", "lake.db.committed", "lake.db.new", "lake.other.committed"}
    assert location("db/committed") != before["db/committed"]
    assert location("db/kept") == before["db/kept"]
    assert location("other/committed") == before["other/committed"]  # the same table name in another namespace


def test_tables_are_found_by_name_and_by_id_past_one_in_list(client: TestClient) -> None:
    """More names than one `IN (...)` list holds (IN_CHUNK), over two databases with the same table names: every
    record is found once, by name and by id, and a name of another database or catalog finds nothing."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    ctx = client.app.state.context  # type: ignore[attr-defined]
    names = {TableIdentifier("lake", db, f"t{i}") for db in ("a", "b") for i in range(table_store.IN_CHUNK + 1)}
    with ctx.db.write() as session:
        ids = [table_store.add_table(session, name, "default", {}).runtime.table_id for name in sorted(names)]
    elsewhere = {TableIdentifier("lake", "c", "t0"), TableIdentifier("other", "a", "t0")}
    with ctx.db.read() as session:
        by_name = table_store.tables_by_name(session, "lake", names | elsewhere)
        by_id = table_store.tables_by_id(session, ids)
    assert set(by_name) == names and set(by_id) == names
    assert {r.runtime.table_id for r in by_name.values()} == set(ids)
