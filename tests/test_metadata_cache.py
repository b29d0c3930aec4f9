"""The REST catalog's cache of parsed metadata files and loadTable bodies (services/rest_catalog/metadata_files.py):
bounded by bytes, its estimate close to what parsed metadata takes, and holding each table's current version only —
a long stream of commits does not pile up the versions it replaced."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import pyarrow as pa
from fastapi.testclient import TestClient
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import load_file_io
from pyiceberg.table.metadata import TableMetadataUtil

from lakewarden.api.context import ServerContext
from lakewarden.services.rest_catalog.metadata_files import METADATA_BYTES_PER_JSON_BYTE, NO_CONFIG, MetadataFiles
from tests.conftest import make_config


def test_the_estimate_is_within_2x_of_what_parsed_metadata_takes(tmp_path: Path) -> None:
    catalog = SqlCatalog("m", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    for columns, snapshots in ((1, 1), (2, 40), (40, 40)):
        table = catalog.create_table(
            f"db.t{columns}_{snapshots}", pa.schema([(f"c{i}", pa.int64()) for i in range(columns)])
        )
        for n in range(snapshots):
            table.append(pa.table({f"c{i}": [n] for i in range(columns)}))
        text = Path(table.metadata_location.removeprefix("file://")).read_text()
        gc.freeze()  # no collection of the earlier tests' heap frees memory inside the measurement (nor takes long)
        tracemalloc.start()
        try:
            parsed = [TableMetadataUtil.parse_raw(text) for _ in range(3)]
            taken = tracemalloc.get_traced_memory()[0] / len(parsed)
        finally:
            tracemalloc.stop()
            gc.unfreeze()
        estimate = len(text) * METADATA_BYTES_PER_JSON_BYTE
        assert taken / 2 <= estimate <= taken * 2, (columns, snapshots, len(text), taken)


def test_files_are_kept_within_the_bound(tmp_path: Path) -> None:
    catalog = SqlCatalog("m", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    locations = []
    for n in range(6):
        table = catalog.create_table(f"db.t{n}", pa.schema([("id", pa.int64())]))
        locations.append(table.metadata_location)
    io = load_file_io({}, locations[0])
    one = len(Path(locations[0].removeprefix("file://")).read_text()) * METADATA_BYTES_PER_JSON_BYTE
    files = MetadataFiles(max_bytes=int(one * 3.5))
    for location in locations:
        assert files.read(io, location).location in location
    assert len(files.lru) == 3 and files.lru.bytes <= files.lru.max_bytes and files.lru.evictions == 3
    assert files.read(io, locations[-1]) is files.read(io, locations[-1])  # kept: parsed once
    files.read(io, locations[0])  # evicted: read again, right
    assert files.lru.misses == 7


def test_a_load_body_is_kept_whole_and_another_tail_replaces_its_end(tmp_path: Path) -> None:
    """The body kept is the answer that tells the client nothing more, sent as it is (no copy per load); a
    body with another tail (an S3 warehouse's config, vended credentials) is the same JSON object with it."""
    catalog = SqlCatalog("m", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    location = table.metadata_location
    files = MetadataFiles()
    metadata = files.read(load_file_io({}, location), location)
    assert files.cached_body(location) is None
    body = files.response_body(location, metadata)
    assert files.cached_body(location) is body and files.response_body(location, metadata) is body
    answer = json.loads(body)
    assert answer["metadata-location"] == location and answer["config"] == {}
    assert answer["metadata"]["table-uuid"] == str(metadata.table_uuid)
    tail = b', "config": {"s3.endpoint": "http://x"}, "storage-credentials": []}'
    other = files.cached_body(location, tail=tail)
    assert other is not None and json.loads(other) == {
        **answer,
        "config": {"s3.endpoint": "http://x"},
        "storage-credentials": [],
    }
    refs = files.response_body(location, metadata, "refs", tail)  # its own body, kept beside
    assert json.loads(refs)["config"] == {"s3.endpoint": "http://x"}
    assert files.cached_body(location, "refs") == refs.replace(tail, NO_CONFIG)
    assert files.lru.peek(("body", location)) == (body, len(body))  # weighed as what it holds


def test_a_commit_stream_keeps_only_each_tables_current_metadata(tmp_path: Path) -> None:
    """300 commits to 3 tables: the cache holds 3 tables' current metadata and bodies, not 300 versions."""
    from lakewarden.api.app import create_app

    config = make_config(tmp_path / "data", metadata_cache__max_size="64MiB")
    with TestClient(create_app(config, start_services=False)) as client:
        token = (config.data_dir / "admin.token").read_text().strip()
        client.headers["Authorization"] = f"Bearer {token}"
        assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
        ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
        files = ctx.rest_catalog.files
        base = "/iceberg/v1/lake/namespaces"
        assert client.post(base, json={"namespace": ["db"]}).status_code == 200
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
        }
        for t in range(3):
            answer = client.post(f"{base}/db/tables", json={"name": f"t{t}", "schema": schema})
            assert answer.status_code == 200, answer.text
        for n in range(100):
            for t in range(3):
                update = {"action": "set-properties", "updates": {"n": str(n)}}
                answer = client.post(f"{base}/db/tables/t{t}", json={"requirements": [], "updates": [update]})
                assert answer.status_code == 200, answer.text
                assert client.get(f"{base}/db/tables/t{t}").json()["metadata"]["properties"]["n"] == str(n)
        # each table: its current metadata and its loadTable body; nothing of the 300 versions they replaced
        assert len(files.lru) <= 3 * 2, len(files.lru)
        assert files.lru.bytes < 3 * 2 * 20_000 * METADATA_BYTES_PER_JSON_BYTE
        metrics = client.get("/metrics").text
        assert (
            "lakewarden_metadata_cache_bytes " in metrics
            and 'lakewarden_metadata_cache_lookups_total{result="hit"}' in metrics
        )
