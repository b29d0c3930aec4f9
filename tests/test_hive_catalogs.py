"""Tables in a Hive Metastore, managed where they live: a real metastore process (Hive 2.3.9 from pyspark's jars),
lakewarden's server discovering and planning through pyiceberg's HiveCatalog, and optimizers committing through
Iceberg's HiveCatalog in Spark, with the metastore's locks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakewarden.domain.catalogs import CatalogSpec, TableFilter, validate_catalog
from lakewarden.domain.errors import InvalidField, NothingToDo
from lakewarden.metadata.catalogs import open_catalog, table_locations
from lakewarden.spark.session import configure_catalogs
from tests.helpers import (
    checksum,
    create_by_cat,
    file_counts,
    insert_ids,
    optimize_table,
    planned_process,
    run_task,
    running_optimizer,
    wait_for,
)
from tests.hive_metastore import Metastore, hive_metastore, start_metastore, stop_metastore
from tests.s3 import BUCKET, REGION, S3Server, s3_server
from tests.servers import ServerProcess, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SETTINGS = {
    "self-optimizing.minor.trigger.file-count": "3",
    "self-optimizing.min-plan-interval": "0",
    "write.delete.mode": "merge-on-read",
}


def _listed(settings: dict[str, str]) -> str:
    return ", ".join(f"'{k}'='{v}'" for k, v in settings.items())


@pytest.mark.parametrize(
    ("properties", "field", "message"),
    [
        ({}, "properties.uri", "required for a hive catalog"),
        ({"uri": "http://127.0.0.1:9083"}, "properties.uri", "thrift://host:port"),
        ({"uri": "thrift://127.0.0.1"}, "properties.uri", "thrift://host:port"),
        ({"uri": "thrift://a:9083,thrift://b"}, "properties.uri", "'thrift://b'"),
    ],
)
def test_a_hive_catalog_needs_its_metastores_thrift_addresses(
    properties: dict[str, str], field: str, message: str
) -> None:
    with pytest.raises(InvalidField) as raised:
        validate_catalog(CatalogSpec("hms", "hive", properties))
    assert raised.value.field == field and message in str(raised.value)
    validate_catalog(CatalogSpec("hms", "hive", {"uri": "thrift://a:9083, thrift://b:9083"}))


@pytest.fixture(scope="module")
def metastore() -> Iterator[Metastore]:
    with hive_metastore() as running:
        yield running


@pytest.fixture(scope="module")
def hms(metastore: Metastore, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> CatalogSpec:
    """The metastore as a team registers it: its address and a warehouse for new databases."""
    warehouse = tmp_path_factory.mktemp("hms-warehouse")
    spec = CatalogSpec("hms", "hive", {"uri": metastore.uri, "warehouse": f"file://{warehouse}"})
    configure_catalogs(spark, [spec])
    spark.sql("CREATE NAMESPACE IF NOT EXISTS hms.db")
    return spec


def _create(spark: SparkSession, table: str, **settings: str) -> None:
    create_by_cat(spark, table, _listed({**SETTINGS, **settings}))


def _write(spark: SparkSession, table: str, start: int, rows: int = 50) -> None:
    insert_ids(spark, table, start, rows)


def _metastore_location(spec: CatalogSpec, database: str, table: str) -> str:
    """The table's metadata location as the metastore holds it (its `metadata_location` parameter)."""
    locations = table_locations(open_catalog(spec), TableFilter.of(spec))
    assert locations is not None
    return locations[(database, table)]


@pytest.mark.spark
@pytest.mark.slow
def test_only_iceberg_tables_are_listed_each_with_its_metadata_location(hms: CatalogSpec, spark: SparkSession) -> None:
    from hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor
    from hive_metastore.ttypes import Table as HiveTable

    from lakewarden._compat.pyiceberg import hive_client

    _create(spark, "hms.db.listed")
    _write(spark, "hms.db.listed", 0)
    catalog = open_catalog(hms)
    descriptor = StorageDescriptor(
        cols=[FieldSchema("id", "bigint")], location=None, serdeInfo=SerDeInfo(serializationLib="x"), parameters={}
    )
    with hive_client(catalog.catalog()) as client:  # a plain Hive table beside it
        client.create_table(HiveTable(tableName="plain", dbName="db", sd=descriptor, parameters={}, tableType="x"))
    locations = table_locations(catalog, TableFilter.of(hms))
    assert locations is not None and ("db", "listed") in locations and ("db", "plain") not in locations
    spark.sql("REFRESH TABLE hms.db.listed")
    current = spark.sql("SELECT file FROM hms.db.listed.metadata_log_entries ORDER BY timestamp DESC").first()[0]  # type: ignore[index]
    assert locations[("db", "listed")] == current
    filtered = TableFilter.of(CatalogSpec("hms", "hive", {**hms.properties, "table-filter": "db\\.other"}))
    assert table_locations(catalog, filtered) == {}


