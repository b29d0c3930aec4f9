"""lakewarden's Iceberg REST catalog with real clients: pyiceberg's RestCatalog (and Spark in its own test)."""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    NamespaceNotEmptyError,
    NoSuchTableError,
    ValidationException,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from lakewarden.metadata.conflicts import CONFLICT_STRATEGY
from tests.helpers import wait_for
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))


@pytest.fixture
def server_settings() -> str:
    return ""  # the embedded default has the internal catalog `lake`


def client(server: ServerProcess) -> RestCatalog:
    return RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)


def rows(start: int, count: int, tag: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "v": pa.array([tag] * count)})


def test_pyiceberg_client_round_trip(server: ServerProcess) -> None:
    api = server.api()
    catalog = client(server)
    assert api.get("/catalogs/lake").json()["properties"]["uri"] == f"{server.url}/iceberg"
    catalog.create_namespace("db", {"owner": "data"})
    catalog.create_namespace(("db", "sub"))
    assert catalog.list_namespaces() == [("db",)]
    assert catalog.list_namespaces(("db",)) == [("db", "sub")]
    assert catalog.load_namespace_properties("db") == {"owner": "data"}
    summary = catalog.update_namespace_properties("db", removals={"owner", "nope"}, updates={"team": "a"})
    assert (summary.removed, summary.updated, summary.missing) == (["owner"], ["team"], ["nope"])

    table = catalog.create_table("db.events", SCHEMA, properties={"self-optimizing.quota": "0.3"})
    table.append(rows(0, 100))
    table.append(rows(100, 50))
    assert catalog.load_table("db.events").scan().to_arrow().num_rows == 150

    with table.update_schema() as update:  # schema evolution
        update.add_column("extra", StringType())
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "1048576"})
    reloaded = catalog.load_table("db.events")
    assert [f.name for f in reloaded.schema().fields] == ["id", "v", "extra"]
    assert reloaded.properties["write.target-file-size-bytes"] == "1048576"
    assert catalog.list_tables("db") == [("db", "events")]
    assert catalog.table_exists("db.events")

    timeline = api.get("/tables/lake/db/events/timeline").json()
    assert [c["version"] for c in timeline] == [4, 3, 2, 1, 0]
    assert [c["operation"] for c in timeline][2:] == ["append", "append", "create"]
    assert timeline[2]["snapshot_id"] == reloaded.history()[-1].snapshot_id

    # the explorer is told at once: the table is managed without waiting for a refresh interval
    wait_for("lake.db.events managed", lambda: api.get("/tables/lake/db/events").status_code == 200, timeout=20)
    managed = api.get("/tables/lake/db/events").json()
    assert managed["config"]["self-optimizing.quota"] == "0.3"

    catalog.rename_table("db.events", "db.sub.renamed")
    assert catalog.list_tables(("db", "sub")) == [("db", "sub", "renamed")]
    with pytest.raises(NoSuchTableError):
        catalog.load_table("db.events")
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("db")
    location = catalog.load_table("db.sub.renamed").metadata.location
    catalog.purge_table("db.sub.renamed")
    assert catalog.list_tables(("db", "sub")) == []
    # the purge runs after the answer
    wait_for("the purge", lambda: not any(Path(location.removeprefix("file:")).rglob("*.parquet")), timeout=30)
    catalog.drop_namespace(("db", "sub"))

    # a table created again under the same name gets a fresh location
    again = catalog.create_table("db.events", SCHEMA)
    assert again.metadata.location != location

    events = api.get("/events", params={"after": 0}).json()
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["namespace-created", "namespace-created", "namespace-updated", "table-created"]
    # the namespace's properties update is an event like every other change, naming the keys it changed
    assert events[2]["payload"] == {"updated": ["team"], "removed": ["owner"]} and events[2]["table"] is None
    assert {"table-committed", "table-renamed", "table-dropped", "namespace-dropped"} <= set(kinds)
    assert [e["event_id"] for e in events] == sorted(e["event_id"] for e in events)
    assert api.get("/events", params={"after": events[-1]["event_id"]}).json() == []


