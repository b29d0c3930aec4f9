"""Spark 3.5 + Iceberg (`type=rest`) against lakewarden's REST catalog, and the optimizer compacting it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.spark.session import configure_catalogs
from tests.helpers import PROPS, checksum, running_optimizer, wait_for
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def lake(server: ServerProcess, spark: SparkSession) -> tuple[ServerProcess, httpx.Client]:
    """Here: a new internal catalog of the server's, named after its port, configured in Spark."""
    api = server.api()
    created = api.post("/catalogs", json={"name": f"rest{server.port}", "type": "internal"}).json()
    properties = {**created["properties"], "token": server.token}
    configure_catalogs(spark, [CatalogSpec(created["name"], "internal", properties)])
    return server, api


def compact_and_compare(
    server: ServerProcess, api: httpx.Client, spark: SparkSession, catalog: str, table: str
) -> None:
    """Once the table is pending, an optimizer compacts it successfully and its rows stay the same."""
    before = checksum(spark, f"{catalog}.db.{table}")
    wait_for("pending", lambda: api.get(f"/tables/{catalog}/db/{table}").json().get("status") == "pending", timeout=60)
    with running_optimizer(server, spark):
        process = wait_for(
            "a finished process",
            lambda: next((p for p in api.get("/processes").json() if p["status"] != "running"), None),
        )
    assert process["status"] == "success", process
    spark.sql(f"REFRESH TABLE {catalog}.db.{table}")
    assert checksum(spark, f"{catalog}.db.{table}") == before


