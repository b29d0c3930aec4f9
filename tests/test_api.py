"""The ams API on a real SQLite system database: catalogs, resource groups, tables, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.domain.catalogs import CatalogSpec


def _sql(tmp_path: Path, name: str = "lake") -> dict[str, Any]:
    return {
        "name": name,
        "type": "sql",
        "properties": {"uri": f"sqlite:///{tmp_path / (name + '.db')}", "warehouse": str(tmp_path / "wh")},
    }


def _error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert body["code"] == status
    assert body["message"]
    return str(body["message"])


def test_health_and_openapi(client: TestClient) -> None:
    health = client.get("/api/v1/health").json()
    assert health["status"] == "ok"
    assert health["database"] == "ok"
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/v1/catalogs", "/api/v1/catalogs/{name}/refresh", "/api/v1/resource-groups", "/api/v1/tables"):
        assert path in paths


def test_catalog_lifecycle(client: TestClient, tmp_path: Path) -> None:
    body = _sql(tmp_path)
    body["properties"]["credential"] = "id:secret"
    created = client.post("/api/v1/catalogs", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["properties"]["credential"] == "****"
    assert created.json()["health"] == "unknown"
    # registering an SQL catalog creates its Iceberg tables, so Spark can use it at once
    assert (tmp_path / "lake.db").is_file()

    assert [c["name"] for c in client.get("/api/v1/catalogs").json()] == ["lake"]
    assert client.get("/api/v1/catalogs/lake").json()["type"] == "sql"

    props = {**created.json()["properties"], "table-filter": "keep_.*"}
    updated = client.put("/api/v1/catalogs/lake", json={"properties": props})
    assert updated.status_code == 200, updated.text
    assert updated.json()["properties"]["table-filter"] == "keep_.*"

    refreshed = client.post("/api/v1/catalogs/lake/refresh").json()
    assert refreshed["health"] == "healthy", refreshed
    assert refreshed["tables"] == 0

    assert client.delete("/api/v1/catalogs/lake").status_code == 204
    assert "does not exist" in _error(client.get("/api/v1/catalogs/lake"), 404)


def test_redacted_secret_sent_back_keeps_its_value(client: TestClient, tmp_path: Path) -> None:
    from lakewarden.store.catalogs import get_catalog

    body = _sql(tmp_path)
    body["properties"]["credential"] = "id:secret"
    shown = client.post("/api/v1/catalogs", json=body).json()["properties"]
    client.put("/api/v1/catalogs/lake", json={"properties": {**shown, "table-filter": "x"}})
    with client.app.state.context.db.read() as session:  # type: ignore[attr-defined]
        assert get_catalog(session, "lake").properties["credential"] == "id:secret"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "9lives"}, "name"),
        ({"type": "delta"}, "type"),
        ({"properties": {"warehouse": "/w"}}, "properties.uri"),
        (
            {"properties": {"uri": "sqlite:////x.db", "warehouse": "/w", "table-filter": "(("}},
            "properties.table-filter",
        ),
        (
            {"properties": {"uri": "sqlite:////x.db", "warehouse": "/w", "table.self-optimizing.group": "nope"}},
            "properties.table.self-optimizing.group",
        ),
        ({"properties": {"uri": 5}}, "properties.uri"),
        ({"unknown": 1}, "unknown"),
        ({"name": None}, "name"),
    ],
)
def test_bad_catalogs_get_400_naming_the_field(
    client: TestClient, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    body = {**_sql(tmp_path), **change}
    message = _error(client.post("/api/v1/catalogs", json=body), 400)
    assert message.startswith(field), message
    assert client.get("/api/v1/catalogs").json() == []  # nothing half-created


def test_duplicate_catalog_is_409(client: TestClient, tmp_path: Path) -> None:
    assert client.post("/api/v1/catalogs", json=_sql(tmp_path)).status_code == 201
    assert "already exists" in _error(client.post("/api/v1/catalogs", json=_sql(tmp_path)), 409)


def test_malformed_bodies(client: TestClient) -> None:
    bad_json = client.post("/api/v1/catalogs", content=b"{not json", headers={"content-type": "application/json"})
    assert "JSON" in _error(bad_json, 400)
    assert _error(client.post("/api/v1/catalogs", json=[1, 2]), 400)
    assert _error(client.put("/api/v1/catalogs/none", json={"properties": {}}), 404)
    assert _error(client.post("/api/v1/catalogs/none/refresh"), 404)
    assert _error(client.delete("/api/v1/catalogs/none"), 404)


def test_resource_groups(client: TestClient, tmp_path: Path) -> None:
    groups = client.get("/api/v1/resource-groups").json()
    assert [g["name"] for g in groups] == ["default"]  # seeded from the config

    made = client.post(
        "/api/v1/resource-groups", json={"name": "etl", "container": "local", "properties": {"instances": "1"}}
    )
    assert made.status_code == 201, made.text
    assert "already exists" in _error(
        client.post("/api/v1/resource-groups", json={"name": "etl", "container": "local"}), 409
    )
    assert _error(
        client.post("/api/v1/resource-groups", json={"name": "bad name", "container": "local"}), 400
    ).startswith("name")
    assert _error(client.post("/api/v1/resource-groups", json={"name": "g2", "container": "yarn"}), 400).startswith(
        "container"
    )
    assert _error(client.post("/api/v1/resource-groups", json={"container": "local"}), 400).startswith("name")

    updated = client.put("/api/v1/resource-groups/etl", json={"properties": {"scheduling-policy": "balanced"}})
    assert updated.json()["properties"] == {"scheduling-policy": "balanced"}
    bad = client.put("/api/v1/resource-groups/etl", json={"properties": {"scheduling-policy": "lottery"}})
    assert _error(bad, 400).startswith("properties.scheduling-policy")
    for options in ("-Xss2m 'unclosed", "-Xss2m G1"):
        bad = client.put("/api/v1/resource-groups/etl", json={"properties": {"java-options": options}})
        assert _error(bad, 400).startswith("properties.java-options")
    assert client.get("/api/v1/resource-groups/etl").json()["properties"] == {"scheduling-policy": "balanced"}

    # a group a catalog uses as its default cannot be deleted
    body = _sql(tmp_path)
    body["properties"]["table.self-optimizing.group"] = "etl"
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    assert "default group of catalog" in _error(client.delete("/api/v1/resource-groups/etl"), 409)
    client.delete("/api/v1/catalogs/lake")
    assert client.delete("/api/v1/resource-groups/etl").status_code == 204
    assert _error(client.delete("/api/v1/resource-groups/etl"), 404)


def test_table_queries_reject_bad_filters(client: TestClient) -> None:
    assert client.get("/api/v1/tables").json() == []
    assert _error(client.get("/api/v1/tables", params={"status": "asleep"}), 400).startswith("status")
    assert _error(client.get("/api/v1/tables", params={"limit": 0}), 400).startswith("limit")
    assert "not managed" in _error(client.get("/api/v1/tables/c/db/t"), 404)


def test_catalog_unreachable_at_registration_is_unhealthy_not_an_error(client: TestClient, tmp_path: Path) -> None:
    body = {"name": "remote", "type": "rest", "properties": {"uri": "http://127.0.0.1:9/iceberg"}}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    result = client.post("/api/v1/catalogs/remote/refresh").json()
    assert result["health"] == "unhealthy"
    assert result["error"]
    shown = client.get("/api/v1/catalogs/remote").json()
    assert shown["health"] == "unhealthy"
    assert shown["last_error"] == result["error"]


def test_spec_round_trip(sql_catalog: CatalogSpec, client: TestClient) -> None:
    created = client.post(
        "/api/v1/catalogs", json={"name": sql_catalog.name, "type": "sql", "properties": dict(sql_catalog.properties)}
    )
    assert created.json()["properties"] == dict(sql_catalog.properties)


def test_a_key_whose_request_still_runs_is_told_to_retry_it(client: TestClient) -> None:
    """The spec's 503 (wait and retry), documented on every route that takes Idempotency-Key: the retry then
    gets the first request's answer."""
    from datetime import timedelta

    from lakewarden.store import idempotency

    ctx = client.app.state.context  # type: ignore[attr-defined]
    key, path = "017f22e2-79b0-7cc3-98c4-dc0c0c0739ff", "/iceberg/v1/lake/namespaces"
    with ctx.db.write() as session:  # a request with the key has begun and not yet answered
        assert idempotency.claim(session, key, "admin", "POST", path, timedelta(minutes=2)) is None
    answer = client.post(path, json={"namespace": ["x"]}, headers={"Idempotency-Key": key})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
    assert "still running" in answer.json()["error"]["message"]