@pytest.mark.spark
@pytest.mark.slow
def test_every_rewrite_and_maintenance_action_commits_through_the_metastore(
    hms: CatalogSpec, spark: SparkSession
) -> None:
    from tests.cdc import equality_delete

    # minor: fragments, a position delete and an equality delete (as Flink writes them)
    _create(spark, "hms.db.minor")
    for i in range(4):
        _write(spark, "hms.db.minor", i * 50)
    spark.sql("DELETE FROM hms.db.minor WHERE id = 101")
    equality_delete(spark, "hms.db.minor", {"id": [102, 103]})
    before = checksum(spark, "hms.db.minor", "id, cat, v")
    deletes_before = file_counts(spark, "hms.db.minor")[1]
    moved_from = _metastore_location(hms, "db", "minor")
    assert optimize_table(spark, hms, "hms.db.minor").type == "minor"
    assert checksum(spark, "hms.db.minor", "id, cat, v") == before
    data_files, delete_files = file_counts(spark, "hms.db.minor")
    assert data_files == 2 and delete_files < deletes_before
    assert _metastore_location(hms, "db", "minor") != moved_from  # committed through the metastore

    # major: every file a segment (tiny target), half of one partition's rows deleted
    segments = {
        "self-optimizing.target-size": "1024",
        "self-optimizing.fragment-ratio": "1024",
        "self-optimizing.min-target-size-ratio": "0.001",
    }
    _create(spark, "hms.db.major", **segments)
    for i in range(2):
        _write(spark, "hms.db.major", i * 50)
    spark.sql("DELETE FROM hms.db.major WHERE cat = 'a' AND id % 4 = 0")
    before = checksum(spark, "hms.db.major", "id, cat, v")
    assert optimize_table(spark, hms, "hms.db.major").type == "major"
    assert checksum(spark, "hms.db.major", "id, cat, v") == before
    assert file_counts(spark, "hms.db.major")[1] == 0

    # full, sorted by the table's order
    _create(spark, "hms.db.full", **{"self-optimizing.full.trigger.interval": "1"})
    spark.sql("ALTER TABLE hms.db.full WRITE ORDERED BY id")
    for start in (150, 0, 100, 50):
        _write(spark, "hms.db.full", start)
    before = checksum(spark, "hms.db.full", "id, cat, v")
    assert optimize_table(spark, hms, "hms.db.full", full=True).type == "full"
    assert checksum(spark, "hms.db.full", "id, cat, v") == before and file_counts(spark, "hms.db.full") == (2, 0)

    # the maintenance actions, each a commit through the metastore
    def run(work: dict[str, Any]) -> Any:
        return run_task(spark, hms, {"table": "db.minor", **work})

    location = spark.sql("DESCRIBE TABLE EXTENDED hms.db.minor").where("col_name = 'Location'").first()[1]  # type: ignore[index]
    orphan = Path(location.removeprefix("file:")) / "data" / "orphan.parquet"
    orphan.write_bytes(b"left by a writer that died")
    cleaned = run({"action": "clean-orphan-files", "min_existing_ms": 0, "location": location})
    assert cleaned.files_deleted == 1 and not orphan.exists()
    expired = run({"action": "expire-snapshots", "keep_duration_ms": 0, "min_count": 1})
    assert expired.snapshots_expired > 0
    snapshot = spark.sql("SELECT snapshot_id FROM hms.db.minor.snapshots").first()[0]  # type: ignore[index]
    assert run({"action": "auto-create-tags", "tag": "t1", "snapshot_id": snapshot}).tags_created == 1
    assert run({"action": "rewrite-manifests"}).manifests_added >= 1
    spark.sql("REFRESH TABLE hms.db.minor")
    assert spark.sql("SELECT name FROM hms.db.minor.refs WHERE type = 'TAG'").first()[0] == "t1"  # type: ignore[index]
    assert checksum(spark, "hms.db.minor", "id, cat, v") == checksum(
        spark, "hms.db.minor VERSION AS OF 't1'", "id, cat, v"
    )

    # data expiration: the files of rows past the retention go, in a commit through the metastore
    spark.sql("CREATE TABLE hms.db.aged (id BIGINT, at TIMESTAMP) USING iceberg")
    spark.sql("INSERT INTO hms.db.aged SELECT /*+ REPARTITION(1) */ id, TIMESTAMP '2020-01-01' FROM range(2)")
    spark.sql("INSERT INTO hms.db.aged VALUES (9, current_timestamp())")
    aged = run_task(
        spark,
        hms,
        {
            "action": "expire-data",
            "table": "db.aged",
            "field": "at",
            "field_type": "timestamptz",
            "retention_ms": 86_400_000,
            "level": "file",
            "string_pattern": "yyyy-MM-dd",
            "number_format": "TIMESTAMP_MS",
            "base_on_rule": "CURRENT_TIME",
        },
    )
    assert aged.data_files_deleted == 1 and aged.records_deleted == 2
    spark.sql("REFRESH TABLE hms.db.aged")
    assert [r[0] for r in spark.sql("SELECT id FROM hms.db.aged").collect()] == [9]
    # position deletes left applying to nothing by a rewrite that gave the new files fresh sequence numbers
    _create(spark, "hms.db.dangling")
    _write(spark, "hms.db.dangling", 0, rows=100)
    spark.sql("DELETE FROM hms.db.dangling WHERE id % 5 = 0")
    options = "map('rewrite-all', 'true', 'use-starting-sequence-number', 'false')"
    spark.sql(f"CALL hms.system.rewrite_data_files(table => 'db.dangling', options => {options})")
    before = checksum(spark, "hms.db.dangling", "id, cat, v")
    dangling = run_task(spark, hms, {"action": "clean-dangling-delete-files", "table": "db.dangling"})
    assert dangling.delete_files_removed == 2
    assert checksum(spark, "hms.db.dangling", "id, cat, v") == before and file_counts(spark, "hms.db.dangling")[1] == 0


