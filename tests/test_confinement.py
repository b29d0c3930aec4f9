"""Nothing lakewarden's REST catalog writes, reads on a client's word, or deletes lies outside its warehouse.

Regression tests for two data-loss findings: a table created with a location outside the warehouse
had its metadata written there, and a registered metadata file whose metadata-log named an outside
file made a purging drop delete that file.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.helpers import wait_for
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


@pytest.fixture
def server_settings() -> str:
    return ""


def lake(server: ServerProcess) -> tuple[RestCatalog, Path, httpx.Client]:
    """pyiceberg on the embedded catalog `lake`, its warehouse directory, and a raw HTTP client of it."""
    catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    api = server.api()
    warehouse = Path(api.get("/catalogs/lake").json()["properties"]["warehouse"].removeprefix("file:"))
    catalog.create_namespace("db")
    return catalog, warehouse, server.api("/iceberg/v1/lake")


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def test_table_locations_stay_in_the_warehouse(server: ServerProcess, tmp_path: Path) -> None:
    catalog, warehouse, rest = lake(server)
    outside = tmp_path / "outside"
    outside.mkdir()
    (warehouse / "db").mkdir(parents=True, exist_ok=True)
    os.symlink(outside, warehouse / "db" / "escape")
    for location, why in (
        (str(outside / "t"), "is not under"),
        (f"{warehouse}/db/../../outside/t", "'..' segment"),
        (str(warehouse / "db" / "escape" / "t"), "is not under"),  # a symlink out of the warehouse
        (f"{warehouse}x/t", "is not under"),  # a sibling whose name starts like the warehouse
    ):
        with pytest.raises(BadRequestError, match=why):
            catalog.create_table("db.t", SCHEMA, location=location)
    assert files_under(outside) == []
    assert not catalog.table_exists("db.t")

    table = catalog.create_table("db.t", SCHEMA, location=str(warehouse / "db" / "mine"))  # inside: fine
    body = {
        "requirements": [],
        "updates": [{"action": "set-location", "location": str(outside / "moved")}],
    }
    moved = rest.post("/namespaces/db/tables/t", json=body)
    assert moved.status_code == 400 and "location" in moved.json()["error"]["message"]
    for key in ("write.data.path", "write.metadata.path"):
        props: dict[str, Any] = {
            "requirements": [],
            "updates": [{"action": "set-properties", "updates": {key: str(outside)}}],
        }
        refused = rest.post("/namespaces/db/tables/t", json=props)
        assert refused.status_code == 400 and key in refused.json()["error"]["message"], refused.text
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))  # the table still works
    assert files_under(outside) == []
    assert catalog.load_table("db.t").location() == str(warehouse / "db" / "mine")


def crafted_copy(metadata_file: Path, **changes: Any) -> Path:
    """A new metadata file beside `metadata_file`, with some fields changed (what a crafted register sends)."""
    document = json.loads(metadata_file.read_text())
    document.update(changes)
    target = metadata_file.parent / f"99999-{uuid.uuid4()}.metadata.json"
    target.write_text(json.dumps(document))
    return target


def test_register_and_purge_stay_in_the_table(server: ServerProcess, tmp_path: Path) -> None:
    catalog, _, rest = lake(server)
    victim = tmp_path / "victim.txt"
    victim.write_text("not lakewarden's to delete")
    outside_metadata = tmp_path / "elsewhere.metadata.json"

    table = catalog.create_table("db.source", SCHEMA)
    table.append(pa.table({"id": pa.array(range(10), pa.int64())}))
    metadata_file = Path(catalog.load_table("db.source").metadata_location.removeprefix("file:"))
    location = Path(table.location().removeprefix("file:"))

    # register reads only metadata under the warehouse, of a table whose location is under it
    outside_metadata.write_text(metadata_file.read_text())
    refused = rest.post("/namespaces/db/register", json={"name": "r1", "metadata-location": str(outside_metadata)})
    assert refused.status_code == 400 and "metadata-location" in refused.json()["error"]["message"]
    elsewhere = crafted_copy(metadata_file, location=str(tmp_path / "t"))
    refused = rest.post("/namespaces/db/register", json={"name": "r2", "metadata-location": str(elsewhere)})
    assert refused.status_code == 400 and "location" in refused.json()["error"]["message"]

    # a metadata-log and a statistics file naming a file outside the table: registered, then purged
    stats_inside = location / "metadata" / "stats.puffin"
    stats_inside.write_bytes(b"PFA1")
    statistics = [
        {
            "snapshot-id": table.metadata.current_snapshot_id,
            "statistics-path": str(path),
            "file-size-in-bytes": 4,
            "file-footer-size-in-bytes": 4,
            "blob-metadata": [],
        }
        for path in (stats_inside, victim)
    ]
    log = [{"metadata-file": str(victim), "timestamp-ms": 1}]
    crafted = crafted_copy(metadata_file, **{"metadata-log": log, "statistics": statistics})
    registered = rest.post("/namespaces/db/register", json={"name": "crafted", "metadata-location": str(crafted)})
    assert registered.status_code == 200, registered.text
    catalog.drop_table("db.source")  # the source's pointer goes; its files stay for the crafted table
    assert rest.delete("/namespaces/db/tables/crafted", params={"purgeRequested": "true"}).status_code == 204
    wait_for("the purge", lambda: not stats_inside.exists() and not crafted.exists(), timeout=30)
    assert victim.read_text() == "not lakewarden's to delete"
    assert [p for p in files_under(location) if p.suffix == ".parquet"] == []  # the table's own data went