def test_concurrent_appenders_lose_no_commit(server: ServerProcess) -> None:
    catalog = client(server)
    catalog.create_namespace("db")
    catalog.create_table("db.busy", SCHEMA)
    conflicts: list[int] = []
    errors: list[BaseException] = []

    def appender(worker: int) -> None:
        try:
            own = client(server)
            for batch in range(5):
                while True:  # a commit that lost to another is retried on fresh metadata, as writers do
                    try:
                        own.load_table("db.busy").append(rows(worker * 1000 + batch * 10, 10, f"w{worker}"))
                        break
                    except CommitFailedException:
                        conflicts.append(worker)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    data = catalog.load_table("db.busy").scan().to_arrow()
    assert data.num_rows == 4 * 5 * 10
    assert len(set(data.column("id").to_pylist())) == 200
    timeline = server.http.get(f"{server.url}/api/v1/tables/lake/db/busy/timeline").json()
    assert len(timeline) == 1 + 20  # the create and every append, each with its own version
    assert sorted(c["version"] for c in timeline) == list(range(21))


def test_partition_conflict_strategy(server: ServerProcess) -> None:
    catalog = client(server)
    catalog.create_namespace("db")
    by_v = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="v"))
    no_retry = {"commit.retry.num-retries": "0"}  # writers that do not retry: what the server decides shows
    catalog.create_table(
        "db.parts", SCHEMA, partition_spec=by_v, properties={CONFLICT_STRATEGY: "partition", **no_retry}
    )
    catalog.load_table("db.parts").append(rows(0, 5, "a"))
    stale_b, stale_a = catalog.load_table("db.parts"), catalog.load_table("db.parts")
    catalog.load_table("db.parts").append(rows(100, 5, "a"))  # the branch moves on, in partition v=a
    stale_b.append(rows(200, 5, "b"))  # another partition: rebased onto the head, lands without a retry
    with pytest.raises(CommitFailedException, match="partition v=a changed by snapshot"):
        stale_a.append(rows(300, 5, "a"))  # the same partition: rejected
    table = catalog.load_table("db.parts")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == [*range(5), *range(100, 105), *range(200, 205)]
    chain = []  # the history stays linear: each snapshot's parent is the one before it
    snapshot = table.current_snapshot()
    while snapshot is not None:
        chain.append(snapshot)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    assert len(chain) == 3 == len(table.metadata.snapshots)
    assert [s.sequence_number for s in reversed(chain)] == [1, 2, 3]
    assert chain[0].summary is not None and chain[0].summary["total-records"] == "15"
    assert chain[0].summary["total-data-files"] == "3"
    timeline = server.http.get(f"{server.url}/api/v1/tables/lake/db/parts/timeline").json()
    assert timeline[0]["parent_snapshot_id"] == chain[1].snapshot_id  # recorded as it landed

    # the default strategy (iceberg) keeps the spec's requirement: the stale writer must retry
    catalog.create_table("db.plain", SCHEMA, partition_spec=by_v, properties=no_retry)
    catalog.load_table("db.plain").append(rows(0, 5, "a"))
    stale = catalog.load_table("db.plain")
    catalog.load_table("db.plain").append(rows(100, 5, "a"))
    with pytest.raises(CommitFailedException, match="branch main has changed"):
        stale.append(rows(200, 5, "b"))
    # a strategy lakewarden does not know is refused, naming the property
    with pytest.raises(BadRequestError, match=CONFLICT_STRATEGY):
        catalog.create_table("db.bad", SCHEMA, properties={CONFLICT_STRATEGY: "rows"})
    with pytest.raises(BadRequestError, match=CONFLICT_STRATEGY):
        catalog.load_table("db.plain").transaction().set_properties({CONFLICT_STRATEGY: "rows"}).commit_transaction()