@pytest.mark.spark
@pytest.mark.slow
def test_a_writer_committing_through_the_metastore_loses_nothing_while_lakewarden_compacts(
    hms: CatalogSpec, spark: SparkSession
) -> None:
    _create(spark, "hms.db.busy")
    for i in range(4):
        _write(spark, "hms.db.busy", i * 50)
    written = [200]
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(12):
                _write(spark, "hms.db.busy", written[0])
                written[0] += 50
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    compactions = lost = 0
    try:
        while thread.is_alive() and compactions < 3:
            try:
                planned = planned_process(hms, "hms.db.busy")
            except NothingToDo:  # the writer has not left enough fragments yet
                time.sleep(0.5)
                continue
            try:
                for task in planned.tasks:
                    run_task(spark, hms, task.input.model_dump(mode="json"))
            except Exception as exc:
                # the writer won every one of Iceberg's commit retries: the rewrite is lost, not the data (checked
                # below); the optimizer would fail the task and the table be planned again, as here
                if "CommitFailedException" not in str(exc):
                    raise
                lost += 1
                continue
            compactions += 1
    finally:
        thread.join(300)
    assert not failures, failures
    assert compactions >= 1, f"every compaction lost its commit to the writer ({lost})"
    rows = spark.sql("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM hms.db.busy").first()
    assert tuple(rows) == (written[0], written[0], 0, written[0] - 1)  # type: ignore[arg-type]
    summaries = spark.sql("SELECT summary FROM hms.db.busy.snapshots").collect()
    assert any("lakewarden.process-id" in s[0] for s in summaries)


