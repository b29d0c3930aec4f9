"""How a task's file groups are rewritten on Spark, with Iceberg's own runners: the bin-pack runner's read and
write of staged scan tasks, the sort and z-order runners (package-private in Iceberg's Spark module: made
through reflection and driven through their public interface), and position-delete files of a segment's own
from Iceberg's `_deleted` metadata column. rewrite.py decides what to rewrite and commits it."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


def _rewrite(spark: SparkSession, table: Any, tasks: Any, group: FileGroupInput) -> Any:
    """Iceberg's bin-pack rewrite runner (SparkBinPackFileRewriteRunner) on exactly these files: read in
    splits of the planned size, each split written as one file, returned uncommitted."""
    jvm: Any = spark._jvm
    staged = _Staged(spark, table, tasks)
    try:
        frame = (
            spark.read.format("iceberg")
            .option("scan-task-set-id", staged.id)
            .option("split-size", str(group.split_size))
            .option("file-open-cost", "0")
            .load(staged.id)
        )
        output_spec = int(table.spec().specId())
        # files of an older partition spec are written in the current one, which needs a shuffle
        same_spec = int(tasks.get(0).spec().specId()) == output_spec
        (
            frame.write.format("iceberg")
            .option("rewritten-file-scan-task-set-id", staged.id)
            .option("target-file-size-bytes", str(group.max_file_size))
            .option("distribution-mode", "none" if same_spec else "range")
            .option("output-spec-id", str(output_spec))
            .mode("append")
            .save(staged.id)
        )
        return java_class(jvm, "java.util.ArrayList")(staged.coordinator.fetchNewFiles(table, staged.id))
    finally:
        staged.close()


def rewrite_groups(
    spark: SparkSession, table: Any, jobs: list[tuple[FileGroupInput, Any]]
) -> list[tuple[FileGroupInput, Any, Any]]:
    """Each group rewritten (bin-packed, or clustered) by a Spark job of its own, up to MAX_CONCURRENT_GROUPS
    at once as Iceberg's action runs its groups (max-concurrent-file-group-rewrites): a group read as one
    split keeps one core busy, so one group at a time would leave the others idle. The jobs run in the
    task's Spark job group (canceling the task cancels them all). When a group fails, the files the others
    wrote are deleted before the error is raised. Tasks and written files are Java lists."""
    if len(jobs) <= 1:
        return [(g, t, _rewrite_one(spark, table, t, g)) for g, t in jobs]
    sc = spark.sparkContext
    jvm: Any = spark._jvm
    inherited = {
        k: sc.getLocalProperty(k) for k in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    }

    def in_task_job_group(group: FileGroupInput, group_tasks: Any) -> Any:
        java_class(jvm, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)
        for key, value in inherited.items():
            sc.setLocalProperty(key, value)  # type: ignore[arg-type]
        return _rewrite_one(spark, table, group_tasks, group)

    done: list[tuple[FileGroupInput, Any, Any]] = []
    failure: BaseException | None = None
    with ThreadPoolExecutor(min(len(jobs), MAX_CONCURRENT_GROUPS), thread_name_prefix="group") as pool:
        futures = [pool.submit(in_task_job_group, g, t) for g, t in jobs]
        for (group, group_tasks), future in zip(jobs, futures, strict=True):
            try:
                done.append((group, group_tasks, future.result()))
            except BaseException as exc:
                failure = failure or exc
    if failure is not None:
        for _, _, written in done:
            for f in written:
                table.io().deleteFile(f.location())
        raise failure
    return done


def _rewrite_one(spark: SparkSession, table: Any, tasks: Any, group: FileGroupInput) -> Any:
    return (
        _cluster(spark, table, tasks, group) if group.clustering is not None else _rewrite(spark, table, tasks, group)
    )


def _cluster(spark: SparkSession, table: Any, tasks: Any, group: FileGroupInput) -> Any:
    """Iceberg's own sort or z-order rewrite runner (SparkSortFileRewriteRunner, SparkZOrderFileRewriteRunner)
    on exactly these files: the rows shuffled into `expected_files` ranges of the clustering key, each sorted
    and written as one file, returned uncommitted. The runners are package-private in Iceberg's Spark module:
    constructed through reflection and driven through their public interface, FileRewriteRunner."""
    clustering = group.clustering
    assert clustering is not None
    jvm: Any = spark._jvm
    gateway: Any = spark.sparkContext._gateway
    if clustering.kind == "sort":
        how = table.sortOrders().get(clustering.sort_order_id)
        if how is None:
            raise StalePlan(f"the table has no sort order {clustering.sort_order_id} any more")
        runner_class, how_class = "SparkSortFileRewriteRunner", "org.apache.iceberg.SortOrder"
    else:
        how = java_class(jvm, "java.util.ArrayList")()
        for name in clustering.columns:
            how.add(name)
        runner_class, how_class = "SparkZOrderFileRewriteRunner", "java.util.List"
    runner = _construct(
        jvm,
        gateway,
        f"org.apache.iceberg.spark.actions.{runner_class}",
        ["org.apache.spark.sql.SparkSession", "org.apache.iceberg.Table", how_class],
        [spark._jsparkSession, table, how],
    )
    interface = "org.apache.iceberg.actions.FileRewriteRunner"
    _invoke(jvm, gateway, interface, "init", ["java.util.Map"], runner, [java_class(jvm, "java.util.HashMap")()])
    info = (
        java_class(jvm, "org.apache.iceberg.actions.ImmutableRewriteDataFiles$FileGroupInfo")
        .builder()
        .globalIndex(0)
        .partitionIndex(0)
        .partition(tasks.get(0).file().partition())
        .build()
    )
    file_group = java_class(jvm, "org.apache.iceberg.actions.RewriteFileGroup")(
        info, tasks, int(table.spec().specId()), group.max_file_size, group.split_size, group.expected_files
    )
    written = _invoke(
        jvm, gateway, interface, "rewrite", ["org.apache.iceberg.actions.RewriteGroupBase"], runner, [file_group]
    )
    return java_class(jvm, "java.util.ArrayList")(written)


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


def _construct(jvm: Any, gateway: Any, class_name: str, parameters: list[str], arguments: list[Any]) -> Any:
    """A new instance of a class whose constructor is not public."""
    klass = java_class(jvm, "org.apache.spark.util.Utils").classForName(class_name, True, False)
    constructor = klass.getDeclaredConstructor(_classes(jvm, gateway, parameters))
    constructor.setAccessible(True)
    return constructor.newInstance(_objects(jvm, gateway, arguments))


def _invoke(
    jvm: Any, gateway: Any, interface: str, method: str, parameters: list[str], target: Any, arguments: list[Any]
) -> Any:
    """A public interface's method called on an object whose own class is not public."""
    klass = java_class(jvm, "org.apache.spark.util.Utils").classForName(interface, True, False)
    return klass.getMethod(method, _classes(jvm, gateway, parameters)).invoke(target, _objects(jvm, gateway, arguments))


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
