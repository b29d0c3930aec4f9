"""Spark on S3: tables of lakewarden's REST catalog on an `s3://` warehouse (moto's S3 and STS server, with IAM
authentication on), written by Spark and compacted and maintained by lakewarden's optimizer, each reaching S3
through Iceberg's S3FileIO with nothing but the catalog: its URI and token. The storage profile (endpoint, region,
path style) and the temporary credentials the catalog vends for each table become the table's S3 client settings
(lakewarden's StorageFileIO around S3FileIO, `lakewarden/spark/java/`); `sql` catalogs give their own `s3.*`."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.spark.session import configure_catalogs
from tests.helpers import (
    checksum,
    file_counts,
    optimize_table,
    planned_process,
    run_task,
    running_optimizer,
    wait_for,
)
from tests.s3 import BUCKET, REGION, S3Server, s3_server
from tests.servers import LAKEWARDEN, ServerProcess, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SMALL = (
    "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
    "'self-optimizing.minor.trigger.file-count'='4', 'self-optimizing.min-plan-interval'='0'"
)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[ServerProcess]:
    """A server whose internal catalog `s3lake` keeps its tables on S3 and vends temporary credentials (STS)."""
    with started_server(tmp_path_factory.mktemp("server"), extra="  evaluator: {interval: 1s}\n") as server:
        properties = {
            "warehouse": f"s3://{BUCKET}/wh",
            "s3.endpoint": s3.endpoint,
            "s3.region": REGION,
            "s3.path-style-access": "true",
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
            "credentials.role-arn": s3.role_arn,
            "credentials.sts-endpoint": s3.endpoint,
        }
        answer = server.http.post(
            f"{server.url}/api/v1/catalogs", json={"name": "s3lake", "type": "internal", "properties": properties}
        )
        assert answer.status_code == 201, answer.text
        yield server


@pytest.fixture(scope="module")
def on_s3(lake: ServerProcess, spark: SparkSession) -> str:
    """Spark's catalog `s3lake`: the catalog's URI and the admin's token, nothing about S3."""
    configure_catalogs(spark, [CatalogSpec("s3lake", "internal", {"uri": f"{lake.url}/iceberg", "token": lake.token})])
    spark.sql("CREATE NAMESPACE IF NOT EXISTS s3lake.db")
    return "s3lake.db"


def _location(spark: SparkSession, table: str) -> str:
    row = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()
    assert row is not None
    return str(row[1])


def _key(location: str) -> str:
    return location.split("://", 1)[1].removeprefix(f"{BUCKET}/")


def _data_files(spark: SparkSession, table: str) -> int:
    spark.sql(f"REFRESH TABLE {table}")
    row = spark.sql(f"SELECT count(*) FROM {table}.files WHERE content = 0").first()
    assert row is not None
    return int(row[0])