def test_malformed_requests_get_the_spec_error_body(server: ServerProcess) -> None:
    base = f"{server.url}/iceberg/v1"
    catalog = client(server)
    catalog.create_namespace("db")
    catalog.create_table("db.t", SCHEMA)

    def error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
        assert response.status_code == status, response.text
        body = response.json()["error"]
        assert (body["code"], body["type"]) == (status, kind) and body["message"]
        return dict(body)

    assert server.http.get(f"{base}/config", params={"warehouse": "lake"}).json()["overrides"] == {
        "prefix": "lake",
        "namespace-separator": "%1F",
    }
    kept = server.http.delete(f"{server.url}/api/v1/catalogs/lake")
    assert kept.status_code == 409 and "namespace" in kept.json()["error"]["message"]
    error(server.http.get(f"{base}/config", params={"warehouse": "nope"}), 404, "NoSuchWarehouseException")
    error(server.http.get(f"{base}/lake/namespaces/nope"), 404, "NoSuchNamespaceException")
    error(server.http.get(f"{base}/lake/namespaces/db/tables/nope"), 404, "NoSuchTableException")
    error(server.http.post(f"{base}/lake/namespaces", json={"namespace": "db"}), 400, "BadRequestException")
    # the spec documents no 404 on creating a namespace: an unknown prefix is a bad request naming it
    unknown = error(server.http.post(f"{base}/nope/namespaces", json={"namespace": ["db"]}), 400, "BadRequestException")
    assert unknown["message"].startswith("prefix: warehouse 'nope'")
    error(server.http.post(f"{base}/lake/namespaces", json={"namespace": ["db"]}), 409, "AlreadyExistsException")
    error(
        server.http.post(f"{base}/lake/namespaces/db/tables", json={"name": "x", "schema": {"type": "nope"}}),
        400,
        "BadRequestException",
    )
    error(
        server.http.post(
            f"{base}/lake/namespaces/db/tables", content=b"{", headers={"content-type": "application/json"}
        ),
        400,
        "BadRequestException",
    )
    # names that could not be addressed in a URL or a path (found by fuzzing): a 400 naming the field
    for bad in ("a/b", "tab\x00", "line\nbreak"):
        named = error(
            server.http.post(f"{base}/lake/namespaces", json={"namespace": ["db2", bad]}), 400, "BadRequestException"
        )
        assert named["message"].startswith("namespace")
        field = {"name": bad, "schema": {"type": "struct", "fields": []}}
        named = error(server.http.post(f"{base}/lake/namespaces/db/tables", json=field), 400, "BadRequestException")
        assert named["message"].startswith("name")
    # a default value pyiceberg cannot read is the client's error, not the server's (found by fuzzing)
    odd_default = {
        "name": "x",
        "schema": {
            "type": "struct",
            "fields": [{"id": 1, "name": "a", "type": "unknown", "required": False, "initial-default": "x"}],
        },
    }
    error(server.http.post(f"{base}/lake/namespaces/db/tables", json=odd_default), 400, "BadRequestException")
    stale = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 42}], "updates": []}
    error(server.http.post(f"{base}/lake/namespaces/db/tables/t", json=stale), 409, "CommitFailedException")
    bad_update = {"updates": [{"action": "no-such-action"}]}
    error(server.http.post(f"{base}/lake/namespaces/db/tables/t", json=bad_update), 400, "BadRequestException")
    error(server.http.delete(f"{base}/lake/namespaces/db"), 409, "NamespaceNotEmptyException")
    error(server.http.get(f"{base}/lake/namespaces", params={"pageToken": "zz"}), 400, "BadRequestException")
    page = server.http.get(f"{base}/lake/namespaces", params={"pageSize": 1}).json()
    assert page == {"namespaces": [["db"]], "next-page-token": None}
    both = {"removals": ["a"], "updates": {"a": "1"}}  # the spec's 422, naming the key
    body = error(
        server.http.post(f"{base}/lake/namespaces/db/properties", json=both), 422, "UnprocessableEntityException"
    )
    assert "'a'" in body["message"] and body["message"].startswith("removals")
    report = {"report-type": "scan-report", "table-name": "db.gone"}
    error(server.http.post(f"{base}/lake/namespaces/db/tables/gone/metrics", json=report), 404, "NoSuchTableException")
    # a local warehouse has no credentials to vend; a missing table is the spec's 404
    assert server.http.get(f"{base}/lake/namespaces/db/tables/t/credentials").json() == {"storage-credentials": []}
    error(server.http.get(f"{base}/lake/namespaces/db/tables/gone/credentials"), 404, "NoSuchTableException")
    for method, path in (  # routes that are not the spec's (every route of the spec is served now)
        ("GET", "namespaces/db/tables/t/lineage"),
        ("POST", "namespaces/db/tables/t/compact"),
        ("PUT", "namespaces/db/tables/t"),
    ):
        refused = error(
            server.http.request(method, f"{base}/lake/{path}", json={}), 406, "UnsupportedOperationException"
        )
        assert path in refused["message"]