def test_tables_are_filtered_and_paged_by_the_server(client: TestClient, tmp_path: Path) -> None:
    """`name` (a part of catalog.database.table, any case; LIKE's wildcards taken literally) and `after` (keyset
    paging: the page after that table), as the dashboard's Tables page asks for them."""
    from lakewarden.domain.tables import TableIdentifier
    from lakewarden.store import tables as table_store

    assert client.post("/api/v1/catalogs", json=_sql(tmp_path)).status_code == 201
    names = [("db", f"t{i:02d}") for i in range(12)] + [("db", "under_score"), ("ops.inner", "Events")]
    with client.app.state.context.db.write() as session:  # type: ignore[attr-defined]
        for database, table in names:
            table_store.add_table(session, TableIdentifier("lake", database, table), "default", {})
    every = [t["identifier"] for t in client.get("/api/v1/tables", params={"limit": 100}).json()]
    assert every == sorted(every) and len(every) == 14

    def page(**params: Any) -> list[str]:
        response = client.get("/api/v1/tables", params=params)
        assert response.status_code == 200, response.text
        return [t["identifier"] for t in response.json()]

    assert page(name="EVENTS") == ["lake.ops.inner.Events"]
    assert page(name="db.t1") == ["lake.db.t10", "lake.db.t11"]
    assert page(name="_") == ["lake.db.under_score"]  # not LIKE's any-character
    assert page(name="%") == []
    walked, after = [], None
    while True:
        got = page(limit=5, **({"after": after} if after else {}))
        walked += got
        if len(got) < 5:
            break
        after = got[-1]
    assert walked == every
    assert page(after="lake.db.t10", name="t1") == ["lake.db.t11"]
    assert "after" in _error(client.get("/api/v1/tables", params={"after": "no-dots"}), 400)