def _finished(api: httpx.Client, process_id: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        process = dict(api.get(f"/processes/{process_id}").json())
        return process if process["status"] != "running" else None

    return dict(wait_for(f"process {process_id} to end", ended, timeout=240))


def test_spark_writes_and_lakewarden_compacts_a_table_on_s3_given_only_the_catalog(
    lake: ServerProcess, s3: S3Server, spark: SparkSession, on_s3: str
) -> None:
    table = f"{on_s3}.events"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ({SMALL})")
    for i in range(6):
        spark.sql(f"INSERT INTO {table} SELECT id, 'v' FROM range({i * 100}, {i * 100 + 100})")
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 0")  # position deletes, written to S3 too
    before = checksum(spark, table, "id, v")
    assert before[0] == 540
    location = _location(spark, table)
    assert location.startswith(f"s3://{BUCKET}/wh/db/events-")
    written = s3.keys(_key(location) + "/")
    assert sum(k.endswith(".parquet") for k in written) >= 7  # every data and delete file is on S3
    assert _data_files(spark, table) >= 6  # small files, one insert or more each

    api = lake.api()
    api.post("/catalogs/s3lake/refresh")
    with running_optimizer(lake, spark):
        wait_for("the table compacted", lambda: _data_files(spark, table) == 1, timeout=240)
    assert checksum(spark, table, "id, v") == before  # the same rows, byte for byte
    processes = api.get("/processes", params={"table": "s3lake.db.events"}).json()
    assert any(p["action"] == "optimizing" and p["status"] == "success" for p in processes), processes
    # whatever the optimizer wrote lies under the table's own prefix
    assert all(k.startswith(_key(location) + "/") for k in s3.keys("wh/db/events-"))


def test_maintenance_on_s3_lists_every_page_and_deletes_only_in_the_tables_prefix(
    lake: ServerProcess, s3: S3Server, spark: SparkSession, on_s3: str
) -> None:
    table = f"{on_s3}.t1"
    quiet = (
        "'self-optimizing.enabled'='false', 'clean-orphan-file.min-existing-time-minutes'='0', "
        "'snapshot.keep.duration'='0min'"
    )
    spark.sql(f"CREATE TABLE {table} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ({quiet})")
    for i in range(3):
        spark.sql(f"INSERT INTO {table} SELECT id, 'v' FROM range({i * 10}, {i * 10 + 10})")
    replaced = _data_files(spark, table)
    spark.sql(f"INSERT OVERWRITE {table} SELECT id, 'w' FROM range(0, 30)")  # older snapshots keep the first files
    before = checksum(spark, table, "id, v")
    location = _location(spark, table)
    key = _key(location)
    objects = s3.client()
    # more orphans than a listing's page (1,000 keys), under the table's prefix; and a neighbour whose name merely
    # starts with the table's directory name, as `t10` starts with `t1`
    orphans = [f"{key}/data/orphan-{i:04d}.parquet" for i in range(1_005)]
    for name in orphans:
        objects.put_object(Bucket=BUCKET, Key=name, Body=b"nobody's")
    neighbour = f"{key}0/data/not-this-table.parquet"
    objects.put_object(Bucket=BUCKET, Key=neighbour, Body=b"another table's")
    time.sleep(1.1)  # older than the minimum age of zero minutes, by the objects' own times

    api = lake.api()
    api.post("/catalogs/s3lake/refresh")
    dry = api.post("/tables/s3lake/db/t1/actions/clean-orphan-files", json={"dry_run": True})
    assert dry.status_code == 201, dry.text
    with running_optimizer(lake, spark):
        looked = _finished(api, int(dry.json()["process_id"]))
        assert looked["status"] == "success", looked
        summary = looked["summary"]
        assert summary["orphan_files_found"] == len(orphans)  # the overwritten files: an old snapshot's, not orphans
        assert summary["files_deleted"] == 0 and len(s3.keys(f"{key}/data/orphan-")) == len(orphans)

        cleaned = api.post("/tables/s3lake/db/t1/actions/clean-orphan-files", json={})
        process = _finished(api, int(cleaned.json()["process_id"]))
        assert process["status"] == "success", process
        assert process["summary"]["files_deleted"] == len(orphans)
        assert s3.keys(f"{key}/data/orphan-") == []
        assert s3.keys(f"{key}0/") == [neighbour]  # the neighbour is another table's: never touched

        expired = api.post("/tables/s3lake/db/t1/actions/expire-snapshots", json={})
        process = _finished(api, int(expired.json()["process_id"]))
        assert process["status"] == "success", process
        assert process["summary"]["snapshots_expired"] >= 3 and process["summary"]["data_files_deleted"] == replaced
    assert checksum(spark, table, "id, v") == before
    spark.sql(f"REFRESH TABLE {table}")
    live = {str(r[0]) for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    assert {f"s3://{BUCKET}/{k}" for k in s3.keys(f"{key}/data/")} == live  # what is left is what the table reads
    assert s3.keys(f"{key}0/") == [neighbour]


def _vended(lake: ServerProcess, table: str) -> list[dict[str, Any]]:
    """The storage credentials the catalog vends for `s3lake.db.<table>` (its `/credentials` endpoint)."""
    answer = lake.http.get(
        f"{lake.url}/iceberg/v1/s3lake/namespaces/db/tables/{table}/credentials",
        headers={"Authorization": f"Bearer {lake.token}"},
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["storage-credentials"])


def test_vended_credentials_reach_a_tables_files_by_prefix_and_are_renewed_before_they_expire(
    lake: ServerProcess, s3: S3Server, spark: SparkSession, on_s3: str
) -> None:
    """S3FileIO under StorageFileIO, with nothing but what a REST catalog gives a table: the credential vended for
    the table's prefix reaches its files, also when a path spells the scheme `s3a://`; credentials about to expire
    are asked of the catalog's refresh endpoint again, and ones that still last are used as they are."""
    table = f"{on_s3}.renewed"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    first = spark.sql(f"SELECT file_path FROM {table}.files").first()
    assert first is not None
    data = str(first[0])
    jvm: Any = spark._jvm
    profile = {"s3.endpoint": s3.endpoint, "client.region": REGION, "s3.path-style-access": "true"}

    def length(path: str, credentials: list[dict[str, Any]], **properties: str) -> int:
        io = jvm.io.lakewarden.iceberg.StorageFileIO()
        given = [
            jvm.org.apache.iceberg.io.StorageCredential.create(c["prefix"], jvm.java.util.HashMap(c["config"]))
            for c in credentials
        ]
        io.setCredentials(jvm.java.util.ArrayList(given))
        io.initialize(jvm.java.util.HashMap({**profile, **properties}))
        try:
            return int(io.newInputFile(path).getLength())
        finally:
            io.close()

    vended = _vended(lake, "renewed")
    assert [c["prefix"] for c in vended] == [_location(spark, table) + "/"]
    size = length(data, vended)
    assert size > 0 and length("s3a://" + data.split("://", 1)[1], vended) == size

    soon = str(int(time.time() * 1000) + 60_000)  # within the five minutes before expiry S3FileIO renews in
    later = str(int(time.time() * 1000) + 3_600_000)
    stale = {"s3.access-key-id": "ASIAOLD", "s3.secret-access-key": "old", "s3.session-token": "old"}
    refresh = {
        "uri": f"{lake.url}/iceberg",
        "token": lake.token,
        "client.refresh-credentials-endpoint": "v1/s3lake/namespaces/db/tables/renewed/credentials",
    }
    expiring = [{"prefix": vended[0]["prefix"], "config": {**stale, "s3.session-token-expires-at-ms": soon}}]
    assert length(data, expiring, **refresh) == size  # renewed from the catalog, then read
    lasting = [{"prefix": vended[0]["prefix"], "config": {**stale, "s3.session-token-expires-at-ms": later}}]
    with pytest.raises(Exception, match=r"the store refused the request \(403"):
        length(data, lasting, **refresh)  # kept as they are: the store refuses them


def test_storage_that_refuses_fails_at_once_naming_the_bucket(spark: SparkSession, s3: S3Server) -> None:
    """Wrong keys or a bucket that does not exist fail for good (not retried as if they might pass), and the
    message names the object and the reason."""
    from lakewarden.optimizer.failures import describe_failure
    from lakewarden.protocol.messages import FailureKind

    jvm: Any = spark._jvm

    def failure(location: str, **keys: str) -> tuple[str, FailureKind]:
        io = jvm.io.lakewarden.iceberg.StorageFileIO()
        settings = {"s3.endpoint": s3.endpoint, "s3.region": REGION, "s3.path-style-access": "true", **keys}
        io.initialize(jvm.java.util.HashMap(settings))
        try:
            io.newInputFile(location).getLength()
        except Exception as exc:
            return describe_failure(exc)
        raise AssertionError(f"{location} was read")

    server_keys = {"s3.access-key-id": s3.access_key_id, "s3.secret-access-key": s3.secret_access_key}
    message, kind = failure(f"s3://{BUCKET}/wh/x.parquet", **{**server_keys, "s3.access-key-id": "AKIANOTISSUED"})
    assert kind is FailureKind.FINAL and f"{BUCKET}/wh/x.parquet" in message, message
    message, kind = failure("s3://no-such-bucket/wh/x.parquet", **server_keys)
    assert kind is FailureKind.FINAL and "no-such-bucket" in message, message
    # an object that is not there is not the storage refusing: a retry may find the table's new state
    message, kind = failure(f"s3://{BUCKET}/wh/not-there.parquet", **server_keys)
    assert kind is FailureKind.TRANSIENT and "not-there.parquet" in message, message


@pytest.mark.parametrize("status", [503, 500])
def test_a_store_that_throttles_or_fails_for_a_moment_is_retried_until_it_answers(
    spark: SparkSession, s3: S3Server, status: int
) -> None:
    """S3's 503 SlowDown and 500 InternalError are passing: the read is retried with backoff and succeeds once
    the store answers again."""
    from tests.netproxy import LatencyProxy

    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = LatencyProxy(host, int(port), 0.0)
    s3.client().put_object(Bucket=BUCKET, Key="busy/x.bin", Body=b"payload")
    jvm: Any = spark._jvm
    io = jvm.io.lakewarden.iceberg.StorageFileIO()
    settings = {
        "s3.endpoint": proxy.endpoint,
        "s3.region": REGION,
        "s3.path-style-access": "true",
        "s3.access-key-id": s3.access_key_id,
        "s3.secret-access-key": s3.secret_access_key,
    }
    io.initialize(jvm.java.util.HashMap(settings))
    proxy.refuse(f"/{BUCKET}/busy/", status)
    healer = threading.Timer(3.0, proxy.heal, args=(f"/{BUCKET}/busy/",))
    healer.start()
    try:
        started = time.monotonic()
        assert io.newInputFile(f"s3://{BUCKET}/busy/x.bin").getLength() == len(b"payload")
        assert proxy.refused >= 2 and time.monotonic() - started >= 2.5  # refused, retried, answered
    finally:
        healer.cancel()
        proxy.close()


def test_a_task_on_a_store_that_stops_answering_fails_within_the_storage_timeout(
    spark: SparkSession, s3: S3Server, tmp_path: Path
) -> None:
    """A store that accepts connections and never answers (the harshest outage: nothing errors) used to hold a
    task inside S3A's retries for tens of minutes. With the catalog's `lakewarden.storage.timeout-ms` the task
    fails within about that long, as final, naming the bucket and saying the endpoint did not answer."""
    from lakewarden.metadata.catalogs import initialize_catalog
    from lakewarden.optimizer.failures import describe_failure, diagnose_failure
    from lakewarden.protocol.messages import FailureKind
    from tests.netproxy import TcpProxy

    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    spec = CatalogSpec(
        "s3dead",
        "sql",
        {
            "uri": f"sqlite:///{tmp_path}/s3dead.db",
            "warehouse": f"s3://{BUCKET}/deadwh",
            "s3.endpoint": f"http://127.0.0.1:{proxy.port}",
            "s3.region": REGION,
            "s3.path-style-access": "true",
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
            "lakewarden.storage.timeout-ms": "10000",
        },
    )
    try:
        initialize_catalog(spec)
        configure_catalogs(spark, [spec])
        spark.sql("CREATE NAMESPACE s3dead.db")
        spark.sql("CREATE TABLE s3dead.db.t (id BIGINT) USING iceberg")
        spark.sql("INSERT INTO s3dead.db.t VALUES (1), (2)")
        location = f"s3://{BUCKET}/deadwh/db/t"
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(Exception) as failed:
            run_task(
                spark,
                spec,
                {"action": "clean-orphan-files", "table": "db.t", "min_existing_ms": 0, "location": location},
            )
        took = time.monotonic() - started
    finally:
        proxy.close()
    message, kind = describe_failure(failed.value)
    # the timeout, and the task's own start (its catalog and plan) beside it
    assert took < 10.0 + 5.0, f"the task waited {took:.1f} s on a store that does not answer: {message}"
    assert kind is FailureKind.FINAL, message
    assert message.startswith(f"s3://{BUCKET} at http://127.0.0.1:{proxy.port} did not answer for"), message
    assert "did not answer" in (diagnose_failure(failed.value).hint or ""), message


def test_an_optimizer_stopped_while_its_store_does_not_answer_leaves_within_its_drain_timeout(
    lake: ServerProcess, s3: S3Server, spark: SparkSession, tmp_path: Path
) -> None:
    """SIGTERM while a task waits on a silent store (here a storage timeout of ten minutes): the optimizer used to
    wait for the task, which sat in S3A's retries for as long. It leaves within its drain timeout instead, having
    canceled the task and unregistered, and the server hands the task out again: it is neither lost nor failed."""
    from lakewarden.metadata.catalogs import initialize_catalog
    from tests.netproxy import TcpProxy

    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    properties = {
        "uri": f"sqlite:///{tmp_path}/s3hang.db",
        "warehouse": f"s3://{BUCKET}/hangwh",
        "s3.endpoint": f"http://127.0.0.1:{proxy.port}",
        "s3.region": REGION,
        "s3.path-style-access": "true",
        "s3.access-key-id": s3.access_key_id,
        "s3.secret-access-key": s3.secret_access_key,
        "lakewarden.storage.timeout-ms": "600000",
    }
    spec = CatalogSpec("s3hang", "sql", properties)
    initialize_catalog(spec)
    configure_catalogs(spark, [spec])
    spark.sql("CREATE NAMESPACE s3hang.db")
    spark.sql("CREATE TABLE s3hang.db.t (id BIGINT) USING iceberg TBLPROPERTIES ('self-optimizing.enabled'='false')")
    spark.sql("INSERT INTO s3hang.db.t VALUES (1)")
    api = lake.api()
    optimizer: subprocess.Popen[bytes] | None = None
    process_id = None
    try:
        assert (
            api.post("/catalogs", json={"name": "s3hang", "type": "sql", "properties": properties}).status_code == 201
        )
        wait_for("the table", lambda: api.get("/tables/s3hang/db/t").status_code == 200)
        started = api.post("/tables/s3hang/db/t/actions/clean-orphan-files", json={"dry_run": True})
        assert started.status_code == 201, started.text
        process_id = int(started.json()["process_id"])
        proxy.cut()
        log = (tmp_path / "optimizer.log").open("wb")
        optimizer = subprocess.Popen(
            [*LAKEWARDEN, "optimizer", "--server", lake.url, "--driver-memory", "1g", "--drain-timeout", "3"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "LAKEWARDEN_TOKEN": lake.token},
        )

        def acked() -> bool:
            return any(t["status"] == "acked" for t in api.get(f"/processes/{process_id}").json()["tasks"])

        wait_for("the task to be acked", acked, timeout=120)
        time.sleep(3.0)  # inside the store's silence
        optimizer.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert optimizer.wait(timeout=60) == 0, (tmp_path / "optimizer.log").read_text()[-3000:]
        took = time.monotonic() - stopping
        assert took < 3.0 + 15.0, f"{took:.1f} s to leave"  # the drain timeout, the cancel's grace, unregistering
        shown = (tmp_path / "optimizer.log").read_text()
        assert "still running after the drain timeout" in shown, shown[-3000:]
        # handed out again, not failed: the process goes on
        process = api.get(f"/processes/{process_id}").json()
        assert process["status"] == "running" and all(t["status"] != "failed" for t in process["tasks"]), process
    finally:
        if optimizer is not None and optimizer.poll() is None:
            os.killpg(optimizer.pid, signal.SIGKILL)
            optimizer.wait()
        if process_id is not None:
            api.post(f"/processes/{process_id}/cancel")
        api.delete("/catalogs/s3hang")
        proxy.close()


# ---- every action on S3, through an SQL catalog whose definition carries its storage settings


@pytest.fixture(scope="module")
def s3_sql(spark: SparkSession, s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> CatalogSpec:
    """An Iceberg SQL catalog with its warehouse on S3 and the keys in its own properties, as a team registers
    one; pyiceberg (the planner here, the server in production) and Spark both read them from there."""
    from lakewarden.metadata.catalogs import initialize_catalog

    tmp = tmp_path_factory.mktemp("s3sql")
    spec = CatalogSpec(
        "s3sql",
        "sql",
        {
            "uri": f"sqlite:///{tmp}/s3sql.db",
            "warehouse": f"s3://{BUCKET}/sqlwh",
            "s3.endpoint": s3.endpoint,
            "s3.region": REGION,
            "s3.path-style-access": "true",
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
        },
    )
    initialize_catalog(spec)
    configure_catalogs(spark, [spec])
    spark.sql("CREATE NAMESPACE IF NOT EXISTS s3sql.db")
    return spec


def _create(spark: SparkSession, name: str, **props: str) -> str:
    table = f"s3sql.db.{name}"
    settings = {
        "self-optimizing.target-size": "32768",
        "self-optimizing.minor.trigger.file-count": "3",
        "write.delete.mode": "merge-on-read",
        **props,
    }
    listed = ", ".join(f"'{k}'='{v}'" for k, v in settings.items())
    spark.sql(f"CREATE TABLE {table} (id BIGINT, cat STRING, v STRING) USING iceberg TBLPROPERTIES ({listed})")
    return table


def _write(spark: SparkSession, table: str, start: int, rows: int = 10) -> None:
    spark.sql(f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ id, 'a', 'v' FROM range({start}, {start + rows})")


def test_every_rewrite_runs_on_s3_through_an_sql_catalogs_own_settings(
    spark: SparkSession, s3_sql: CatalogSpec, s3: S3Server
) -> None:
    from tests.cdc import equality_delete

    # minor: fragments, a position delete and an equality delete (as Flink writes it) are rewritten away
    table = _create(spark, "mixed")
    for i in range(4):
        _write(spark, table, i * 100)
    spark.sql(f"DELETE FROM {table} WHERE id = 101")
    equality_delete(spark, table, {"id": [202, 303]})
    before = checksum(spark, table, "id, cat, v")
    assert before[0] == 37 and file_counts(spark, table) == (4, 2)
    optimize_table(spark, s3_sql, table)
    assert checksum(spark, table, "id, cat, v") == before and file_counts(spark, table) == (1, 0)

    # full, clustered by the table's sort order, on format version 3 with deletion vectors
    table = _create(spark, "v3sorted", **{"format-version": "3"})
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY id")
    for start in (300, 0, 200, 100):
        _write(spark, table, start)
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")  # a deletion vector per data file
    before = checksum(spark, table, "id, cat, v")
    assert file_counts(spark, table)[1] > 0
    optimize_table(spark, s3_sql, table, full=True)
    assert checksum(spark, table, "id, cat, v") == before and file_counts(spark, table)[1] == 0
    bounds = spark.sql(f"SELECT readable_metrics.id.lower_bound, readable_metrics.id.upper_bound FROM {table}.files")
    ranges = sorted((int(r[0]), int(r[1])) for r in bounds.collect())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))  # sorted: the files hold disjoint ranges
    every = [f"s3://{BUCKET}/{k}" for k in s3.keys("sqlwh/db/")]
    assert every and all(k.startswith(f"s3://{BUCKET}/sqlwh/db/") for k in every)


def test_two_catalogs_on_one_bucket_name_each_reach_the_store_they_name(
    spark: SparkSession, s3_sql: CatalogSpec, s3: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Hadoop caches one client per bucket name; a table's data files are written and read through the client
    of its own catalog's endpoint and keys all the same, never through one another catalog opened first (nor
    one whose endpoint has gone away since)."""
    from lakewarden.metadata.catalogs import initialize_catalog
    from tests.netproxy import LatencyProxy

    direct = _create(spark, "direct")
    _write(spark, direct, 0)  # the bucket's client in Hadoop's cache, if nothing made one before
    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = LatencyProxy(host, int(port), 0.0)
    try:
        other = CatalogSpec(
            "s3proxied",
            "sql",
            {**s3_sql.properties, "uri": f"sqlite:///{tmp_path_factory.mktemp('s3proxied')}/c.db"}
            | {"warehouse": f"s3://{BUCKET}/proxiedwh", "s3.endpoint": proxy.endpoint},
        )
        initialize_catalog(other)
        configure_catalogs(spark, [other])
        spark.sql("CREATE NAMESPACE IF NOT EXISTS s3proxied.db")
        spark.sql("CREATE TABLE s3proxied.db.t (id BIGINT) USING iceberg")
        spark.sql("INSERT INTO s3proxied.db.t SELECT id FROM range(0, 10)")
        assert spark.sql("SELECT count(*) FROM s3proxied.db.t").first() == (10,)
        puts = [r for r in proxy.seen if r.startswith(f"PUT /{BUCKET}/proxiedwh/db/t") and r.endswith(".parquet")]
        assert puts, proxy.seen  # the data file went through the endpoint its catalog names
    finally:
        proxy.close()
    _write(spark, direct, 10)  # that endpoint gone, the first catalog's tables are written as before
    spark.sql(f"REFRESH TABLE {direct}")
    assert spark.sql(f"SELECT count(*) FROM {direct}").first() == (20,)


def test_a_revoked_rewrite_on_s3_commits_nothing_and_leaves_no_object(
    spark: SparkSession, s3_sql: CatalogSpec, s3: S3Server
) -> None:
    from lakewarden.optimizer.rewrite import TaskRevoked

    table = _create(spark, "revoked")
    for i in range(3):
        _write(spark, table, i * 100)
    location = _location(spark, table)
    objects = set(s3.keys(_key(location) + "/data/"))
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]

    def revoked() -> None:
        raise TaskRevoked("the process was canceled")

    planned = planned_process(s3_sql, table)
    with pytest.raises(TaskRevoked):
        run_task(spark, s3_sql, planned.tasks[0].input.model_dump(mode="json"), gate=revoked)
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots  # type: ignore[index]
    assert set(s3.keys(_key(location) + "/data/")) == objects  # what it wrote is gone again


def test_the_other_maintenance_actions_run_on_s3(spark: SparkSession, s3_sql: CatalogSpec, s3: S3Server) -> None:
    table = _create(spark, "kept")
    spark.sql(f"ALTER TABLE {table} ADD COLUMNS (at TIMESTAMP)")
    old = "TIMESTAMP '2020-01-01 00:00:00'"
    spark.sql(f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ id, 'a', 'old', {old} FROM VALUES (1), (3) AS t(id)")
    spark.sql(f"INSERT INTO {table} VALUES (2, 'a', 'new', current_timestamp())")

    def run(work: dict[str, Any]) -> Any:
        return run_task(spark, s3_sql, {"table": "db.kept", **work})

    expired = run(
        {
            "action": "expire-data",
            "field": "at",
            "field_type": "timestamptz",
            "retention_ms": 86_400_000,
            "level": "file",
            "string_pattern": "yyyy-MM-dd",
            "number_format": "TIMESTAMP_MS",
            "base_on_rule": "CURRENT_TIME",
        }
    )
    assert expired.data_files_deleted == 1 and expired.records_deleted == 2
    # position deletes left applying to nothing by a rewrite that gave the new files fresh sequence numbers
    spark.sql(
        "CREATE TABLE s3sql.db.dang (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql("INSERT INTO s3sql.db.dang SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range(100)")
    spark.sql("DELETE FROM s3sql.db.dang WHERE id % 5 = 0")
    options = "map('rewrite-all', 'true', 'use-starting-sequence-number', 'false')"
    spark.sql(f"CALL s3sql.system.rewrite_data_files(table => 'db.dang', options => {options})")
    dangling = run_task(spark, s3_sql, {"action": "clean-dangling-delete-files", "table": "db.dang"})
    assert dangling.delete_files_removed == 2 and dangling.bytes_freed > 0
    snapshot = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC").first()[0]  # type: ignore[index]
    tagged = run({"action": "auto-create-tags", "tag": "tag-s3", "snapshot_id": snapshot})
    assert tagged.tags_created == 1
    manifests = run({"action": "rewrite-manifests"})
    assert manifests.manifests_added >= 1
    assert [r[0] for r in spark.sql(f"SELECT id FROM {table}").collect()] == [2]


def test_a_small_object_is_read_ahead_whole_in_one_request(spark: SparkSession, s3: S3Server) -> None:
    """StorageFileIO's read-ahead: an object asked for with its length is fetched whole in the background, in one
    request (its length known: no request for its status first), and read from memory; at
    `lakewarden.read-parallelism` 1 it is read as usual. Requests counted by a proxy in front of the store."""
    from tests.netproxy import LatencyProxy

    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = LatencyProxy(host, int(port), 0.0)
    data = bytes(range(256)) * 40  # 10 KB
    s3.client().put_object(Bucket=BUCKET, Key="ahead/small.bin", Body=data)
    jvm: Any = spark._jvm
    keys = {"s3.access-key-id": s3.access_key_id, "s3.secret-access-key": s3.secret_access_key}

    def read(parallelism: int) -> tuple[bytes, int, str]:
        io = jvm.io.lakewarden.iceberg.StorageFileIO()
        settings = {"s3.endpoint": proxy.endpoint, "s3.region": REGION, "s3.path-style-access": "true", **keys}
        io.initialize(jvm.java.util.HashMap({**settings, "lakewarden.read-parallelism": str(parallelism)}))
        before = proxy.requests
        file = io.newInputFile(f"s3://{BUCKET}/ahead/small.bin", len(data))
        stream = file.newStream()
        read_all = jvm.org.apache.commons.io.IOUtils.toByteArray  # a byte[] answered comes back as bytes
        stream.seek(len(data) - 8)  # as a Parquet reader does: the footer first, then back to the start
        tail = bytes(read_all(stream))
        stream.seek(0)
        whole = bytes(read_all(stream))
        stream.close()
        assert tail == data[-8:]
        return whole, proxy.requests - before, str(file.getClass().getSimpleName())

    try:
        ahead, requests, kind = read(16)
        assert ahead == data and requests == 1 and kind == "ReadAheadFile"
        usual, _, kind = read(1)
        assert usual == data and kind != "ReadAheadFile"
    finally:
        proxy.close()