def test_spark_sql_over_the_rest_catalog(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    server, api = lake
    c = f"rest{server.port}"
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(
        f"CREATE TABLE {c}.db.t (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({PROPS})"
    )
    spark.sql(f"INSERT INTO {c}.db.t SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v' FROM range(50)")
    spark.sql(f"INSERT INTO {c}.db.t SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v' FROM range(50, 100)")
    spark.sql(
        f"MERGE INTO {c}.db.t t USING (SELECT id FROM range(0, 100, 10)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.v = 'merged'"
    )
    spark.sql(f"DELETE FROM {c}.db.t WHERE id % 7 = 0")
    spark.sql(f"UPDATE {c}.db.t SET v = 'updated' WHERE id = 1")
    spark.sql(f"ALTER TABLE {c}.db.t ADD COLUMN extra STRING")
    spark.sql(f"ALTER TABLE {c}.db.t SET TBLPROPERTIES ('note'='hello')")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.t").first()[0] == 100 - 15  # type: ignore[index]
    assert spark.sql(f"SELECT v FROM {c}.db.t WHERE id = 10").first()[0] == "merged"  # type: ignore[index]
    deletes = spark.sql(f"SELECT count(*) FROM {c}.db.t.delete_files").first()[0]  # type: ignore[index]
    assert deletes > 0  # merge-on-read
    timeline = api.get(f"/tables/{c}/db/t/timeline").json()
    assert [e["operation"] for e in reversed(timeline)][:3] == ["create", "append", "append"]
    assert "overwrite" in {e["operation"] for e in timeline}  # MERGE/UPDATE/DELETE as row deltas
    assert "Java" in (timeline[0]["client"] or "") or timeline[0]["client"]

    # Spark's Iceberg client reports each scan and commit to the catalog, which keeps them as the table's reads
    assert spark.sql(f"SELECT id FROM {c}.db.t WHERE cat = 'a' AND id > 10").count() > 0

    def scanned_a() -> dict[str, Any] | None:
        reads: dict[str, Any] = api.get(f"/tables/{c}/db/t").json()["reads"]
        return reads if reads["partitions"].get("cat=a") else None

    reads = wait_for("Spark's scan report", scanned_a)
    assert reads["engines"].get("spark", 0) >= 3 and reads["principals"] == {"admin": reads["scans_last_hour"]}
    assert reads["commits_last_day"] >= 5  # two inserts, the merge, the delete, the update
    assert reads["files_per_scan"]["p95"] >= 2 and reads["delete_files_per_scan"]["p95"] >= 1
    shown = cli(server, "table", "show", f"{c}.db.t").stdout
    assert "scans in the last hour" in " ".join(shown.split()) and "spark" in shown

    # the optimizer compacts the internal table; lakewarden's own commit does not re-plan it
    compact_and_compare(server, api, spark, c, "t")
    assert wait_for("idle", lambda: api.get(f"/tables/{c}/db/t").json()["status"] == "idle")
    assert len(api.get("/processes").json()) == 1
    # the runtime follows lakewarden's own rewrite (its event refreshes the table) without a re-plan
    files = spark.sql(f"SELECT count(*) FROM {c}.db.t.files WHERE content = 0").first()[0]  # type: ignore[index]
    wait_for("the runtime to follow", lambda: api.get(f"/tables/{c}/db/t").json()["data_files"] == files, timeout=20)
    time.sleep(3)  # evaluator passes run every second here: none of them plans the table again
    assert len(api.get("/processes").json()) == 1
    assert api.get(f"/tables/{c}/db/t").json()["status"] == "idle"

    # what the compaction bought: Spark's scans since read fewer files than those before it
    spark.sql(f"SELECT * FROM {c}.db.t").collect()

    def judged() -> dict[str, Any] | None:
        benefit: dict[str, Any] | None = api.get("/processes").json()[0]["benefit"]
        return benefit if benefit and benefit["after"]["scans"] >= 2 else None

    benefit = wait_for("scans after the compaction", judged)
    assert benefit["before"]["scans"] >= 3 and benefit["cpu_seconds"] > 0
    assert benefit["after"]["files_per_scan"] < benefit["before"]["files_per_scan"], benefit
    assert "scans since read" in benefit["text"]
    assert api.get(f"/tables/{c}/db/t").json()["optimizing_benefit"]["processes"] == 1
    # the same commits and scans replayed under other policies, beside what happened (the one compaction)
    replayed = api.get(f"/tables/{c}/db/t/what-if", params={"policy": ["amoro", "none"]}).json()
    assert replayed["actual"]["processes"] == 1 and replayed["commits"] >= 4
    assert [p["policy"] for p in replayed["projections"]] == ["amoro", "none"]
    shown = cli(server, "table", "what-if", f"{c}.db.t", "--policy", "scheduled:5").stdout
    assert "actual" in shown and "scheduled:5" in shown


def test_spark_ddl_branches_and_procedures(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    server, api = lake
    c = f"rest{server.port}"
    spark.sql(f"CREATE NAMESPACE {c}.db")
    # CTAS and REPLACE are staged creates/replaces, committed with assert-create / assert-table-uuid
    spark.sql(
        f"CREATE TABLE {c}.db.ctas USING iceberg PARTITIONED BY (bucket(4, id)) "
        f"AS SELECT id, CAST(id AS STRING) AS v FROM range(200)"
    )
    assert spark.sql(f"SELECT count(*) FROM {c}.db.ctas").first()[0] == 200  # type: ignore[index]
    spark.sql(f"REPLACE TABLE {c}.db.ctas USING iceberg AS SELECT id, id * 2 AS doubled FROM range(10)")
    replaced = spark.sql(f"SELECT * FROM {c}.db.ctas ORDER BY id").collect()
    assert [tuple(r) for r in replaced[:2]] == [(0, 0), (1, 2)] and len(replaced) == 10
    spark.sql(f"CREATE OR REPLACE TABLE {c}.db.fresh USING iceberg AS SELECT 1L AS id")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.fresh").first()[0] == 1  # type: ignore[index]

    spark.sql(f"CREATE TABLE {c}.db.t (id BIGINT, v STRING) USING iceberg")
    for i in range(4):
        spark.sql(f"INSERT INTO {c}.db.t VALUES ({i}, 'v{i}')")
    spark.sql(f"ALTER TABLE {c}.db.t ADD PARTITION FIELD truncate(1, v)")
    spark.sql(f"ALTER TABLE {c}.db.t RENAME COLUMN v TO value")
    spark.sql(f"ALTER TABLE {c}.db.t CREATE BRANCH audit")
    spark.sql(f"ALTER TABLE {c}.db.t CREATE TAG release_1")
    spark.sql(f"INSERT INTO {c}.db.t.branch_audit VALUES (99, 'only on the branch')")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.t").first()[0] == 4  # type: ignore[index]
    assert spark.sql(f"SELECT count(*) FROM {c}.db.t VERSION AS OF 'audit'").first()[0] == 5  # type: ignore[index]
    refs = {r[0] for r in spark.sql(f"SELECT name FROM {c}.db.t.refs").collect()}
    assert refs == {"main", "audit", "release_1"}

    result = spark.sql(f"CALL {c}.system.rewrite_data_files(table => 'db.t', options => map('min-input-files', '2'))")
    assert result.first()[0] == 4  # type: ignore[index]  # rewritten data files
    spark.sql(f"CALL {c}.system.rewrite_manifests('db.t')").collect()
    spark.sql(
        f"CALL {c}.system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2999-01-01 00:00:00', "
        "retain_last => 1)"
    ).collect()
    spark.sql(
        f"CALL {c}.system.remove_orphan_files(table => 'db.t', older_than => TIMESTAMP '2000-01-01 00:00:00')"
    ).collect()
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {c}.db.t").collect()) == [0, 1, 2, 3]
    operations = [e["operation"] for e in api.get(f"/tables/{c}/db/t/timeline").json()]
    assert "replace" in operations  # the rewrite, recorded on the timeline


def test_format_version_3_tables_with_deletion_vectors(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    server, api = lake
    c = f"rest{server.port}"
    spark.sql(f"CREATE NAMESPACE {c}.db")
    # created as v3: merge-on-read deletes are deletion vectors (Puffin files)
    spark.sql(
        f"CREATE TABLE {c}.db.v3 (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='3', {PROPS})"
    )
    for start in range(0, 100, 25):
        spark.sql(f"INSERT INTO {c}.db.v3 SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v' FROM range({start}, {start + 25})")
    spark.sql(f"DELETE FROM {c}.db.v3 WHERE id % 9 = 0")
    spark.sql(
        f"MERGE INTO {c}.db.v3 t USING (SELECT id FROM range(1, 100, 10)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.v = 'merged'"
    )
    formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {c}.db.v3.delete_files").collect()}
    assert formats == {"PUFFIN"}
    assert spark.sql(f"SELECT count(*) FROM {c}.db.v3").first()[0] == 100 - 12  # type: ignore[index]
    loaded = server.http.get(f"{server.url}/iceberg/v1/{c}/namespaces/db/tables/v3").json()["metadata"]
    assert loaded["format-version"] == 3 and loaded["next-row-id"] >= 100

    # a staged create (CTAS) as v3, and a v2 table upgraded in place
    spark.sql(
        f"CREATE TABLE {c}.db.ctas3 USING iceberg TBLPROPERTIES ('format-version'='3') AS SELECT id FROM range(10)"
    )
    assert spark.sql(f"SELECT count(*) FROM {c}.db.ctas3").first()[0] == 10  # type: ignore[index]
    spark.sql(
        f"CREATE TABLE {c}.db.up (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {c}.db.up SELECT id FROM range(20)")
    spark.sql(f"ALTER TABLE {c}.db.up SET TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"INSERT INTO {c}.db.up SELECT id FROM range(20, 30)")
    spark.sql(f"DELETE FROM {c}.db.up WHERE id < 5")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.up").first()[0] == 25  # type: ignore[index]
    upgraded = server.http.get(f"{server.url}/iceberg/v1/{c}/namespaces/db/tables/up").json()["metadata"]
    assert upgraded["format-version"] == 3
    assert {r[0] for r in spark.sql(f"SELECT file_format FROM {c}.db.up.delete_files").collect()} == {"PUFFIN"}

    # the optimizer compacts the v3 table with its deletion vectors; the rows stay the same
    compact_and_compare(server, api, spark, c, "v3")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.v3.delete_files").first()[0] == 0  # type: ignore[index]
    assert spark.sql(f"SELECT count(*) FROM {c}.db.v3.files WHERE content = 0").first()[0] == 2  # type: ignore[index]


def test_spark_views_and_names_with_spaces(lake: tuple[ServerProcess, httpx.Client], spark: SparkSession) -> None:
    """Spark's view DDL through Iceberg's Java REST client; a name with a space arrives as `+` (URLEncoder)."""
    server, api = lake
    c = f"rest{server.port}"
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(f"CREATE TABLE {c}.db.`my t` (id BIGINT, v STRING) USING iceberg")
    spark.sql(f"INSERT INTO {c}.db.`my t` SELECT id, CAST(id AS STRING) FROM range(10)")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.`my t`").first()[0] == 10  # type: ignore[index]

    spark.sql(f"CREATE VIEW {c}.db.`small v` AS SELECT id FROM {c}.db.`my t` WHERE id < 5")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.`small v`").first()[0] == 5  # type: ignore[index]
    spark.sql(f"CREATE OR REPLACE VIEW {c}.db.`small v` AS SELECT id FROM {c}.db.`my t` WHERE id < 3")
    assert spark.sql(f"SELECT count(*) FROM {c}.db.`small v`").first()[0] == 3  # type: ignore[index]
    # (Iceberg's Spark 3.5 refuses ALTER VIEW … AS itself and asks for CREATE OR REPLACE VIEW: a new schema)
    spark.sql(f"CREATE OR REPLACE VIEW {c}.db.`small v` AS SELECT id, v FROM {c}.db.`my t` WHERE id < 2")
    assert [tuple(r) for r in spark.sql(f"SELECT * FROM {c}.db.`small v` ORDER BY id").collect()] == [
        (0, "0"),
        (1, "1"),
    ]
    spark.sql(f"ALTER VIEW {c}.db.`small v` SET TBLPROPERTIES ('comment'='two rows')")
    assert [r.viewName for r in spark.sql(f"SHOW VIEWS IN {c}.db").collect()] == ["small v"]
    timeline = api.get(f"/tables/{c}/db/small v/timeline").json()
    assert [t["operation"] for t in timeline] == ["replace-view"] * 3 + ["create-view"]
    loaded = server.http.get(f"{server.url}/iceberg/v1/{c}/namespaces/db/views/small+v").json()["metadata"]
    assert loaded["properties"]["comment"] == "two rows" and len(loaded["versions"]) == 3
    spark.sql(f"DROP VIEW {c}.db.`small v`")
    assert spark.sql(f"SHOW VIEWS IN {c}.db").collect() == []


def test_writers_racing_lakewarden_compaction_under_the_file_strategy(
    lake: tuple[ServerProcess, httpx.Client], spark: SparkSession
) -> None:
    """pyiceberg writers append without pause while lakewarden's optimizer compacts the table on Spark: under
    `file` every append lands without a client retry failing, the compaction commits (rebased onto the appends
    that landed meanwhile, since it removes no file they touched), and no row is lost or doubled."""
    import logging
    import threading

    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    server, api = lake
    c = f"rest{server.port}"
    spark.sql(f"CREATE NAMESPACE {c}.db")
    spark.sql(
        f"CREATE TABLE {c}.db.race (id BIGINT, v STRING) USING iceberg "
        f"TBLPROPERTIES ({PROPS}, 'lakewarden.commit.conflict-strategy'='file')"
    )
    for batch in range(4):
        spark.sql(f"INSERT INTO {c}.db.race SELECT id, 'spark' FROM range({batch * 1000}, {(batch + 1) * 1000})")
    wait_for("pending", lambda: api.get(f"/tables/{c}/db/race").json().get("status") == "pending", timeout=60)

    stop, errors, appended = threading.Event(), [], [0, 0]
    retries: list[str] = []  # pyiceberg logs each retry of a commit the server refused

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "concurrent update" in record.getMessage():
                retries.append(record.getMessage())

    handler = Retries()
    logging.getLogger("pyiceberg.table").addHandler(handler)

    def write(writer: int) -> None:
        table = RestCatalog(c, uri=f"{server.url}/iceberg", warehouse=c, token=server.token).load_table("db.race")
        start = 100_000 * (writer + 1)
        while not stop.is_set():
            ids = range(start + appended[writer] * 10, start + (appended[writer] + 1) * 10)
            try:
                table.append(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"w{writer}"] * 10)}))
            except Exception as exc:  # every failure is the test's failure, reported below
                errors.append(exc)
                return
            appended[writer] += 1
            stop.wait(0.2)  # a steady stream, not a flood: two cores are shared with Spark and the server

    writers = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    for thread in writers:
        thread.start()
    try:
        with running_optimizer(server, spark):
            process = wait_for(
                "a finished process",
                lambda: next((p for p in api.get("/processes").json() if p["status"] != "running"), None),
                timeout=180,
            )
        time.sleep(0.5)  # appends after the compaction's commit too
    finally:
        stop.set()
        for thread in writers:
            thread.join(60)
        logging.getLogger("pyiceberg.table").removeHandler(handler)
    assert errors == [] and retries == []
    assert process["status"] == "success", process
    assert min(appended) > 0

    spark.sql(f"REFRESH TABLE {c}.db.race")
    rows = spark.sql(f"SELECT v, count(*), count(DISTINCT id) FROM {c}.db.race GROUP BY v").collect()
    assert {r[0]: (r[1], r[2]) for r in rows} == {
        "spark": (4000, 4000),
        **{f"w{w}": (appended[w] * 10, appended[w] * 10) for w in range(2)},
    }
    snapshots = spark.sql(f"SELECT operation, manifest_list, summary FROM {c}.db.race.snapshots").collect()
    compactions = [s for s in snapshots if s["operation"] == "replace"]
    assert compactions and all("lakewarden.process-id" in s["summary"] for s in compactions)
    # the writers raced each other and the compaction: the server rebased commits instead of refusing them
    assert any("-rebased-" in s["manifest_list"] for s in snapshots)
