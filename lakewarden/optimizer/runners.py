"""How a task's file groups are rewritten on Spark, with Iceberg's own runners: the bin-pack runner's read and
write of staged scan tasks, the sort and z-order runners (package-private in Iceberg's Spark module: lakewarden's
GroupRewrites makes them through reflection and drives them through their public interface), and position-delete
files of a segment's own from Iceberg's `_deleted` metadata column. rewrite.py decides what to rewrite and commits
it."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakewarden.protocol.inputs import FileGroupInput
from lakewarden.spark.classes import java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# file groups of one task rewritten at once (Iceberg's max-concurrent-file-group-rewrites defaults to 5)
MAX_CONCURRENT_GROUPS = 4
# the fields of Iceberg's position-delete files (MetadataColumns.DELETE_FILE_PATH / DELETE_FILE_POS)
FILE_PATH_ID = 2147483546
POS_ID = 2147483545


class StalePlan(RuntimeError):
    """The table changed under the plan so that its files cannot be committed: the table is planned again."""


def _static(jvm: Any, gateway: Any, class_name: str, method: str) -> Any:
    """A static no-argument method's result, called through reflection (py4j mistakes SparkTableCache.get()
    for its instance overload get(String))."""
    klass = java_class(jvm, "org.apache.spark.util.Utils").classForName(class_name, True, False)
    return klass.getMethod(method, _classes(jvm, gateway, [])).invoke(None, _objects(jvm, gateway, []))


CACHE_CATALOG = "default_cache_iceberg"  # the name Iceberg's Spark source gives its catalog of cached tables


class _Staged:
    """Scan tasks staged for Spark under a fresh id, as Iceberg's rewrite runners stage a file group."""

    def __init__(self, spark: SparkSession, table: Any, tasks: Any) -> None:
        """`tasks`: a Java list of scan tasks (handed over as one reference, not file by file)."""
        self.spark = spark
        self.table = table
        jvm: Any = spark._jvm
        self.id = str(uuid.uuid4())
        self.cache = _static(jvm, spark.sparkContext._gateway, "org.apache.iceberg.spark.SparkTableCache", "get")
        self.tasks = java_class(jvm, "org.apache.iceberg.spark.ScanTaskSetManager").get()
        self.coordinator = java_class(jvm, "org.apache.iceberg.spark.FileRewriteCoordinator").get()
        self.cache.add(self.id, table)
        self.tasks.stageTasks(table, self.id, tasks)

    def close(self) -> None:
        self.cache.remove(self.id)
        self.tasks.removeTasks(self.table, self.id)
        self.coordinator.clearRewrite(self.table, self.id)


def rewrite_groups(spark: SparkSession, table: Any, plan: Any, groups: list[FileGroupInput]) -> dict[int, list[str]]:
    """The plan's file groups that have files to rewrite (`groups`, as the task's input has them), each rewritten
    by Iceberg's own runner (bin-pack, or a clustering group's sort or z-order runner) by a Spark job of its own, up
    to MAX_CONCURRENT_GROUPS at once as Iceberg's action runs its groups: a group read as one split keeps one core
    busy, so one group at a time would leave the others idle. The jobs run in the task's Spark job group (canceling
    the task cancels them all); when a group fails, the files the others wrote are deleted before the error is
    raised. Driven by lakewarden's GroupRewrites in one call: through py4j each group would cost dozens of round
    trips. Returns, by group index, the locations each group wrote (the plan records them)."""
    for group in groups:
        how = group.clustering
        if how is not None and how.kind == "sort" and table.sortOrders().get(how.sort_order_id) is None:
            raise StalePlan(f"the table has no sort order {how.sort_order_id} any more")
    if not groups:
        return {}
    runner = java_class(spark._jvm, "io.lakewarden.iceberg.GroupRewrites")
    written = json.loads(runner.run(spark._jsparkSession, plan, MAX_CONCURRENT_GROUPS))
    return {int(index): paths for index, paths in written.items()}


def _classes(jvm: Any, gateway: Any, names: list[str]) -> Any:
    classes = gateway.new_array(java_class(jvm, "java.lang.Class"), len(names))
    for i, name in enumerate(names):
        classes[i] = java_class(jvm, "org.apache.spark.util.Utils").classForName(name, True, False)
    return classes