@pytest.mark.spark
@pytest.mark.slow
def test_a_lock_that_cannot_be_had_fails_the_commit_clearly_and_changes_nothing(
    hms: CatalogSpec, spark: SparkSession
) -> None:
    from hive_metastore.ttypes import LockComponent, LockLevel, LockRequest, LockType, UnlockRequest

    from lakewarden._compat.pyiceberg import hive_client

    # Iceberg's HiveCatalog waits for the table's lock with its own retries (iceberg.hive.lock-*), here 3 s
    impatient = CatalogSpec("hmsbrief", "hive", {**hms.properties, "hadoop.iceberg.hive.lock-timeout-ms": "3000"})
    configure_catalogs(spark, [impatient])
    _create(spark, "hms.db.locked")
    for i in range(3):
        _write(spark, "hms.db.locked", i * 50)
    before = checksum(spark, "hms.db.locked", "id, cat, v")
    task = planned_process(impatient, "hmsbrief.db.locked").tasks[0].input.model_dump(mode="json")
    component = LockComponent(type=LockType.EXCLUSIVE, level=LockLevel.TABLE, dbname="db", tablename="locked")
    request = LockRequest(component=[component], user="another-writer", hostname="elsewhere")
    catalog = open_catalog(hms)
    with hive_client(catalog.catalog()) as client:
        lock = client.lock(request)
        try:
            with pytest.raises(Exception, match=r"waiting for lock on db\.locked"):
                run_task(spark, impatient, task)
        finally:
            client.unlock(UnlockRequest(lockid=lock.lockid))
    assert checksum(spark, "hms.db.locked", "id, cat, v") == before
    assert file_counts(spark, "hms.db.locked")[0] == 6  # nothing of the failed rewrite was committed
    run_task(spark, impatient, task)  # with the lock free, the same task commits
    assert file_counts(spark, "hms.db.locked")[0] == 2
    assert checksum(spark, "hms.db.locked", "id, cat, v") == before


@pytest.fixture(scope="module")
def hive_server(tmp_path_factory: pytest.TempPathFactory, hms: CatalogSpec) -> Iterator[ServerProcess]:
    """A server with the metastore registered as a team would: `POST /api/v1/catalogs`."""
    with started_server(tmp_path_factory.mktemp("hive-server"), extra="  evaluator: {interval: 1s}\n") as server:
        body = {"name": "hms", "type": "hive", "properties": dict(hms.properties)}
        registered = server.api().post("/catalogs", json=body)
        assert registered.status_code == 201, registered.text
        yield server


@pytest.mark.spark
@pytest.mark.slow
def test_the_server_finds_a_metastore_table_and_an_optimizer_compacts_it(
    hive_server: ServerProcess, hms: CatalogSpec, spark: SparkSession
) -> None:
    api = hive_server.api()
    _create(spark, "hms.db.served")
    for i in range(4):
        _write(spark, "hms.db.served", i * 50)
    before = checksum(spark, "hms.db.served", "id, cat, v")

    def pending() -> dict[str, Any] | None:  # found by the explorer's watch, no refresh asked for
        found = api.get("/tables/hms/db/served")
        return found.json() if found.status_code == 200 and found.json()["status"] == "pending" else None

    table = wait_for("the table pending", pending, timeout=60)
    assert table["evaluation"]["type"] == "minor"
    with running_optimizer(hive_server, spark):
        process = wait_for(
            "a finished process",
            lambda: next(
                (p for p in api.get("/processes").json() if p["table"] == "hms.db.served" and p["status"] != "running"),
                None,
            ),
        )
    assert process["status"] == "success", process
    assert checksum(spark, "hms.db.served", "id, cat, v") == before
    assert file_counts(spark, "hms.db.served") == (2, 0)
    shown = api.get("/catalogs/hms").json()
    assert shown["health"] == "healthy" and shown["type"] == "hive"


