"""A plan that describes its files: where no delete file can apply to them (the append-only small files streaming
writers leave), the optimizer takes the planned files as the plan found them instead of reading the planned
snapshot's manifests again, and checks the plan against the snapshot only when its task fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.optimizer.executor import execute_task
from lakewarden.optimizer.rewrite import PlanMismatch
from lakewarden.protocol.inputs import OptimizingInput
from lakewarden.protocol.results import OptimizingResult
from tests.helpers import assignment, checksum, spark_sql_catalog
from tests.test_exact_plans import plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
PROPERTIES = "'self-optimizing.minor.trigger.file-count'='3', 'write.delete.mode'='merge-on-read'"
# partitions of several kinds of value: strings, ints, dates, days of timestamps, decimals, truncated strings
LAYOUT = "PARTITIONED BY (cat, n, d, days(ts), amount, truncate(3, v))"
COLUMNS = "id, cat, n, d, ts, amount, v"


@pytest.fixture(scope="module")
def catalog(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogSpec]:
    yield spark_sql_catalog(spark, tmp_path_factory.mktemp("described"), "described")


def create(spark: SparkSession, name: str, version: int = 2, layout: str = LAYOUT) -> str:
    table = f"described.db.{name}"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, n INT, d DATE, ts TIMESTAMP, amount DECIMAL(9, 2), v STRING) "
        f"USING iceberg {layout} TBLPROPERTIES ({PROPERTIES}, 'format-version'='{version}')"
    )
    for i in range(4):  # four appends of the same partitions: each partition gets four small files
        spark.sql(
            f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ id * 8 + {i}, 'c' || (id % 2), CAST(id % 2 AS INT), "
            "date_add(DATE'2026-01-01', CAST(id % 2 AS INT)), "
            "TIMESTAMP'2026-01-01 10:00:00' + make_interval(0, 0, 0, CAST(id % 2 AS INT)), "
            "CAST(id % 2 AS DECIMAL(9, 2)) + 0.25, 'abc' || (id % 2) FROM range(0, 8)"
        )
    return table


def partitions(spark: SparkSession, table: str) -> set[Any]:
    spark.sql(f"REFRESH TABLE {table}")
    return {r[0] for r in spark.sql(f"SELECT partition FROM {table}.files").collect()}


def java_plan(spark: SparkSession, table: str, work: OptimizingInput) -> Any:
    jvm: Any = spark._jvm
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    return jvm.io.lakewarden.iceberg.PlannedRewrite.of(
        loaded, loaded.snapshot(work.snapshot_id), work.model_dump_json()
    )


def only_input(catalog: CatalogSpec, table: str) -> OptimizingInput:
    planned = plan(catalog, table)
    assert len(planned.tasks) == 1
    work = planned.tasks[0].input
    assert isinstance(work, OptimizingInput)
    return work


def test_a_plan_without_deletes_describes_its_files_and_the_rewrite_keeps_every_row_and_partition(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    table = create(spark, "kinds")
    before, layout = checksum(spark, table, COLUMNS), partitions(spark, table)
    work = only_input(catalog, table)
    assert work.groups and all(len(g.files) == len(g.rewrite) == 4 for g in work.groups)
    for group in work.groups:
        assert [f.path for f in group.files] == group.rewrite
        assert all(f.format == "parquet" and f.records == 4 and f.size > 0 for f in group.files)
    assert java_plan(spark, table, work).described()  # taken as described: the manifests are not read

    result = execute_task(spark, assignment(catalog, work.model_dump(mode="json")), "test")
    assert isinstance(result, OptimizingResult)
    assert result.files_in == 4 * len(work.groups) and result.files_out == len(work.groups)
    assert checksum(spark, table, COLUMNS) == before
    assert partitions(spark, table) == layout  # every partition value read back as the manifests had it


def test_a_described_file_its_snapshot_lacks_fails_as_a_plan_mismatch_and_commits_nothing(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    table, other = create(spark, "lacking"), create(spark, "elsewhere")
    work = only_input(catalog, table)
    stranger = only_input(catalog, other).groups[0].files[0]  # a real file, of another table
    group = work.groups[0]
    foreign = group.files[0].model_copy(update={"path": stranger.path, "size": stranger.size})
    lacking = work.model_copy(
        update={
            "groups": [
                group.model_copy(
                    update={"rewrite": [stranger.path, *group.rewrite[1:]], "files": [foreign, *group.files[1:]]}
                ),
                *work.groups[1:],
            ]
        }
    )
    assert java_plan(spark, table, lacking).described()
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]
    data = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    with pytest.raises(PlanMismatch, match=r"1 planned data file\(s\) are not in snapshot"):
        execute_task(spark, assignment(catalog, lacking.model_dump(mode="json")), "test")
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots  # type: ignore[index]
    assert {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()} == data
    assert spark.sql(f"SELECT count(*) FROM {other}").first()[0] == 32  # type: ignore[index]


def test_no_file_is_described_where_a_delete_file_could_apply_or_row_lineage_is_kept(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    table = create(spark, "deleted")
    described = only_input(catalog, table)
    spark.sql(f"DELETE FROM {table} WHERE id = 8")  # a position-delete file in partition c0
    assert all(not g.files for g in only_input(catalog, table).groups)
    # a plan that describes its files on a snapshot with a delete manifest is scanned all the same, and the scan
    # finds the delete file Iceberg applies to one of them
    current = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()
    assert current is not None
    on_deletes = described.model_copy(update={"snapshot_id": int(current[0])})
    with pytest.raises(Exception, match=r"applies delete files to .* that the plan did not name"):
        java_plan(spark, table, on_deletes)
    assert java_plan(spark, table, described).described()

    lineage = create(spark, "lineage", version=3)
    assert all(not g.files for g in only_input(catalog, lineage).groups)


def test_a_scanned_plan_keeps_every_file_of_a_column_partitioned_both_by_identity_and_a_transform(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    # bucket(4, n) is 0 for both n = 0 and n = 1: a filter with `bucket[4](n) = 0` would be projected on the
    # identity field as `n = 0` and drop the files of n = 1
    table = create(spark, "bucketed", layout="PARTITIONED BY (cat, n, bucket(4, n))")
    before = checksum(spark, table, COLUMNS)
    work = only_input(catalog, table)
    assert len(work.groups) == 2 and "transform" not in work.filter
    scanned = work.model_copy(update={"groups": [g.model_copy(update={"files": []}) for g in work.groups]})
    assert not java_plan(spark, table, scanned).described()  # found by the scan, every planned file in it

    result = execute_task(spark, assignment(catalog, scanned.model_dump(mode="json")), "test")
    assert isinstance(result, OptimizingResult)
    assert (result.files_in, result.files_out) == (8, 2)
    assert checksum(spark, table, COLUMNS) == before