def _objects(jvm: Any, gateway: Any, values: list[Any]) -> Any:
    objects = gateway.new_array(java_class(jvm, "java.lang.Object"), len(values))
    for i, value in enumerate(values):
        objects[i] = value
    return objects


def _deleted_rows(spark: SparkSession, staged: _Staged) -> Any:
    """The `_file` and `_pos` of the rows every delete that applies removes from the staged files."""
    # read as the cached table itself, not as a rewrite's input (`load` of the staged id): on format version 3
    # that turns the row lineage into data columns and leaves no metadata columns to read
    spark.conf.set(f"spark.sql.catalog.{CACHE_CATALOG}", "org.apache.iceberg.spark.SparkCachedTableCatalog")
    frame = spark.read.option("scan-task-set-id", staged.id).table(f"{CACHE_CATALOG}.`{staged.id}`")
    return frame.select("_file", "_pos", "_deleted").where("_deleted").select("_file", "_pos")


def rewrite_positions(spark: SparkSession, table: Any, tasks: Any, task_of: Callable[[str], Any]) -> Any:
    """A position-delete file of its own for each data file of `tasks` (a Java list), holding every row its
    deletes remove; `task_of` finds a data file's task by path. Returns a Java list."""
    staged = _Staged(spark, table, tasks)
    try:
        # the deleted rows are few (what deletes remove from segments): collected as they are, no shuffle
        deleted = _deleted_rows(spark, staged).collect()
    finally:
        staged.close()
    positions: dict[str, list[int]] = {}
    for path, pos in deleted:
        positions.setdefault(path, []).append(pos)
    jvm: Any = spark._jvm
    written = java_class(jvm, "java.util.ArrayList")()
    for path in sorted(positions):
        written.add(_write_position_deletes(spark, table, task_of(path), sorted(positions[path])))
    return written


def write_deletion_vectors(spark: SparkSession, table: Any, tasks: Any) -> Any:
    """A deletion vector for each data file of `tasks` (a Java list; format version 3), holding every row its
    deletes remove: the ones of the vector it has now included, so the new vector replaces that one
    (lakewarden's DeletionVectors). Returns a Java list."""
    jvm: Any = spark._jvm
    staged = _Staged(spark, table, tasks)
    try:
        vectors = java_class(jvm, "io.lakewarden.iceberg.DeletionVectors")
        return vectors.write(table, tasks, _deleted_rows(spark, staged)._jdf)
    finally:
        staged.close()


def _write_position_deletes(spark: SparkSession, table: Any, task: Any, positions: list[int]) -> Any:
    """One Parquet position-delete file naming one data file, written through the table's FileIO and
    described (metrics included) by Iceberg itself."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    jvm: Any = spark._jvm
    data = task.file()
    path = str(data.location())
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID)}),
            pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID)}),
        ]
    )
    rows = pa.table({"file_path": [path] * len(positions), "pos": positions}, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(rows, buffer, compression="zstd")
    content = buffer.getvalue()
    spec = task.spec()
    name = f"lakewarden-pos-{uuid.uuid4().hex}.parquet"
    location = table.locationProvider().newDataLocation(spec, data.partition(), name)
    stream = table.io().newOutputFile(location).create()
    try:
        stream.write(bytearray(content))
    finally:
        stream.close()
    metrics = java_class(jvm, "org.apache.iceberg.parquet.ParquetUtil").fileMetrics(
        table.io().newInputFile(location), java_class(jvm, "org.apache.iceberg.MetricsConfig").forPositionDelete(table)
    )
    return (
        java_class(jvm, "org.apache.iceberg.FileMetadata")
        .deleteFileBuilder(spec)
        .ofPositionDeletes()
        .withPath(location)
        .withFormat(java_class(jvm, "org.apache.iceberg.FileFormat").PARQUET)
        .withFileSizeInBytes(len(content))
        .withRecordCount(len(positions))
        .withPartition(data.partition())
        .withMetrics(metrics)
        .withReferencedDataFile(path)
        .build()
    )
