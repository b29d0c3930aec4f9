"""Writers always win: a writer's commit that fails only because of lakewarden's own work lands, in one commit
that undoes that work (metadata/yielding.py). Orderings are forced, not timed: the writer plans
(its transaction holds the table as it was), lakewarden compacts and commits, then the writer commits."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from lakewarden.domain.yields import YIELDED
from tests.cdc import upsert
from tests.helpers import running_optimizer, wait_for
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
COMPACTING = {
    "self-optimizing.minor.trigger.file-count": "3",
    "self-optimizing.min-plan-interval": "0",
    "self-optimizing.enabled": "true",
    # pyiceberg retries a refused commit itself, re-validating on the new head: the server's own answer is
    # what these tests are about
    "commit.retry.num-retries": "0",
}


@pytest.fixture
def lake(server: ServerProcess) -> Iterator[tuple[ServerProcess, httpx.Client, RestCatalog]]:
    api = server.api()  # the server's own internal catalog `lake`
    catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    catalog.create_namespace("db")
    yield server, api, catalog


def rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "v": pa.array(["x"] * count)})


def small_files(catalog: RestCatalog, name: str, **properties: str) -> Table:
    """A table of four small files, ids 0..39, which lakewarden finds worth compacting."""
    table = catalog.create_table(f"db.{name}", SCHEMA, properties={**COMPACTING, **properties})
    for i in range(4):
        table.append(rows(i * 10, 10))
    loaded: Table = catalog.load_table(f"db.{name}")
    return loaded


def ids(catalog: RestCatalog, name: str) -> list[int]:
    return sorted(catalog.load_table(f"db.{name}").scan().to_arrow()["id"].to_pylist())


def test_pyiceberg_commits_planned_before_a_compaction_land_after_it(
    lake: tuple[ServerProcess, httpx.Client, RestCatalog], spark: SparkSession
) -> None:
    """pyiceberg's writers each plan on a table, lakewarden compacts them all, then the writers commit.

    A copy-on-write delete removes files the compaction removed: without yielding its commit fails for good
    (pyiceberg does not retry, and a retry would not find the files). It lands, with the compaction undone in
    the same commit: the table holds the writer's view, every row the writer meant. So does an overwrite. An
    append names no file: it lands on top, the compaction kept. A commit sent again with its Idempotency-Key
    lands once; a transaction over two tables lands whole."""
    server, api, catalog = lake
    names = ["cow", "over", "appends", "again", "one", "two"]
    tables = {name: small_files(catalog, name, **{"self-optimizing.enabled": "false"}) for name in names}
    base = tables["cow"].metadata.current_snapshot_id
    writers = {name: tables[name].transaction() for name in names}
    writers["cow"].delete("id < 15")  # drops the first file, rewrites the second: files the compaction removes
    writers["over"].overwrite(rows(100, 5), overwrite_filter="id < 15")  # pyiceberg's: a delete, then an append
    writers["appends"].append(rows(100, 5))
    for name in ("again", "one", "two"):
        writers[name].delete("id < 15")
    for name in names:
        with catalog.load_table(f"db.{name}").transaction() as change:
            change.set_properties({"self-optimizing.enabled": "true"})
    rewrites = compacted_all(server, api, spark, names)
    assert len(catalog.load_table("db.cow").inspect.files()) == 1

    writers["cow"].commit_transaction()
    landed = catalog.load_table("db.cow")
    assert ids(catalog, "cow") == list(range(15, 40))
    # pyiceberg's delete is two snapshots here (a file dropped, a file rewritten): both land on the rewrite
    rewrite = rewrites["cow"]
    chain = [s for s in landed.snapshots() if s.sequence_number > landed.snapshot_by_id(rewrite).sequence_number]
    assert chain[0].parent_snapshot_id == rewrite and [s.summary.operation.value for s in chain] == [
        "delete",
        "overwrite",
    ]
    assert all(s.summary["lakewarden.yielded-snapshots"] == str(rewrite) for s in chain)
    assert base in {s.snapshot_id for s in landed.snapshots()}  # history is kept: the base, the rewrite, the delete
    assert len(landed.inspect.files()) == 3  # the compacted file is out of the table again, the writer's files in

    writers["over"].commit_transaction()
    assert ids(catalog, "over") == [*range(15, 40), *range(100, 105)]

    writers["appends"].commit_transaction()
    appended = catalog.load_table("db.appends")
    assert ids(catalog, "appends") == [*range(40), *range(100, 105)]
    current = appended.current_snapshot()
    assert current is not None and current.parent_snapshot_id == rewrites["appends"]
    assert current.summary is not None and "lakewarden.yielded-snapshots" not in current.summary.additional_properties
    assert len(appended.inspect.files()) == 2  # the compacted file and the append's

    # the answer to a yielding commit was lost: the same request again is answered the same, applied once
    base_url = f"{server.url}/iceberg/v1/lake"
    key = "018f22e2-79b0-7cc3-98c4-dc0c0c07398f"
    body = staged(writers["again"], "again")
    first = server.http.post(f"{base_url}/namespaces/db/tables/again", json=body, headers={"Idempotency-Key": key})
    again = server.http.post(f"{base_url}/namespaces/db/tables/again", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 200, first.text
    assert again.headers["idempotent-replayed"] == "true" and again.json() == first.json()
    undone = [s for s in catalog.load_table("db.again").snapshots() if s.summary and s.summary.get(YIELDED)]
    assert [s.summary[YIELDED] for s in undone] == [str(rewrites["again"])] * 2  # its two snapshots, once
    assert ids(catalog, "again") == list(range(15, 40))

    # one transaction over two tables, each planned before lakewarden compacted it: both land, atomically
    both = {"table-changes": [staged(writers["one"], "one"), staged(writers["two"], "two")]}
    assert server.http.post(f"{base_url}/transactions/commit", json=both).status_code == 204
    for name in ("one", "two"):
        assert ids(catalog, name) == list(range(15, 40))
        summaries = [s.summary for s in catalog.load_table(f"db.{name}").snapshots() if s.summary]
        assert any(s.get(YIELDED) == str(rewrites[name]) for s in summaries), name


def test_only_lakewardens_work_yields_a_past_window_or_a_table_that_says_no_gets_the_409(
    lake: tuple[ServerProcess, httpx.Client, RestCatalog], spark: SparkSession
) -> None:
    server, api, catalog = lake
    # another writer's commit in between: the second writer gets its 409 as always
    small_files(catalog, "rivals", **{"self-optimizing.enabled": "false"})
    first, second = (catalog.load_table("db.rivals").transaction() for _ in range(2))
    first.delete("id < 5")
    second.delete("id < 15")
    first.commit_transaction()
    with pytest.raises(CommitFailedException):
        second.commit_transaction()
    assert ids(catalog, "rivals") == list(range(5, 40))

    # the table turned yielding off: lakewarden's work stands and the writer gets the 409 it got before; past
    # the window the bases may be gone: a 409 that says so
    held = {"self-optimizing.enabled": "false"}
    small_files(catalog, "unyielding", **held, **{"lakewarden.commit.maintenance-yields": "false"})
    small_files(catalog, "late", **held, **{"lakewarden.commit.yield-window": "1s"})
    writers = {name: catalog.load_table(f"db.{name}").transaction() for name in ("unyielding", "late")}
    for name, writer in writers.items():
        writer.delete("id < 15")
        with catalog.load_table(f"db.{name}").transaction() as change:
            change.set_properties({"self-optimizing.enabled": "true"})
    compacted_all(server, api, spark, ["unyielding", "late"])
    with pytest.raises(CommitFailedException):
        writers["unyielding"].commit_transaction()
    assert ids(catalog, "unyielding") == list(range(40))
    time.sleep(1.5)
    with pytest.raises(CommitFailedException, match=r"older than the table's lakewarden\.commit\.yield-window"):
        writers["late"].commit_transaction()
    assert ids(catalog, "late") == list(range(40))


STATEMENTS = {
    # each names one file of partition `a` that the compaction removed: by a position delete (merge-on-read) or
    # by removing it (copy-on-write)
    "delete": "DELETE FROM {t} WHERE part = 'a' AND id = 2",
    "update": "UPDATE {t} SET v = 'u' WHERE part = 'a' AND id = 4",
    "merge": (
        "MERGE INTO {t} USING (SELECT 6L AS id, 'a' AS part, 'm' AS v UNION ALL SELECT 100L, 'a', 'new') s "
        "ON {t}.id = s.id AND {t}.part = 'a' WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    ),
}


def part(i: int) -> str:
    return "a" if i % 2 == 0 else "b"


def values(ids: range) -> str:
    return ", ".join(f"({i}, '{part(i)}', 'x')" for i in ids)


def expected(statement: str) -> list[tuple[int, str, str]]:
    table = {i: (part(i), "x") for i in range(40)}
    if statement == "delete":
        del table[2]
    elif statement == "update":
        table[4] = ("a", "u")
    else:
        table[6], table[100] = ("a", "m"), ("a", "new")
    return sorted((i, part, v) for i, (part, v) in table.items())


def test_spark_row_level_statements_planned_before_a_compaction_land_after_it(
    lake: tuple[ServerProcess, httpx.Client, RestCatalog], spark: SparkSession
) -> None:
    """Spark's DELETE, UPDATE and MERGE, merge-on-read and copy-on-write, each planned on a table lakewarden then
    compacts, commit after the compaction: every one lands on its only try with the rows it meant. Partition `a`,
    which each names, goes back to the writer's files; partition `b` stays compacted. The same statement on a
    table that turned yielding off fails in Spark as it does without lakewarden's help.

    The ordering is forced: the writer's Spark catalog keeps the table it loaded (Iceberg's caching catalog,
    never expiring here), so each statement plans on the snapshot before the compaction and commits with that
    snapshot as its base, as a job whose statement started before lakewarden committed does."""
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import configure_catalogs

    server, api, catalog = lake
    properties = api.get("/catalogs/lake").json()["properties"]
    # the writer's own session: the optimizer, on the same Spark application, resets its own session's catalogs
    writer = spark.newSession()
    writer.conf.set("spark.sql.catalog.w.cache.expiration-interval-ms", "-1")
    configure_catalogs(writer, [CatalogSpec("lake", "internal", {**properties, "token": server.token})], {"lake": "w"})
    names = [f"{mode}_{s}" for mode in ("mor", "cow") for s in STATEMENTS] + ["eq_upsert", "off_delete"]
    for name in names:
        mode = "copy-on-write" if name.startswith("cow") else "merge-on-read"
        writer.sql(
            f"CREATE TABLE w.db.{name} (id BIGINT, part STRING, v STRING) USING iceberg PARTITIONED BY (part) "
            f"TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}', 'write.update.mode'='{mode}', "
            f"'write.merge.mode'='{mode}', 'self-optimizing.enabled'='false', 'commit.retry.num-retries'='0')"
        )
        for batch in range(4):  # four small files in each partition
            writer.sql(f"INSERT INTO w.db.{name} VALUES {values(range(batch * 10, batch * 10 + 10))}")
    # lakewarden may compact them now: through another client, so the writer's catalog keeps what it loaded
    for name in names:
        changes = {**COMPACTING, "commit.retry.num-retries": "0"}
        if name.startswith("off"):
            changes["lakewarden.commit.maintenance-yields"] = "false"
        with catalog.load_table(f"db.{name}").transaction() as change:
            change.set_properties(changes)
    rewrites = compacted_all(server, api, spark, names)

    # an upsert stream as Flink writes it (equality deletes, then the new rows) names no file: it commits over the
    # compaction unchanged, nothing yields
    upsert(writer, "w.db.eq_upsert", [(2, "a", "up"), (3, "b", "up")], "id, part, v", "id", lambda r: f"part={r[1]}")
    upserted = catalog.load_table("db.eq_upsert")
    writer.sql("REFRESH TABLE w.db.eq_upsert")  # pyiceberg reads no equality deletes: Spark reads the rows
    got = [tuple(r) for r in writer.sql("SELECT id, v FROM w.db.eq_upsert ORDER BY id").collect()]
    assert got == [(i, "up" if i in (2, 3) else "x") for i in range(40)]
    assert not any(s.summary and s.summary.get("lakewarden.yielded-snapshots") for s in upserted.snapshots())
    assert rewrites["eq_upsert"] in {s.snapshot_id for s in upserted.snapshots()}
    assert len([f for f in upserted.inspect.files().to_pylist() if f["content"] == 0]) == 4  # 2 compacted + 2 new

    for name in (n for n in names if n != "eq_upsert"):
        statement = STATEMENTS[name.split("_")[1]]
        if name.startswith("off"):
            with pytest.raises(Exception, match=r"Cannot commit|Missing required files|missing data files"):
                writer.sql(statement.format(t=f"w.db.{name}"))
            continue
        writer.sql(statement.format(t=f"w.db.{name}"))
        table = catalog.load_table(f"db.{name}")
        got = table.scan().to_arrow().sort_by("id")
        assert list(zip(*(got[c].to_pylist() for c in ("id", "part", "v")), strict=True)) == expected(
            name.split("_")[1]
        ), name
        yielded = [s.summary.get("lakewarden.yielded-snapshots") for s in table.snapshots() if s.summary]
        assert str(rewrites[name]) in yielded, (name, yielded)
        files = table.inspect.files().to_pylist()
        data = {p: [f for f in files if f["content"] == 0 and f["partition"]["part"] == p] for p in "ab"}
        assert len(data["b"]) == 1, (name, files)  # the compaction of `b` stands
        assert len(data["a"]) >= 4, (name, files)  # `a` is the writer's again: its four files and its changes
    assert ids(catalog, "off_delete") == list(range(40))

    # each process whose work was undone says so, with what it cost; its table is evaluated again at once
    def undone(name: str) -> dict[str, Any] | None:
        found = [p for p in api.get("/processes").json() if p["table"] == f"lake.db.{name}"]
        return next((p for p in found if p["summary"].get("yields")), None)

    for name in (n for n in names[:-1] if n != "eq_upsert"):
        process = wait_for(f"{name}'s yield recorded", lambda name=name: undone(name))
        (entry,) = process["summary"]["yielded"]
        assert entry["files_restored"] == 4 and 0 < entry["share"] < 1, entry  # partition a's four files, not b's
        assert entry["to"].startswith("local-") and entry["cpu_ms"] > 0, entry  # the writer's Spark application
    wait_for("evaluated again", lambda: api.get("/tables/lake/db/mor_delete").json()["status"] == "pending")
    shown = cli(server, "process", "show", str(wait_for("yield", lambda: undone("mor_delete"))["process_id"])).stdout
    assert "yielded to writers" in shown and "CPU-s wasted" in shown, shown
    metrics = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.token}"}).text
    assert 'lakewarden_optimizing_yields_total{catalog="lake",database="db",table="mor_delete"} 1.0' in metrics


def compacted_all(server: ServerProcess, api: httpx.Client, spark: SparkSession, names: list[str]) -> dict[str, int]:
    """lakewarden compacts each table once; the snapshot each process committed, by table."""
    for name in names:
        wait_for(
            f"{name} pending",
            lambda name=name: api.get(f"/tables/lake/db/{name}").json().get("status") == "pending",
            timeout=60,
        )
    with running_optimizer(server, spark):
        done = wait_for(
            "the compactions",
            lambda: (lambda ended: ended if len(ended) == len(names) else None)(
                {p["table"].split(".")[-1]: p for p in api.get("/processes").json() if p["status"] != "running"}
            ),
            timeout=180,
        )
    assert all(p["status"] == "success" for p in done.values()), done
    return {name: int(api.get(f"/tables/lake/db/{name}/timeline").json()[0]["snapshot_id"]) for name in names}


def staged(transaction: Any, name: str) -> dict[str, Any]:
    """A pyiceberg transaction's staged change as the REST commit body (pyiceberg sends no Idempotency-Key and
    has no multi-table transaction: the body is sent here by hand)."""
    from pyiceberg.table import CommitTableRequest, TableIdentifier

    request = CommitTableRequest(
        identifier=TableIdentifier(namespace=["db"], name=name),
        requirements=transaction._requirements,
        updates=transaction._updates,
    )
    body: dict[str, Any] = json.loads(request.model_dump_json(by_alias=True, exclude_none=True))
    return body


def test_lakewardens_own_commit_waits_for_a_row_level_write_in_flight(
    lake: tuple[ServerProcess, httpx.Client, RestCatalog],
) -> None:
    """A client reported the scan of a row-level write (it reads `_file` and `_pos`): a commit of lakewarden's own
    to that table waits until the client's commit lands, so it cannot land between the write's plan and commit."""
    server, _, catalog = lake
    table = small_files(catalog, "held", **{"self-optimizing.enabled": "false", "commit.retry.num-retries": "4"})
    report = {
        "report-type": "scan-report",
        "table-name": "lake.db.held",
        "snapshot-id": table.metadata.current_snapshot_id,
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [1, 2147483646, 2147483645],
        "projected-field-names": ["id", "_file", "_pos"],
        "metrics": {},
        "metadata": {"app-id": "job-1", "engine-name": "spark"},
    }
    sent = server.http.post(f"{server.url}/iceberg/v1/lake/namespaces/db/tables/held/metrics", json=report)
    assert sent.status_code == 204, sent.text
    done: list[float] = []

    def own_commit() -> None:
        catalog.load_table("db.held").append(rows(200, 1), snapshot_properties={"lakewarden.process-id": "99"})
        done.append(time.monotonic())

    lakewarden = threading.Thread(target=own_commit)
    lakewarden.start()
    lakewarden.join(1.5)
    assert lakewarden.is_alive() and not done  # held while the write is in flight
    landed = time.monotonic()
    catalog.load_table("db.held").append(rows(300, 1), snapshot_properties={"app-id": "job-1"})
    lakewarden.join(30)
    assert done and done[0] >= landed
    summaries = [s.summary for s in catalog.load_table("db.held").snapshots() if s.summary is not None]
    order = [s.get("app-id") or s.get("lakewarden.process-id") for s in summaries]
    assert order[-2:] == ["job-1", "99"]  # the write, then lakewarden's commit
