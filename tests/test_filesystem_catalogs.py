"""Iceberg's Hadoop (filesystem) catalogs: tables as directories with version hints, on local disk and on S3, read
by lakewarden as Iceberg's HadoopCatalog reads them and compacted by Spark committing through that catalog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakewarden.domain.catalogs import CatalogSpec, TableFilter, validate_catalog
from lakewarden.domain.errors import InvalidField
from lakewarden.metadata.catalogs import list_tables, open_catalog, table_locations
from lakewarden.spark.session import configure_catalogs
from tests.helpers import checksum, create_by_cat, file_counts, insert_ids, optimize_table, run_task, wait_for
from tests.s3 import BUCKET, REGION, S3Server, s3_server
from tests.servers import started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SETTINGS = "'self-optimizing.minor.trigger.file-count'='3', 'self-optimizing.min-plan-interval'='0'"


@pytest.mark.parametrize(
    ("warehouse", "message"),
    [
        ("", "required for a filesystem catalog"),
        ("relative/dir", "must be an absolute path"),
        ("s3:///no-bucket", "names no bucket"),
        ("ftp://host/dir", "use a local path or an s3:// location"),
    ],
)
def test_a_filesystem_catalog_needs_a_warehouse_it_can_reach(warehouse: str, message: str) -> None:
    with pytest.raises(InvalidField) as raised:
        validate_catalog(CatalogSpec("fs", "filesystem", {"warehouse": warehouse}))
    assert raised.value.field == "properties.warehouse" and message in str(raised.value)
    for good in ("/abs/dir", "file:///abs/dir", "s3://bucket/prefix", "s3a://bucket"):
        validate_catalog(CatalogSpec("fs", "filesystem", {"warehouse": good}))


def _create(spark: SparkSession, table: str) -> None:
    create_by_cat(spark, table, f"{SETTINGS}, 'write.delete.mode'='merge-on-read'")


def _write(spark: SparkSession, table: str, start: int, rows: int = 40) -> None:
    insert_ids(spark, table, start, rows)


def _current_metadata(spark: SparkSession, table: str) -> str:
    spark.sql(f"REFRESH TABLE {table}")
    return str(spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC").first()[0])  # type: ignore[index]


@pytest.fixture(scope="module")
def local_fs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> CatalogSpec:
    spec = CatalogSpec("fslocal", "filesystem", {"warehouse": str(tmp_path_factory.mktemp("fs-warehouse"))})
    configure_catalogs(spark, [spec])
    return spec


@pytest.mark.spark
@pytest.mark.slow
def test_tables_are_found_under_nested_namespaces_at_their_newest_version(
    local_fs: CatalogSpec, spark: SparkSession
) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS fslocal.db")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS fslocal.team.inner")
    for table in ("fslocal.db.events", "fslocal.team.inner.clicks"):
        _create(spark, table)
        _write(spark, table, 0)
    catalog = open_catalog(local_fs)
    listed = set(list_tables(catalog, TableFilter.of(local_fs)))
    assert listed == {("db", "events"), ("team.inner", "clicks")}
    locations = table_locations(catalog, TableFilter.of(local_fs))
    assert locations is not None
    assert locations[("db", "events")].endswith("/db/events/metadata/v2.metadata.json")
    assert locations[("db", "events")] == _current_metadata(spark, "fslocal.db.events")

    # a writer that died between its commit and the hint's update left the hint behind: the newest still wins,
    # as Iceberg's HadoopTableOperations finds it; so without a hint, or with an unreadable one
    metadata = Path(local_fs.properties["warehouse"]) / "db" / "events" / "metadata"
    _write(spark, "fslocal.db.events", 100)
    newest = _current_metadata(spark, "fslocal.db.events")
    assert newest.endswith("v3.metadata.json")
    for hint in ("1", "not a number", None):
        if hint is None:
            (metadata / "version-hint.text").unlink()
        else:
            (metadata / "version-hint.text").write_text(hint)
        assert catalog.metadata_location(("db", "events")) == newest, hint
    assert catalog.load_table(("db", "events")).metadata_location == newest
    assert len(catalog.load_table(("db", "events")).scan().to_arrow()) == 80


@pytest.mark.spark
@pytest.mark.slow
def test_a_local_filesystem_table_is_compacted_and_maintained_through_its_catalog(
    local_fs: CatalogSpec, spark: SparkSession
) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS fslocal.db")
    _create(spark, "fslocal.db.small")
    for i in range(4):
        _write(spark, "fslocal.db.small", i * 40)
    spark.sql("DELETE FROM fslocal.db.small WHERE id = 7")
    before = checksum(spark, "fslocal.db.small", "id, cat, v")
    assert optimize_table(spark, local_fs, "fslocal.db.small").type == "minor"
    assert checksum(spark, "fslocal.db.small", "id, cat, v") == before
    assert file_counts(spark, "fslocal.db.small") == (2, 0)
    expired = run_task(
        spark, local_fs, {"action": "expire-snapshots", "table": "db.small", "keep_duration_ms": 0, "min_count": 1}
    )
    assert expired.snapshots_expired > 0
    assert checksum(spark, "fslocal.db.small", "id, cat, v") == before


@pytest.mark.spark
@pytest.mark.slow
def test_the_server_discovers_a_filesystem_catalogs_tables_and_plans_them(
    local_fs: CatalogSpec, spark: SparkSession, tmp_path: Path
) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS fslocal.served")
    _create(spark, "fslocal.served.t")
    for i in range(4):
        _write(spark, "fslocal.served.t", i * 40)
    with started_server(tmp_path, extra="  evaluator: {interval: 1s}\n") as server:
        api = server.api()
        body = {"name": "fslocal", "type": "filesystem", "properties": dict(local_fs.properties)}
        assert api.post("/catalogs", json=body).status_code == 201

        def pending() -> dict[str, Any] | None:  # the explorer's watch finds it; nothing asked for a refresh
            found = api.get("/tables/fslocal/served/t")
            return found.json() if found.status_code == 200 and found.json()["status"] == "pending" else None

        table = wait_for("the table pending", pending, timeout=60)
        assert table["evaluation"]["type"] == "minor"
        refreshed = api.post("/catalogs/fslocal/refresh").json()
        assert refreshed["health"] == "healthy" and refreshed["loaded"] == 0  # nothing moved: nothing loaded
        _write(spark, "fslocal.served.t", 1000)
        refreshed = api.post("/catalogs/fslocal/refresh").json()
        assert refreshed["updated"] == ["fslocal.served.t"] and refreshed["loaded"] == 1


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.mark.spark
@pytest.mark.slow
def test_a_filesystem_catalog_on_s3_is_listed_and_compacted_with_its_own_settings(
    spark: SparkSession, s3: S3Server
) -> None:
    spec = CatalogSpec(
        "fss3",
        "filesystem",
        {
            "warehouse": f"s3://{BUCKET}/fswh",
            "s3.endpoint": s3.endpoint,
            "s3.region": REGION,
            "s3.path-style-access": "true",
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
        },
    )
    configure_catalogs(spark, [spec])
    spark.sql("CREATE NAMESPACE IF NOT EXISTS fss3.db")
    _create(spark, "fss3.db.t")
    for i in range(4):
        _write(spark, "fss3.db.t", i * 40)
    before = checksum(spark, "fss3.db.t", "id, cat, v")
    locations = table_locations(open_catalog(spec), TableFilter.of(spec))
    assert locations is not None and set(locations) == {("db", "t")}
    assert locations[("db", "t")].endswith("fswh/db/t/metadata/v5.metadata.json")
    assert optimize_table(spark, spec, "fss3.db.t").type == "minor"
    assert checksum(spark, "fss3.db.t", "id, cat, v") == before and file_counts(spark, "fss3.db.t") == (2, 0)
    keys = s3.keys("fswh/db/t/metadata/")
    assert "fswh/db/t/metadata/version-hint.text" in keys and "fswh/db/t/metadata/v6.metadata.json" in keys