def test_multi_table_commit_is_atomic_and_register_adopts_a_table(server: ServerProcess) -> None:
    base = f"{server.url}/iceberg/v1/lake"
    catalog = client(server)
    catalog.create_namespace("db")
    one, two = catalog.create_table("db.one", SCHEMA), catalog.create_table("db.two", SCHEMA)

    def change(table: Any, uuid: str, value: str) -> dict[str, Any]:
        return {
            "identifier": {"namespace": ["db"], "name": table.name()[-1]},
            "requirements": [{"type": "assert-table-uuid", "uuid": uuid}],
            "updates": [{"action": "set-properties", "updates": {"batch": value}}],
        }

    both = {
        "table-changes": [
            change(one, str(one.metadata.table_uuid), "1"),
            change(two, str(two.metadata.table_uuid), "1"),
        ]
    }
    assert server.http.post(f"{base}/transactions/commit", json=both).status_code == 204
    assert {catalog.load_table(f"db.{t}").properties["batch"] for t in ("one", "two")} == {"1"}

    wrong = "00000000-0000-0000-0000-000000000000"
    half = {"table-changes": [change(one, str(one.metadata.table_uuid), "2"), change(two, wrong, "2")]}
    refused = server.http.post(f"{base}/transactions/commit", json=half)
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "CommitFailedException"
    assert catalog.load_table("db.one").properties["batch"] == "1"  # nothing of the failed transaction applied
    twice = {"table-changes": [change(one, str(one.metadata.table_uuid), "3")] * 2}
    assert server.http.post(f"{base}/transactions/commit", json=twice).status_code == 400

    one.append(rows(0, 5))
    location = catalog.load_table("db.one").metadata_location
    catalog.drop_table("db.one")  # the files stay: no purge
    adopted = server.http.post(
        f"{base}/namespaces/db/register", json={"name": "adopted", "metadata-location": location}
    )
    assert adopted.status_code == 200, adopted.text
    assert catalog.load_table("db.adopted").scan().to_arrow().num_rows == 5
    bad = server.http.post(f"{base}/namespaces/db/register", json={"name": "x", "metadata-location": "/nowhere.json"})
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("metadata-location")

    # register with overwrite: the name now points at the other table's metadata, as a new version
    taken = {"name": "two", "metadata-location": location}
    assert server.http.post(f"{base}/namespaces/db/register", json=taken).status_code == 409
    replaced = server.http.post(f"{base}/namespaces/db/register", json={**taken, "overwrite": True})
    assert replaced.status_code == 200, replaced.text
    assert catalog.load_table("db.two").scan().to_arrow().num_rows == 5
    timeline = server.api().get("/tables/lake/db/two/timeline").json()
    assert (timeline[0]["operation"], timeline[0]["metadata_location"]) == ("register", location)

    # a staged create inside a multi-table transaction (what Java sends for a create in a transaction)
    warehouse = server.api().get("/catalogs/lake").json()["properties"]["warehouse"]
    create = [
        {"action": "assign-uuid", "uuid": "6f1d5c3e-2a4b-4c8d-9e0f-1a2b3c4d5e6f"},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": json.loads(SCHEMA.model_dump_json(by_alias=True)), "last-column-id": 2},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": f"{warehouse}/db/staged"},
        {"action": "set-properties", "updates": {"created": "in-a-transaction"}},
    ]
    staged = {"identifier": {"namespace": ["db"], "name": "staged"}, "requirements": [{"type": "assert-create"}]}
    together = {"table-changes": [{**staged, "updates": create}, change(two, str(two.metadata.table_uuid), "4")]}
    refused = server.http.post(f"{base}/transactions/commit", json=together)  # db.two is another table now
    assert refused.status_code == 409 and not catalog.table_exists("db.staged")
    adopted_uuid = str(catalog.load_table("db.two").metadata.table_uuid)
    together["table-changes"][1] = change(two, adopted_uuid, "4")
    assert server.http.post(f"{base}/transactions/commit", json=together).status_code == 204
    made = catalog.load_table("db.staged")
    assert made.properties["created"] == "in-a-transaction" and catalog.load_table("db.two").properties["batch"] == "4"
    again = server.http.post(f"{base}/transactions/commit", json={"table-changes": [{**staged, "updates": create}]})
    assert again.status_code == 409 and "already exists" in again.json()["error"]["message"]
    assert len(list(Path(f"{warehouse}/db/staged/metadata").glob("*.metadata.json"))) == 1  # none left behind


