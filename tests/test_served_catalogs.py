"""The REST routes' one catalog face (services/rest_catalog/served.py) and the typed events every change publishes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import Unsupported
from lakewarden.domain.events import CatalogEvent, EventType, InvalidEvent
from lakewarden.domain.security import Principal, Role
from lakewarden.services.rest_catalog.forwarded import ForwardedCatalog
from lakewarden.services.rest_catalog.own import OwnCatalog
from lakewarden.services.rest_catalog.served import ServedCatalog
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database
from lakewarden.store.models import EventRow

BASE = "/iceberg/v1"


def _published(client: TestClient) -> list[CatalogEvent]:
    published: list[CatalogEvent] = []
    client.app.state.context.rest_catalog.outbox.subscribe(published.append)  # type: ignore[attr-defined]
    return published


def test_every_change_to_a_namespace_publishes_its_event(client: TestClient) -> None:
    """The namespace-properties update goes through the catalog's service like every other change: it writes its
    event in its transaction and publishes it, and a listener catching up reads the same event back."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    published = _published(client)
    assert client.post(f"{BASE}/lake/namespaces", json={"namespace": ["db"], "properties": {"a": "1"}}).is_success
    body = {"removals": ["a", "gone"], "updates": {"b": "2"}}
    updated = client.post(f"{BASE}/lake/namespaces/db/properties", json=body)
    assert updated.json() == {"updated": ["b"], "removed": ["a"], "missing": ["gone"]}
    refused = client.post(f"{BASE}/lake/namespaces/db/properties", json={"removals": ["b"], "updates": {"b": "3"}})
    assert refused.status_code == 422 and "removals" in refused.text  # nothing changed, no event
    assert client.delete(f"{BASE}/lake/namespaces/db").status_code == 204
    assert [e.type for e in published] == [
        EventType.NAMESPACE_CREATED,
        EventType.NAMESPACE_UPDATED,
        EventType.NAMESPACE_DROPPED,
    ]
    change = published[1]
    assert (change.catalog, change.namespace, change.table) == ("lake", ("db",), None)
    assert change.payload == {"updated": ["b"], "removed": ["a"]}
    events = client.get("/api/v1/events", params={"after": 0}).json()
    assert [e["type"] for e in events] == [str(e.type) for e in published]
    db: Database = client.app.state.context.db  # type: ignore[attr-defined]
    with db.read() as session:
        stored = [store.stored_event(row) for row in store.events_after(session, 0, 10)]
    assert stored == published


def test_an_event_its_type_does_not_know_is_refused_where_it_is_written_and_where_it_is_read(
    client: TestClient,
) -> None:
    db: Database = client.app.state.context.db  # type: ignore[attr-defined]

    def count() -> int:
        with db.read() as session:
            return int(session.scalar(select(func.count()).select_from(EventRow)) or 0)

    with db.write(any_node=True) as session, pytest.raises(InvalidEvent, match="table-exploded"):
        store.add_event(session, "table-exploded", "lake", "db", "t", {})
    with db.write(any_node=True) as session, pytest.raises(InvalidEvent, match="colour"):
        store.add_event(session, EventType.TABLE_COMMITTED, "lake", "db", "t", {"version": 1, "colour": "red"})
    assert count() == 0
    with db.write(any_node=True) as session:
        written = store.add_event(session, EventType.TABLE_DROPPED, "lake", "db", "t", {"purge": False})
        row = session.get(EventRow, written.event_id)
        assert row is not None
        row.type = "table-vanished"  # a row no version of lakewarden wrote
    with db.read() as session, pytest.raises(InvalidEvent, match="table-vanished"):
        store.stored_event(store.events_after(session, 0, 10)[0])


def test_the_prefix_chooses_the_catalog_in_one_place(client: TestClient, sql_catalog: CatalogSpec) -> None:
    """An internal catalog and an unknown name are lakewarden's own (the unknown one answers 404 where it is used);
    an external catalog served to clients is forwarded, and what it does not serve answers the spec's 406 (its
    config lists only what it serves)."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    properties = {**sql_catalog.properties, "rest-endpoint.enabled": "true"}
    registered = client.post("/api/v1/catalogs", json={"name": "team", "type": "sql", "properties": properties})
    assert registered.status_code == 201, registered.text
    closed = client.post("/api/v1/catalogs", json={"name": "shut", "type": "sql", "properties": sql_catalog.properties})
    assert closed.status_code == 201, closed.text
    rest = client.app.state.context.rest_catalog  # type: ignore[attr-defined]
    user = Principal(name="someone", role=Role.ADMIN)
    assert isinstance(rest.served("lake", user), OwnCatalog)
    assert isinstance(rest.served("nowhere", user), OwnCatalog)
    assert isinstance(rest.served("team", user), ForwardedCatalog)
    assert rest.served_known("team", user) is not None  # looked up once: known without I/O from then on
    # an external catalog not opened to clients is not served at all (Glue's, which lakewarden's optimizers reach
    # through it, is refused to other clients: test_glue_catalogs.py)
    assert isinstance(rest.served("shut", user), OwnCatalog)
    assert client.get(f"{BASE}/shut/namespaces").status_code == 404

    assert client.get(f"{BASE}/nowhere/namespaces").status_code == 404
    assert client.post(f"{BASE}/team/namespaces", json={"namespace": ["db"]}).status_code == 200
    assert client.get(f"{BASE}/team/namespaces").json()["namespaces"] == [["db"]]
    config = client.get(f"{BASE}/config", params={"warehouse": "team"}).json()
    served = set(config["endpoints"])
    for method, path, json in [
        ("DELETE", "namespaces/db", None),
        ("POST", "namespaces/db/properties", {"updates": {"a": "b"}}),
        ("GET", "namespaces/db/views", None),
        ("POST", "tables/rename", {"source": {"namespace": ["db"], "name": "a"}, "destination": _ref("b")}),
        ("POST", "transactions/commit", {"table-changes": [{"identifier": _ref("a"), "updates": []}]}),
    ]:
        answer = client.request(method, f"{BASE}/team/{path}", json=json)
        assert answer.status_code == 406, (path, answer.text)
        assert "team" in answer.json()["error"]["message"]
    assert "DELETE /v1/{prefix}/namespaces/{namespace}" not in served
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in served
    assert set(ForwardedCatalog.endpoints) < set(OwnCatalog.endpoints)


def _ref(name: str) -> dict[str, Any]:
    return {"namespace": ["db"], "name": name}


def test_a_kind_of_catalog_serves_what_it_overrides_and_406_for_the_rest() -> None:
    """A third kind of catalog is one subclass: what it does not override answers the spec's 406 by name."""

    class Listing(ServedCatalog):
        endpoints = ("GET /v1/{prefix}/namespaces",)

        def list_namespaces(self, parent: str | None) -> list[str]:
            return ["a", "b"]

    catalog = Listing("listing")
    assert catalog.list_namespaces(None) == ["a", "b"]
    with pytest.raises(Unsupported, match="catalog listing does not serve table commits"):
        catalog.commit_table("a", "t", [], [], None, True)
    with pytest.raises(Unsupported, match="views"):
        catalog.load_view("a", "v")
