"""Reading real Iceberg tables written by Spark, and evaluating them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.evaluator import OptimizingClock, OptimizingType, evaluate_table
from lakewarden.domain.files import group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.metadata.catalogs import initialize_catalog, open_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.spark.session import configure_catalogs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# small files count as fragments once 3 of them pile up in a partition
SMALL = "'self-optimizing.minor.trigger.file-count'='3', 'write.delete.mode'='merge-on-read'"
LAYOUTS = {
    "by_identity": ("PARTITIONED BY (cat)", ["cat=a", "cat=b"]),
    "by_day": ("PARTITIONED BY (days(ts))", ["ts_day=2026-01-01", "ts_day=2026-01-02"]),
    "by_bucket": ("PARTITIONED BY (bucket(4, id))", None),
    "by_truncate": ("PARTITIONED BY (truncate(1, cat))", ["cat_trunc=a", "cat_trunc=b"]),
    "flat": ("", [""]),
}


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def catalog(spark: SparkSession, sql_catalog: CatalogSpec) -> CatalogSpec:
    initialize_catalog(sql_catalog)
    configure_catalogs(spark, [sql_catalog])
    spark.sql(f"CREATE NAMESPACE {sql_catalog.name}.db")
    return sql_catalog


def write_small_files(spark: SparkSession, table: str, rounds: int) -> None:
    for i in range(rounds):
        spark.sql(
            f"INSERT INTO {table} VALUES ({i}, 'a', TIMESTAMP '2026-01-01 10:00:00'), "
            f"({i + 100}, 'b', TIMESTAMP '2026-01-02 10:00:00')"
        )


def test_layouts_are_read_and_planned_minor(spark: SparkSession, catalog: CatalogSpec) -> None:
    c = catalog.name
    pyiceberg = open_catalog(catalog)
    cache = ManifestCache()
    for name, (partitioning, paths) in LAYOUTS.items():
        spark.sql(
            f"CREATE TABLE {c}.db.{name} (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg {partitioning} "
            f"TBLPROPERTIES ({SMALL})"
        )
        write_small_files(spark, f"{c}.db.{name}", rounds=3)
        table = pyiceberg.load_table(("db", name))
        files = snapshot_files(table, cache)
        spark_files = spark.sql(f"SELECT file_path, file_size_in_bytes FROM {c}.db.{name}.files").collect()
        assert sorted((f.path, f.size) for f in files.data) == sorted((r[0], r[1]) for r in spark_files)
        assert files.snapshot_id == table.current_snapshot().snapshot_id

        config = OptimizingConfig.of(table.properties)
        verdict = evaluate_table(
            files.snapshot_id,
            group_by_partition(files.data, files.deletes),
            config,
            OptimizingClock(now_ms(), last_minor_ms=now_ms()),
        )
        if paths is not None:
            assert sorted(str(p.partition) if p.partition.path else "" for p in verdict.partitions) == sorted(
                p or "" for p in paths
            )
        if name == "flat":
            # 6 fragments in the one partition
            assert verdict.type is OptimizingType.MINOR
            assert (
                "6 fragment(s) + 0 equality-delete file(s) >= minor.trigger.file-count 3" in verdict.pending[0].reasons
            )
        elif name == "by_bucket":
            # rows of one insert may share a bucket (and a file): count against what Spark reports
            assert sum(p.data_files for p in verdict.partitions) == len(spark_files)
            assert all(p.partition.path.startswith("id_bucket=") for p in verdict.partitions)
        else:
            assert verdict.type is OptimizingType.MINOR, verdict.reasons
            assert len(verdict.pending) == 2
            assert all("3 fragment(s)" in p.reasons[0] for p in verdict.pending)

    # JSON-ready partition values for filters (day -> ISO date, identity -> string)
    by_day = snapshot_files(pyiceberg.load_table(("db", "by_day")), cache)
    assert sorted({d.partition.values for d in by_day.data}) == [("2026-01-01",), ("2026-01-02",)]


def test_delete_ratio_makes_major_and_names_the_file(spark: SparkSession, catalog: CatalogSpec) -> None:
    c = catalog.name
    # every file is a segment here: tiny target, no fragments, no undersized segments
    spark.sql(
        f"CREATE TABLE {c}.db.mor (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('write.delete.mode'='merge-on-read', 'write.merge.mode'='merge-on-read', "
        "'self-optimizing.target-size'='1024', 'self-optimizing.fragment-ratio'='1024', "
        "'self-optimizing.min-target-size-ratio'='0.001')"
    )
    spark.sql(
        f"INSERT INTO {c}.db.mor SELECT id, IF(id % 2 = 0, 'a', 'b'), TIMESTAMP '2026-01-01 00:00:00' FROM range(100)"
    )
    spark.sql(f"DELETE FROM {c}.db.mor WHERE cat = 'a' AND id < 40")  # 20 of 50 rows of the `a` file
    spark.sql(
        f"MERGE INTO {c}.db.mor t USING (SELECT 1L AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.cat = 'b'"
    )
    table = open_catalog(catalog).load_table(("db", "mor"))
    files = snapshot_files(table, ManifestCache())
    assert files.deletes, "merge-on-read wrote no delete files"
    assert all(d.referenced_data_file for d in files.deletes)  # Spark writes file-scoped position deletes
    config = OptimizingConfig.of(table.properties)
    clock = OptimizingClock(now_ms(), last_minor_ms=now_ms())
    verdict = evaluate_table(files.snapshot_id, group_by_partition(files.data, files.deletes), config, clock)
    by_path = {p.partition.path: p for p in verdict.partitions}
    a = by_path["cat=a"]
    assert a.type is OptimizingType.MAJOR
    assert "1 segment(s) have more than 10% of their rows position-deleted" in a.reasons[0]
    assert "(40%)" in a.reasons[0]
    assert by_path["cat=b"].type is None  # 1 of ~51 rows deleted: 2%, under the ratio


def test_cache_reads_only_new_manifests(spark: SparkSession, catalog: CatalogSpec) -> None:
    c = catalog.name
    spark.sql(f"CREATE TABLE {c}.db.grow (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg PARTITIONED BY (cat)")
    write_small_files(spark, f"{c}.db.grow", rounds=4)
    pyiceberg = open_catalog(catalog)
    cache = ManifestCache()
    cold = snapshot_files(pyiceberg.load_table(("db", "grow")), cache)
    assert cold.manifests_read == 4 and len(cold.data) == 8
    assert snapshot_files(pyiceberg.load_table(("db", "grow")), cache).manifests_read == 0
    write_small_files(spark, f"{c}.db.grow", rounds=1)
    warm = snapshot_files(pyiceberg.load_table(("db", "grow")), cache)
    assert warm.manifests_read == 1  # only the manifest the new commit wrote
    assert len(warm.data) == 10


def test_filter_limits_partitions(spark: SparkSession, catalog: CatalogSpec) -> None:
    c = catalog.name
    spark.sql(
        f"CREATE TABLE {c}.db.filtered (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg PARTITIONED BY (days(ts))"
    )
    write_small_files(spark, f"{c}.db.filtered", rounds=1)
    table = open_catalog(catalog).load_table(("db", "filtered"))
    files = snapshot_files(table, ManifestCache(), "ts >= '2026-01-02T00:00:00+00:00'")
    assert {d.partition.path for d in files.data} == {"ts_day=2026-01-02"}
    with pytest.raises(InvalidField, match=r"self-optimizing\.filter"):
        snapshot_files(table, ManifestCache(), "ts >>>= 3")