def test_expiring_snapshots_already_gone_is_no_error_and_no_new_version(server: ServerProcess) -> None:
    """Two expirations racing (Java's ExpireSnapshots from two engines): the second names snapshots the first
    removed. Java's TableMetadata ignores them; so does lakewarden, and a commit that changes nothing makes no
    new metadata version."""
    from pyiceberg.table.update import RemoveSnapshotsUpdate

    catalog = client(server)
    catalog.create_namespace("expiry")
    table = catalog.create_table("expiry.t", SCHEMA)
    for i in range(3):
        table.append(rows(i * 10, 10))
    table = catalog.load_table("expiry.t")
    oldest, middle, _ = [s.snapshot_id for s in table.snapshots()]
    first = catalog.commit_table(table, (), (RemoveSnapshotsUpdate(snapshot_ids=[oldest]),))
    assert oldest not in {s.snapshot_id for s in first.metadata.snapshots}
    second = catalog.commit_table(table, (), (RemoveSnapshotsUpdate(snapshot_ids=[oldest, middle]),))
    assert {s.snapshot_id for s in second.metadata.snapshots} == {s.snapshot_id for s in first.metadata.snapshots} - {
        middle
    }
    unchanged = catalog.commit_table(table, (), (RemoveSnapshotsUpdate(snapshot_ids=[oldest]),))
    assert unchanged.metadata_location == second.metadata_location  # nothing to do: no new version
    timeline = server.api().get("/tables/lake/expiry/t/timeline").json()
    assert [c["version"] for c in timeline][:2] == [5, 4]  # the two expirations that removed something
    assert catalog.load_table("expiry.t").scan().to_arrow().num_rows == 30


def test_names_with_spaces_and_plus_signs_as_java_and_pyiceberg_encode_them(server: ServerProcess) -> None:
    """Java's URLEncoder writes a space as `+` (so Spark asks for `my+t`); pyiceberg writes `%20`; a plus sign
    is `%2B` from both."""
    catalog = client(server)
    catalog.create_namespace("sp ace")
    catalog.create_table(("sp ace", "my t"), SCHEMA)
    catalog.create_table(("sp ace", "a+b"), SCHEMA)
    base = f"{server.url}/iceberg/v1/lake/namespaces"
    for path, status in (
        ("sp+ace/tables/my+t", 200),  # as Java sends it
        ("sp%20ace/tables/my%20t", 200),  # as pyiceberg sends it
        ("sp+ace/tables/a%2Bb", 200),
        ("sp+ace/tables/a+b", 404),  # `a b`, which does not exist
    ):
        answer = server.http.get(f"{base}/{path}")
        assert answer.status_code == status, (path, answer.text)
    assert "/sp ace/my t-" in server.http.get(f"{base}/sp+ace/tables/my+t").json()["metadata"]["location"]
    assert catalog.load_table(("sp ace", "a+b")).name() == ("sp ace", "a+b")


