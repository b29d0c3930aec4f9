"""Clustering (sort and z-order full optimizing): the evaluator's rules with plain values, then real rewrites
with Iceberg's sort and z-order runners on the test session's Spark."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.clustering import Clustering, merged_marks
from lakewarden.domain.errors import InvalidField, NothingToDo
from lakewarden.domain.evaluator import OptimizingClock, OptimizingType, evaluate_table
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey, group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.planning import plan_tasks
from lakewarden.domain.processes import ProcessPlan
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.optimizer.executor import execute_task
from lakewarden.protocol.results import OptimizingResult
from lakewarden.services.processes.self_optimizing import plan_process
from tests.helpers import assignment, checksum, spark_sql_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MB = 1024 * 1024
P = PartitionKey(0, "cat=a", ("a",))
DAY = 86_400_000
NOW = 100 * DAY
FULL = OptimizingClock(NOW, last_minor_ms=NOW, last_full_ms=0)


def config(**overrides: str) -> OptimizingConfig:
    props = {"self-optimizing.full.trigger.interval": str(DAY), "self-optimizing.max-task-size-bytes": str(64 * MB)}
    return OptimizingConfig.of({**props, **{f"self-optimizing.{k.replace('_', '-')}": v for k, v in overrides.items()}})


def data(name: str, size_mb: float) -> DataFile:
    return DataFile(f"/t/data/{name}.parquet", P, int(size_mb * MB), 1000, 1)


Z = Clustering("z-order", ("x", "y"))


def evaluate(files: list[DataFile], clustering: Clustering | None, deletes: list[DeleteFile] | None = None) -> Any:
    return evaluate_table(1, group_by_partition(files, deletes or []), config(), FULL, None, clustering)


def test_a_clustered_table_full_optimizing_takes_each_partition_whole_as_one_group() -> None:
    files = [data("big1", 120), data("big2", 130), data("small", 1)]  # 251 MiB: more than a task holds
    verdict = evaluate(files, Z)
    (p,) = verdict.pending
    assert p.type is OptimizingType.FULL
    assert "clustered by z-order(x, y)" in p.reasons[0] and "never clustered" in p.reasons[0]
    (group,) = p.groups
    assert {f.path for f in group.rewrite} == {f.path for f in files} and group.clustering == Z
    (task,) = plan_tasks(verdict, config()).tasks
    assert task.groups == [group]
    # without clustering, the same full optimizing leaves the large files in groups of their own (dropped)
    plain = evaluate(files, None)
    assert all(len(g.rewrite) < 3 for p in plain.pending for g in p.groups)


def test_a_partition_clustered_since_is_left_alone_until_its_files_change() -> None:
    files = [data("c1", 100), data("c2", 100), data("c3", 20)]
    marks = merged_marks(None, {P.key: (Z.label, [f.path for f in files])})
    clustered = Clustering.of(("x", "y"), 0, [], {"x", "y"}, set(), marks)
    assert clustered is not None and clustered.clustered == {P.key: sorted(f.path for f in files)}
    verdict = evaluate(files, clustered)
    assert verdict.type is None
    assert "is clustered by z-order(x, y) since its last full optimizing" in verdict.partitions[0].reasons[0]
    # a writer's append (or a bin-pack's output) makes it unclustered: the whole partition again
    grown = evaluate([*files, data("new", 1)], clustered)
    assert grown.type is OptimizingType.FULL
    assert "1 of its 4 data file(s) were not written clustered" in grown.partitions[0].reasons[0]
    assert len(grown.pending[0].groups[0].rewrite) == 4
    # a delete applying to a clustered file, too
    delete = DeleteFile("/t/data/d.parquet", P, False, 100, 5, 2, None)
    assert evaluate(files, clustered, [delete]).type is OptimizingType.FULL
    # marks kept under another clustering do not count
    other = Clustering.of(("y",), 0, [], {"x", "y"}, set(), marks)
    assert other is not None and evaluate(files, other).type is OptimizingType.FULL


def test_clustering_only_in_full_optimizing() -> None:
    files = [data(f"f{i}", 1) for i in range(20)]
    clock = OptimizingClock(NOW, last_minor_ms=0, last_full_ms=NOW)  # minor due, full not
    verdict = evaluate_table(1, group_by_partition(files, []), config(), clock, None, Z)
    assert verdict.type is OptimizingType.MINOR
    assert all(g.clustering is None for p in verdict.pending for g in p.groups)


def test_clustering_of_a_table() -> None:
    columns = {"id", "cat", "x", "y", "s.inner"}
    assert Clustering.of((), 3, ["x asc"], columns, set(), None) == Clustering("sort", ("x asc",), 3)
    assert Clustering.of((), 0, [], columns, set(), None) is None
    # z-order wins over a sort order; identity partition columns are dropped as Iceberg drops them
    assert Clustering.of(("cat", "x", "s.inner"), 3, ["x asc"], columns, {"cat"}, None) == Clustering(
        "z-order", ("x", "s.inner")
    )
    with pytest.raises(InvalidField, match=r"z-order\.columns.*no column named nope"):
        Clustering.of(("x", "nope"), 0, [], columns, set(), None)
    with pytest.raises(InvalidField, match="identity partition columns"):
        Clustering.of(("cat",), 0, [], columns, {"cat"}, None)
    with pytest.raises(InvalidField, match="names a column twice"):
        OptimizingConfig.of({"self-optimizing.z-order.columns": "x, x"})
    assert OptimizingConfig.of({"self-optimizing.z-order.columns": " x , y "}).z_order_columns == ("x", "y")


# ---- on Spark


@pytest.fixture(scope="module")
def catalog(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogSpec]:
    yield spark_sql_catalog(spark, tmp_path_factory.mktemp("clustering"), "clustering")


PROPS = {
    "format-version": "2",
    "self-optimizing.target-size": "32768",
    "self-optimizing.full.trigger.interval": str(DAY),
    "write.delete.mode": "merge-on-read",
}


def create(spark: SparkSession, name: str, props: dict[str, str] | None = None) -> str:
    table = f"clustering.db.{name}"
    properties = ", ".join(f"'{k}'='{v}'" for k, v in {**PROPS, **(props or {})}.items())
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, x INT, y INT, v STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({properties})"
    )
    return table


def append(spark: SparkSession, table: str, rows: int, start: int, cat: str = "a") -> None:
    """One file of rows with x and y spread over 0..999 at random."""
    spark.sql(
        f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ id, '{cat}', CAST(rand({start}) * 1000 AS INT), "
        f"CAST(rand({start + 1}) * 1000 AS INT), uuid() FROM range({start}, {start + rows})"
    )


def bounds(spark: SparkSession, table: str, column: str) -> list[tuple[int, int]]:
    """The ranges of `column` in the data files of partition cat=a."""
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(
        f"SELECT readable_metrics.{column}.lower_bound, readable_metrics.{column}.upper_bound FROM {table}.files "
        "WHERE content = 0 AND partition.cat = 'a'"
    ).collect()
    return sorted((int(r[0]), int(r[1])) for r in rows)


def plan(catalog: CatalogSpec, table: str, clustered: dict[str, Any] | None = None) -> ProcessPlan:
    loaded = open_catalog(catalog).load_table(("db", table.rsplit(".", 1)[1]))
    now = int(time.time() * 1000)
    clock = OptimizingClock(now, last_minor_ms=now, last_full_ms=0)
    files = snapshot_files(loaded, ManifestCache())
    name = "db." + table.rsplit(".", 1)[1]
    return plan_process(name, loaded, files, OptimizingConfig.of(loaded.properties), clock, None, clustered)


def run(spark: SparkSession, catalog: CatalogSpec, planned: ProcessPlan) -> list[OptimizingResult]:
    results = []
    for task_id, task in enumerate(planned.tasks, start=1):
        result = execute_task(spark, assignment(catalog, task.input.model_dump(mode="json"), 7, task_id), "test")
        assert isinstance(result, OptimizingResult)
        results.append(result)
    return results


def marks_after(results: list[OptimizingResult], planned: ProcessPlan) -> dict[str, Any] | None:
    labels = {g.partition.key: g.clustering.label for t in planned.tasks for g in t.input.groups if g.clustering}  # type: ignore[union-attr]
    return merged_marks(None, {k: (labels[k], v) for r in results for k, v in r.clustered.items()})


@pytest.mark.spark
@pytest.mark.slow
def test_sort_order_clusters_partitions_into_disjoint_ranges(spark: SparkSession, catalog: CatalogSpec) -> None:
    table = create(spark, "sorted")
    spark.sql(f"ALTER TABLE {table} WRITE LOCALLY ORDERED BY x")  # writers sort each file only
    for i in range(5):
        append(spark, table, 600, i * 10_000)
    append(spark, table, 50, 90_000, cat="b")
    before = checksum(spark, table, "id, cat, x, y, v")
    assert all(low < 50 and high > 950 for low, high in bounds(spark, table, "x"))  # every file spans all of x

    planned = plan(catalog, table)
    (task,) = planned.tasks
    groups = task.input.groups  # type: ignore[union-attr]
    assert {g.partition.path for g in groups} == {"cat=a", "cat=b"}  # a lone unclustered file is sorted too
    assert all(g.clustering is not None and g.clustering.kind == "sort" for g in groups)
    results = run(spark, catalog, planned)

    assert checksum(spark, table, "id, cat, x, y, v") == before
    loaded = open_catalog(catalog).load_table(("db", "sorted"))
    a_bounds = sorted(bounds_of(loaded, "x", "a"))
    assert len(a_bounds) >= 3 and len(bounds_of(loaded, "x", "b")) == 1
    for (_, high), (low, _) in itertools.pairwise(a_bounds):
        assert high <= low  # sorted: the files hold consecutive ranges of x
    marks = marks_after(results, planned)
    assert marks is not None and set(marks) == {"0:cat=a", "0:cat=b"}

    # clustered now: the next full optimizing has nothing to do
    with pytest.raises(NothingToDo, match="clustered by sort order 1 \\(x asc\\)"):
        plan(catalog, table, marks)
    # a new file in partition b: b is clustered whole again, a is left alone
    append(spark, table, 50, 95_000, cat="b")
    (again,) = plan(catalog, table, marks).tasks
    (group,) = again.input.groups  # type: ignore[union-attr]
    assert group.partition.path == "cat=b" and len(group.rewrite) == 2


def bounds_of(loaded: Any, column: str, cat: str) -> list[tuple[int, int]]:
    from pyiceberg.conversions import from_bytes

    field = loaded.schema().find_field(column)
    found = []
    for task in loaded.scan(row_filter=f"cat = '{cat}'").plan_files():
        f = task.file
        low = from_bytes(field.field_type, f.lower_bounds[field.field_id])
        high = from_bytes(field.field_type, f.upper_bounds[field.field_id])
        found.append((int(low), int(high)))
    return found


@pytest.mark.spark
@pytest.mark.slow
def test_z_order_cuts_the_files_a_selective_query_reads(spark: SparkSession, catalog: CatalogSpec) -> None:
    table = create(spark, "zordered", {"self-optimizing.z-order.columns": "x, y"})
    for i in range(8):
        append(spark, table, 600, i * 10_000)
    before = checksum(spark, table, "id, cat, x, y, v")
    loaded = open_catalog(catalog).load_table(("db", "zordered"))
    query = "x < 100 AND y < 100"
    read_before = len(list(loaded.scan(row_filter=query).plan_files()))
    assert read_before == 8

    planned = plan(catalog, table)
    (task,) = planned.tasks
    (group,) = task.input.groups  # type: ignore[union-attr]
    assert group.clustering is not None and group.clustering.columns == ["x", "y"] and group.expected_files >= 4
    (result,) = run(spark, catalog, planned)
    assert result.files_in == 8 and result.files_out >= group.expected_files  # the writer rolls over on its own too
    assert list(result.clustered) == ["0:cat=a"] and len(result.clustered["0:cat=a"]) == result.files_out
    assert result.unreduced == {}  # clustering is remembered as clustered, not as a rewrite that failed to reduce

    assert checksum(spark, table, "id, cat, x, y, v") == before
    loaded = open_catalog(catalog).load_table(("db", "zordered"))
    read_after = len(list(loaded.scan(row_filter=query).plan_files()))
    assert read_after < read_before and read_after <= 2
    # a later bin-pack would not count as clustered: only the files the clustering wrote do
    marks = marks_after([result], planned)
    with pytest.raises(NothingToDo, match="clustered by z-order\\(x, y\\)"):
        plan(catalog, table, marks)
