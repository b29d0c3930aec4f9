"""Running one task on Spark through the JVM: self-optimizing here, maintenance in maintenance.py.

An optimizing task names its partitions as an ExpressionParser JSON filter and carries the rewrite options
that select exactly the planned file classes. Iceberg plans the file groups, rewrites them and
validates the commit against concurrent changes; the snapshot summary names lakewarden, the
process and the task.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.optimizer.maintenance import run_maintenance
from lakewarden.protocol import Assignment, OptimizingInput, OptimizingResult, TaskResult
from lakewarden.spark.session import configure_catalogs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def execute_task(spark: SparkSession, task: Assignment, optimizer: str) -> TaskResult:
    """Run one task of any action; returns its result (what the process records)."""
    started = time.monotonic()
    work = task.input
    spec = CatalogSpec(task.catalog.name, task.catalog.type, task.catalog.properties)
    # lakewarden's own catalogs come with a token that reaches only the tables this optimizer holds tasks on:
    # opened under a Spark name of their own, so that token never replaces the credential of a catalog by
    # the same name that a session shared with other work (a test, a notebook) uses
    spark_name = f"lakewarden_task_{spec.name}" if "token" in spec.properties else spec.name
    configure_catalogs(spark, [spec], {spec.name: spark_name})
    jvm: Any = spark._jvm
    jss: Any = spark._jsparkSession
    # Each Python thread runs on its own JVM thread, which starts with no active SparkSession; without
    # one, Spark's SQLConf.get answers with a blank conf and Iceberg's actions cannot find their catalogs.
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(jss)
    name = f"{spark_name}.{work.table}"
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(jss, name)
    spark.sparkContext.setJobGroup(f"lakewarden-{task.process_id}-{task.task_id}", f"{work.action} {name}")
    properties = {
        "lakewarden.optimizer": optimizer,
        "lakewarden.process-id": str(task.process_id),
        "lakewarden.task-id": str(task.task_id),
    }
    if isinstance(work, OptimizingInput):
        result: TaskResult = _optimize(jvm, jss, table, work, properties)
    else:
        result = run_maintenance(spark, table, name, work, properties)
    return result.model_copy(update={"duration_ms": int((time.monotonic() - started) * 1000)})


def _optimize(jvm: Any, jss: Any, table: Any, work: OptimizingInput, properties: dict[str, str]) -> OptimizingResult:
    properties = {
        **properties,
        "lakewarden.optimizing-type": work.type,
        "lakewarden.planned-snapshot-id": str(work.snapshot_id),
    }
    expression = jvm.org.apache.iceberg.expressions.ExpressionParser.fromJson(work.filter)
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(jss)

    rewrite = actions.rewriteDataFiles(table).filter(expression)
    for key, value in work.options.items():
        rewrite = rewrite.option(key, str(value))
    for key, value in properties.items():
        rewrite = rewrite.snapshotProperty(key, value)
    result = rewrite.execute()
    files_out = int(result.addedDataFilesCount())
    bytes_out = 0
    if files_out:
        table.refresh()
        bytes_out = _added_bytes(table, properties)
    delete_files_removed = int(result.removedDeleteFilesCount())
    delete_files_added = 0

    if work.rewrite_position_deletes:
        deletes = actions.rewritePositionDeletes(table).filter(expression).option("rewrite-all", "true")
        for key, value in properties.items():
            deletes = deletes.snapshotProperty(key, value)
        combined = deletes.execute()
        delete_files_removed += int(combined.rewrittenDeleteFilesCount())
        delete_files_added = int(combined.addedDeleteFilesCount())

    table.refresh()
    current = table.currentSnapshot()
    return OptimizingResult(
        files_in=int(result.rewrittenDataFilesCount()),
        bytes_in=int(result.rewrittenBytesCount()),
        files_out=files_out,
        bytes_out=bytes_out,
        delete_files_removed=delete_files_removed,
        delete_files_added=delete_files_added,
        snapshot_id=None if current is None else int(current.snapshotId()),
    )


def _added_bytes(table: Any, properties: dict[str, str]) -> int:
    """The bytes the rewrite's own snapshot added: found by the properties it carries, walking back from the
    current snapshot (a writer may have committed after it)."""
    snapshot = table.currentSnapshot()
    for _ in range(1000):
        if snapshot is None:
            break
        summary = snapshot.summary()
        if all(summary.get(key) == value for key, value in properties.items()):
            return int(summary.getOrDefault("added-files-size", "0"))
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    return 0
