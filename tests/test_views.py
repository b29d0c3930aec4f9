"""Views in lakewarden's REST catalog: Java's ViewMetadata rules (unit), and pyiceberg's view API plus the
spec's replace against a real server. Spark's CREATE / ALTER / SHOW / DROP VIEW are in
tests/test_rest_catalog_spark.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchViewError, ViewAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from lakewarden.metadata.views import (
    AddViewVersionUpdate,
    SetCurrentViewVersionUpdate,
    ViewChangeError,
    apply_view_updates,
    new_view,
)
from tests.servers import ServerProcess

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
WIDER = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))


def version(sql: str, dialect: str = "spark", schema_id: int = 0, **more: Any) -> ViewVersion:
    representation = ViewRepresentation(SQLViewRepresentation(type="sql", sql=sql, dialect=dialect))
    return ViewVersion(
        version_id=more.pop("version_id", 1),
        schema_id=schema_id,
        timestamp_ms=more.pop("timestamp_ms", 1000),
        summary=more.pop("summary", {"engine-name": "spark"}),
        representations=[representation, *more.pop("extra", [])],
        default_namespace=("db",),
    )


def replace(base: Any, *updates: Any) -> Any:
    return apply_view_updates(base, updates)


def test_view_metadata_follows_javas_builder() -> None:
    base = new_view(SCHEMA, version("SELECT 1"), {}, "/w/db/v")
    assert (base.current_version_id, base.versions[0].version_id, base.versions[0].schema_id) == (1, 1, 0)
    assert [e.version_id for e in base.version_log] == [1]

    # a new query: version 2, current, logged
    second = replace(
        base, AddViewVersionUpdate(view_version=version("SELECT 2")), SetCurrentViewVersionUpdate(view_version_id=-1)
    )
    assert second.current_version_id == 2 and [e.version_id for e in second.version_log] == [1, 2]
    # the same query again (another id, another timestamp) reuses version 1; its log entry is now
    back = replace(
        second,
        AddViewVersionUpdate(view_version=version("SELECT 1", version_id=7, timestamp_ms=5)),
        SetCurrentViewVersionUpdate(view_version_id=1),
    )
    assert len(back.versions) == 2 and back.current_version_id == 1 and back.version_log[-1].timestamp_ms > 1000
    # nothing changes: the very same metadata (no new version is committed)
    assert replace(back, SetCurrentViewVersionUpdate(view_version_id=1)) is back

    with pytest.raises(ViewChangeError, match="multiple queries for dialect spark"):
        two = ViewRepresentation(SQLViewRepresentation(type="sql", sql="SELECT 3", dialect="Spark"))
        replace(base, AddViewVersionUpdate(view_version=version("SELECT 3", extra=[two])))
    with pytest.raises(ViewChangeError, match="unknown schema: 4"):
        replace(base, AddViewVersionUpdate(view_version=version("SELECT 3", schema_id=4)))
    with pytest.raises(ViewChangeError, match="no schema has been added"):
        replace(base, AddViewVersionUpdate(view_version=version("SELECT 3", schema_id=-1)))
    with pytest.raises(ViewChangeError, match="unknown version: 9"):
        replace(base, SetCurrentViewVersionUpdate(view_version_id=9))
    with pytest.raises(ViewChangeError, match="loss of view dialects"):  # trino's query may not be dropped
        trino = ViewRepresentation(SQLViewRepresentation(type="sql", sql="SELECT 1", dialect="trino"))
        both = replace(
            base,
            AddViewVersionUpdate(view_version=version("SELECT 1", extra=[trino])),
            SetCurrentViewVersionUpdate(view_version_id=-1),
        )
        replace(
            both,
            AddViewVersionUpdate(view_version=version("SELECT 4")),
            SetCurrentViewVersionUpdate(view_version_id=-1),
        )


def test_old_view_versions_expire_by_history_size() -> None:
    from pyiceberg.table.update import AddSchemaUpdate, SetPropertiesUpdate

    view = new_view(SCHEMA, version("SELECT 0"), {"version.history.num-entries": "3"}, "/w/db/v")
    for i in range(1, 6):
        view = replace(
            view,
            AddViewVersionUpdate(view_version=version(f"SELECT {i}")),
            SetCurrentViewVersionUpdate(view_version_id=-1),
        )
    assert [v.version_id for v in view.versions] == [4, 5, 6] and view.current_version_id == 6
    assert [e.version_id for e in view.version_log] == [4, 5, 6]  # cleared before the versions gone
    # a wider schema gets the next id; the version naming -1 takes it
    wider = replace(
        view,
        AddSchemaUpdate(schema_=WIDER),
        AddViewVersionUpdate(view_version=version("SELECT id, v", schema_id=-1)),
        SetCurrentViewVersionUpdate(view_version_id=-1),
        SetPropertiesUpdate(updates={"comment": "wider"}),
    )
    assert [s.schema_id for s in wider.schemas] == [0, 1] and wider.versions[-1].schema_id == 1


@pytest.mark.slow
def test_views_with_pyiceberg_and_the_spec_replace(server: ServerProcess) -> None:
    catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    config = server.http.get(f"{server.url}/iceberg/v1/config", params={"warehouse": "lake"}).json()
    assert "POST /v1/{prefix}/namespaces/{namespace}/views/{view}" in config["endpoints"]
    catalog.create_namespace("db")
    catalog.create_table("db.t", SCHEMA)
    made = catalog.create_view("db.v", SCHEMA, version("SELECT id FROM db.t"))
    assert made.metadata.current_version_id == 1
    assert catalog.list_views("db") == [("db", "v")] and catalog.view_exists("db.v")
    assert not catalog.view_exists("db.t") and catalog.list_tables("db") == [("db", "t")]
    with pytest.raises(ViewAlreadyExistsError, match="Table already exists"):
        catalog.create_view("db.t", SCHEMA, version("SELECT 1"))  # tables and views share the names
    taken = server.http.post(
        f"{server.url}/iceberg/v1/lake/namespaces/db/tables",
        json={"name": "v", "schema": json.loads(SCHEMA.model_dump_json(by_alias=True))},
    )
    assert taken.status_code == 409 and "View with same name" in taken.json()["error"]["message"]

    base = f"{server.url}/iceberg/v1/lake/namespaces/db/views/v"
    loaded = server.http.get(base).json()
    uuid = loaded["metadata"]["view-uuid"]
    new_version = json.loads(version("SELECT id * 2 FROM db.t", version_id=2).model_dump_json(by_alias=True))
    change = {
        "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
        "updates": [
            {"action": "add-view-version", "view-version": new_version},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
    }
    replaced = server.http.post(base, json=change)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["metadata"]["current-version-id"] == 2
    assert catalog.load_view("db.v").metadata.current_version_id == 2
    stale = {**change, "requirements": [{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}]}
    assert server.http.post(base, json=stale).status_code == 409
    bad = {"updates": [{"action": "set-current-view-version", "view-version-id": 9}]}
    refused = server.http.post(base, json=bad)
    assert refused.status_code == 400 and refused.json()["error"]["message"].startswith("updates")
    timeline = server.api().get("/tables/lake/db/v/timeline").json()
    assert [(c["version"], c["operation"]) for c in timeline] == [(1, "replace-view"), (0, "create-view")]

    renamed = server.http.post(
        f"{server.url}/iceberg/v1/lake/views/rename",
        json={"source": {"namespace": ["db"], "name": "v"}, "destination": {"namespace": ["db"], "name": "w"}},
    )
    assert renamed.status_code == 204 and catalog.list_views("db") == [("db", "w")]
    location = server.http.get(f"{server.url}/iceberg/v1/lake/namespaces/db/views/w").json()["metadata-location"]
    catalog.drop_view("db.w")
    with pytest.raises(NoSuchViewError):
        catalog.load_view("db.w")
    adopted = catalog.register_view("db.again", location)
    assert adopted.metadata.current_version_id == 2
    assert server.http.get(f"{server.url}/iceberg/v1/lake/namespaces/db/views/nope").status_code == 404