def test_cheaper_loads_etag_referenced_snapshots_and_keyset_pages(server: ServerProcess) -> None:
    catalog = client(server)
    catalog.create_namespace("cheap")
    table = catalog.create_table("cheap.t", SCHEMA)
    for i in range(3):
        table.append(rows(i * 10, 10))
    table = catalog.load_table("cheap.t")
    table.manage_snapshots().create_tag(table.snapshots()[0].snapshot_id, "first").commit()
    url = f"{server.url}/iceberg/v1/lake/namespaces/cheap/tables/t"

    full = server.http.get(url)
    etag = full.headers["etag"]
    assert len(full.json()["metadata"]["snapshots"]) == 3
    assert server.http.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert server.http.get(url, headers={"If-None-Match": f'"other", W/{etag}'}).status_code == 304
    assert server.http.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    refs = server.http.get(url, params={"snapshots": "refs"})
    assert refs.headers["etag"] != etag  # another body, another tag
    kept = {s["snapshot-id"] for s in refs.json()["metadata"]["snapshots"]}
    assert kept == {table.snapshots()[0].snapshot_id, table.snapshots()[-1].snapshot_id}  # the tag and main
    assert len(refs.json()["metadata"]["snapshot-log"]) == 3  # the log stays, as Java's server keeps it
    bad = server.http.get(url, params={"snapshots": "some"})
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("snapshots")
    table.append(rows(100, 1))  # a commit: a new metadata file, a new tag
    assert server.http.get(url, headers={"If-None-Match": etag}).status_code == 200

    # pages are keyset cursors: names created and dropped between pages neither repeat nor vanish
    for name in ("b", "d", "f", "h"):
        catalog.create_table(("cheap", name), SCHEMA)
    listing = f"{server.url}/iceberg/v1/lake/namespaces/cheap/tables"
    first = server.http.get(listing, params={"pageSize": 2}).json()
    assert [i["name"] for i in first["identifiers"]] == ["b", "d"]
    catalog.create_table(("cheap", "a"), SCHEMA)  # before the cursor: not on the next pages
    catalog.drop_table(("cheap", "b"))  # the cursor's own name may go
    catalog.create_table(("cheap", "e"), SCHEMA)  # after it: seen
    second = server.http.get(listing, params={"pageSize": 2, "pageToken": first["next-page-token"]}).json()
    third = server.http.get(listing, params={"pageSize": 2, "pageToken": second["next-page-token"]}).json()
    assert [i["name"] for i in second["identifiers"] + third["identifiers"]] == ["e", "f", "h", "t"]
    assert third["next-page-token"] is None


def test_idempotency_keys_replay_the_first_answer(server: ServerProcess) -> None:
    base = f"{server.url}/iceberg/v1"
    config = server.http.get(f"{base}/config", params={"warehouse": "lake"}).json()
    assert config["idempotency-key-lifetime"] == "PT30M"

    def post(path: str, body: dict[str, Any], key: str | None = None, **headers: str) -> httpx.Response:
        extra = {**headers, **({"Idempotency-Key": key} if key else {})}
        return server.http.post(f"{base}/lake/{path}", json=body, headers=extra)

    key = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"
    anonymous = httpx.post(f"{base}/lake/namespaces", json={"namespace": ["idem"]}, headers={"Idempotency-Key": key})
    assert anonymous.status_code == 401  # not signed in: nothing claimed
    first = post("namespaces", {"namespace": ["idem"]}, key)
    again = post("namespaces", {"namespace": ["idem"]}, key)  # the answer was lost: the same request again
    assert first.status_code == again.status_code == 200 and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert post("namespaces", {"namespace": ["idem"]}).status_code == 409  # without the key: a conflict
    reused = (
        post("namespaces", {"namespace": ["other"]}, key.replace("017f", "017e")),
        post("namespaces/idem/tables", {"name": "x", "schema": {"type": "struct", "fields": []}}, key),
    )
    assert reused[0].status_code == 200 and reused[1].status_code == 400  # one key, one operation
    assert "another request" in reused[1].json()["error"]["message"]
    assert post("namespaces", {"namespace": ["z"]}, "not-a-uuid").status_code == 400

    schema = json.loads(SCHEMA.model_dump_json(by_alias=True))
    create_key, commit_key = "017f22e2-79b0-7cc3-98c4-dc0c0c073990", "017f22e2-79b0-7cc3-98c4-dc0c0c073991"
    created = post("namespaces/idem/tables", {"name": "t", "schema": schema}, create_key)
    assert created.status_code == 200
    assert post("namespaces/idem/tables", {"name": "t", "schema": schema}, create_key).json() == created.json()
    change = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    committed = post("namespaces/idem/tables/t", change, commit_key)
    replayed = post("namespaces/idem/tables/t", change, commit_key)
    assert committed.status_code == replayed.status_code == 200
    assert replayed.json()["metadata-location"] == committed.json()["metadata-location"]
    timeline = server.api().get("/tables/lake/idem/t/timeline").json()
    assert [c["version"] for c in timeline] == [1, 0]  # created once, committed once