@pytest.mark.spark
@pytest.mark.slow
def test_a_metastore_served_through_the_rest_endpoint_takes_a_clients_commit_under_its_lock(
    hive_server: ServerProcess, hms: CatalogSpec, spark: SparkSession
) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    api = hive_server.api()
    properties = {**api.get("/catalogs/hms").json()["properties"], "rest-endpoint.enabled": "true"}
    assert api.put("/catalogs/hms", json={"properties": properties}).status_code == 200
    _create(spark, "hms.db.remote")
    _write(spark, "hms.db.remote", 0, rows=4)
    client = RestCatalog("via", uri=f"{hive_server.url}/iceberg", warehouse="hms", token=hive_server.token)
    table = client.load_table("db.remote")
    rows = pa.table({"id": pa.array([100, 101], pa.int64()), "cat": ["a", "b"], "v": ["x", "y"]})
    table.append(rows.cast(table.schema().as_arrow()))
    # the metastore has the client's commit: Spark, reading through the metastore, sees the rows
    spark.sql("REFRESH TABLE hms.db.remote")
    assert sorted(r[0] for r in spark.sql("SELECT id FROM hms.db.remote").collect()) == [0, 1, 2, 3, 100, 101]
    assert _metastore_location(hms, "db", "remote") == client.load_table("db.remote").metadata_location


def test_a_metastore_that_is_down_keeps_every_table_and_a_dropped_table_ends_its_process(
    tmp_path: Path,
) -> None:
    import pyarrow as pa

    from lakewarden.metadata.hive import HiveTables

    directory = tmp_path / "metastore"
    metastore = start_metastore(directory)
    try:
        spec = {"uri": metastore.uri, "warehouse": f"file://{tmp_path}/warehouse"}
        outside = HiveTables("team", spec)  # a writer of the team's, with pyiceberg
        outside.create_namespace("db")
        for name in ("kept", "dropped"):
            table = outside.create_table(f"db.{name}", pa.schema([pa.field("id", pa.int64())]))
            table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        settings = "  evaluator: {interval: 1s}\n"
        (tmp_path / "server").mkdir()
        with started_server(tmp_path / "server", extra=settings) as server:
            api = server.api()
            assert api.post("/catalogs", json={"name": "team", "type": "hive", "properties": spec}).status_code == 201
            assert api.post("/catalogs/team/refresh").json()["tables"] == 2

            stop_metastore(metastore)  # down: the catalog is unhealthy, its tables stay
            refreshed = api.post("/catalogs/team/refresh").json()
            assert refreshed["health"] == "unhealthy" and "TTransportException" in refreshed["error"]
            assert {t["identifier"] for t in api.get("/tables", params={"catalog": "team"}).json()} == {
                "team.db.kept",
                "team.db.dropped",
            }
            shown = api.get("/catalogs/team").json()
            assert shown["health"] == "unhealthy" and shown["last_error"]

            metastore = start_metastore(directory, port=metastore.port)  # back: healthy again, nothing lost
            assert api.post("/catalogs/team/refresh").json()["health"] == "healthy"
            assert api.get("/catalogs/team").json()["health"] == "healthy"

            # a maintenance process waits for an optimizer; the table is dropped outside lakewarden meanwhile
            run = api.post("/tables/team/db/dropped/actions/rewrite-manifests", json={})
            assert run.status_code in (200, 201) and run.json()["created"], run.text
            process_id = run.json()["process_id"]
            outside.drop_table("db.dropped")
            api.post("/catalogs/team/refresh")  # or the explorer's next watch: whichever sees it first disposes it
            wait_for("the table disposed", lambda: api.get("/tables/team/db/dropped").status_code == 404, timeout=30)
            ended = api.get(f"/processes/{process_id}").json()
            assert ended["status"] == "canceled" and ended["fail_reason"] == "the table is no longer in its catalog"
            assert api.get("/tables/team/db/kept").status_code == 200
    finally:
        stop_metastore(metastore)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.mark.spark