class _Retries(logging.Handler):
    """pyiceberg's own retries of a commit that got 409 (it logs each before trying again)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Commit failed due to a concurrent update" in record.getMessage():
            self.count += 1


def test_file_conflict_strategy_lands_every_append_and_refuses_a_removed_file(server: ServerProcess) -> None:
    catalog = client(server)
    catalog.create_namespace("files")
    catalog.create_table("files.t", SCHEMA, properties={CONFLICT_STRATEGY: "file"})
    retries = _Retries()
    logging.getLogger("pyiceberg.table").addHandler(retries)
    try:
        errors: list[BaseException] = []

        def appender(worker: int) -> None:
            try:
                own = client(server)
                for batch in range(4):
                    own.load_table("files.t").append(rows(worker * 1000 + batch * 10, 10, f"w{worker}"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=appender, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert retries.count == 0  # every append landed at once: the server rebased those that raced
        data = catalog.load_table("files.t").scan().to_arrow()
        assert data.num_rows == 240 and len(set(data.column("id").to_pylist())) == 240

        # two writers on the same base: one deletes rows of worker 0's first file (rewriting it away); then an
        # append from the stale base lands, and a delete from the stale base in that removed file conflicts
        stale_append, stale_delete = catalog.load_table("files.t"), catalog.load_table("files.t")
        catalog.load_table("files.t").delete("id == 0")
        stale_append.append(rows(9000, 5))
        assert retries.count == 0
        # the server answers 409 (a file conflict); pyiceberg refreshes, retries, and its own validation then
        # refuses the delete: the stale writer must plan it again, and nothing of it was applied
        with pytest.raises((CommitFailedException, ValidationException)):
            stale_delete.delete("id == 1")
        assert retries.count >= 1
        ids = set(catalog.load_table("files.t").scan().to_arrow().column("id").to_pylist())
        assert 0 not in ids and 1 in ids and {9000, 9004} <= ids and len(ids) == 244
        catalog.load_table("files.t").delete("id == 1")  # planned again on the current table: it lands
        assert 1 not in set(catalog.load_table("files.t").scan().to_arrow().column("id").to_pylist())
    finally:
        logging.getLogger("pyiceberg.table").removeHandler(retries)


def test_a_self_optimizing_property_lakewarden_cannot_read_is_refused_when_set(server: ServerProcess) -> None:
    """A value the planner could not read would leave the table unplanned (and a running process settled by
    defaults): the commit that sets it is a 400 naming the property. A table that already holds such a value
    (adopted from elsewhere) still takes its writers' commits."""
    catalog = client(server)
    catalog.create_namespace("tuned")
    with pytest.raises(BadRequestError, match=re.escape("self-optimizing.quota")):
        catalog.create_table("tuned.bad", SCHEMA, properties={"self-optimizing.quota": "lots"})
    table = catalog.create_table("tuned.t", SCHEMA, properties={"self-optimizing.quota": "0.5"})
    for key, value in [("self-optimizing.execute.num-retries", "-1"), ("read.split.open-file-cost", "4 MB")]:
        with pytest.raises(BadRequestError, match=re.escape(key)):
            table.transaction().set_properties({key: value}).commit_transaction()
    table = catalog.load_table("tuned.t")
    assert table.properties["self-optimizing.quota"] == "0.5" and "read.split.open-file-cost" not in table.properties
    table.transaction().set_properties({"self-optimizing.quota": "2"}).commit_transaction()  # threads, as Amoro

    current = Path(catalog.load_table("tuned.t").metadata_location.removeprefix("file://"))
    document = json.loads(current.read_text())
    document["properties"]["self-optimizing.allow-partial-commit"] = "maybe"
    crafted = current.parent / "99999-crafted.metadata.json"  # what another catalog's writer left
    crafted.write_text(json.dumps(document))
    base = f"{server.url}/iceberg/v1/lake"
    adopted = server.http.post(
        f"{base}/namespaces/tuned/register", json={"name": "adopted", "metadata-location": str(crafted)}
    )
    assert adopted.status_code == 200, adopted.text
    catalog.load_table("tuned.adopted").append(rows(0, 3))  # does not touch the property: lands
    assert len(catalog.load_table("tuned.adopted").scan().to_arrow()) == 3
    with pytest.raises(BadRequestError, match=re.escape("self-optimizing.allow-partial-commit")):
        catalog.load_table("tuned.adopted").transaction().set_properties(
            {"self-optimizing.group": "default"}
        ).commit_transaction()