@pytest.mark.slow
def test_a_metastore_table_on_s3_is_compacted_and_expired_with_the_catalogs_own_settings(
    spark: SparkSession, s3: S3Server
) -> None:
    with hive_metastore(s3) as metastore:
        spec = CatalogSpec(
            "hmss3",
            "hive",
            {
                "uri": metastore.uri,
                "warehouse": f"s3://{BUCKET}/hivewh",
                "s3.endpoint": s3.endpoint,
                "s3.region": REGION,
                "s3.path-style-access": "true",
                "s3.access-key-id": s3.access_key_id,
                "s3.secret-access-key": s3.secret_access_key,
            },
        )
        configure_catalogs(spark, [spec])
        spark.sql(f"CREATE NAMESPACE hmss3.db LOCATION 's3a://{BUCKET}/hivewh/db.db'")
        _create(spark, "hmss3.db.t")
        for i in range(4):
            _write(spark, "hmss3.db.t", i * 50)
        before = checksum(spark, "hmss3.db.t", "id, cat, v")
        assert optimize_table(spark, spec, "hmss3.db.t").type == "minor"
        assert checksum(spark, "hmss3.db.t", "id, cat, v") == before
        assert file_counts(spark, "hmss3.db.t") == (2, 0)
        expired = run_task(
            spark, spec, {"action": "expire-snapshots", "table": "db.t", "keep_duration_ms": 0, "min_count": 1}
        )
        assert expired.snapshots_expired > 0
        keys = s3.keys("hivewh/db.db/t/")
        assert any(k.endswith(".metadata.json") for k in keys) and any(k.endswith(".parquet") for k in keys)
        assert _metastore_location(spec, "db", "t").startswith(f"s3a://{BUCKET}/hivewh/db.db/t/metadata/")


@pytest.mark.spark
@pytest.mark.slow
def test_writes_through_the_rest_endpoint_planned_before_a_compaction_land_in_the_metastore(
    hive_server: ServerProcess, hms: CatalogSpec, spark: SparkSession
) -> None:
    """Writers always win on a forwarded catalog too: a pyiceberg delete and a Spark merge-on-read DELETE, both
    through lakewarden's REST endpoint and planned before lakewarden compacted their tables in the metastore,
    land on their only try; what yields is committed to the metastore under its lock, in one commit each."""
    from pyiceberg.catalog.rest import RestCatalog

    api = hive_server.api()
    properties = {**api.get("/catalogs/hms").json()["properties"], "rest-endpoint.enabled": "true"}
    assert api.put("/catalogs/hms", json={"properties": properties}).status_code == 200
    held = {"self-optimizing.enabled": "false", "commit.retry.num-retries": "0"}
    for name, deletes in (("yield_py", "copy-on-write"), ("yield_spark", "merge-on-read")):  # pyiceberg: CoW only
        _create(spark, f"hms.db.{name}", **held, **{"write.delete.mode": deletes})
        for i in range(4):
            _write(spark, f"hms.db.{name}", i * 50)
    client = RestCatalog("via", uri=f"{hive_server.url}/iceberg", warehouse="hms", token=hive_server.token)
    planned = client.load_table("db.yield_py").transaction()
    planned.delete("id < 60")  # removes and rewrites files the compaction rewrites
    # the Spark writer's session keeps the table it loaded (the ordering is forced, as in test_writers_win.py)
    writer = spark.newSession()
    writer.conf.set("spark.sql.catalog.via.cache.expiration-interval-ms", "-1")
    endpoint = {"uri": f"{hive_server.url}/iceberg", "token": hive_server.token}
    configure_catalogs(writer, [CatalogSpec("hms", "internal", endpoint)], {"hms": "via"})
    assert writer.sql("SELECT count(*) FROM via.db.yield_spark").first()[0] == 200  # type: ignore[index]
    for name in ("yield_py", "yield_spark"):
        spark.sql(f"ALTER TABLE hms.db.{name} SET TBLPROPERTIES ('self-optimizing.enabled'='true')")

    def ended(name: str) -> dict[str, Any] | None:
        found = [p for p in api.get("/processes").json() if p["table"] == f"hms.db.{name}"]
        return next((p for p in found if p["status"] != "running"), None)

    with running_optimizer(hive_server, spark):
        for name in ("yield_py", "yield_spark"):
            process = wait_for(f"{name} compacted", lambda name=name: ended(name))
            assert process["status"] == "success", process

    planned.commit_transaction()
    writer.sql("DELETE FROM via.db.yield_spark WHERE cat = 'a' AND id = 10")

    for name, gone in (("yield_py", set(range(60))), ("yield_spark", {10})):
        spark.sql(f"REFRESH TABLE hms.db.{name}")
        assert sorted(r[0] for r in spark.sql(f"SELECT id FROM hms.db.{name}").collect()) == sorted(
            set(range(200)) - gone
        )
        summaries = [s.summary for s in open_catalog(hms).load_table(("db", name)).snapshots() if s.summary]
        assert any(s.get("lakewarden.yielded-snapshots") for s in summaries), name
