"""Running one task on Spark through the JVM: self-optimizing in rewrite.py, maintenance in maintenance.py,
Hudi's and Paimon's table services in hudi_services.py and paimon_services.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.security import optimizer_id
from lakewarden.optimizer.hudi_services import run_hudi_service
from lakewarden.optimizer.maintenance import run_maintenance
from lakewarden.optimizer.paimon_services import run_paimon_service
from lakewarden.optimizer.rewrite import run_optimizing
from lakewarden.protocol.inputs import HudiServiceInput, OptimizingInput, PaimonServiceInput
from lakewarden.protocol.messages import Assignment
from lakewarden.protocol.results import TaskResult
from lakewarden.spark.classes import java_class
from lakewarden.spark.session import configure_catalogs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def job_group(task: Assignment, optimizer: str) -> str:
    """The Spark job group an attempt of a task runs its jobs in: what canceling the task cancels, and whose
    stages its usage is added up from (optimizer/usage.py). It names the optimizer (`optimizer` is its token,
    shown by its digest): a Spark application may outlive the server's numbering (a new system database
    starts its process ids again), and an old group of the same numbers would be counted too."""
    return f"lakewarden-{optimizer_id(optimizer)}-{task.process_id}-{task.task_id}-{task.attempt}"


def execute_task(
    spark: SparkSession, task: Assignment, optimizer: str, gate: Callable[[], None] | None = None
) -> TaskResult:
    """Run one task of any action; returns its result (what the process records). `gate` is asked right
    before an optimizing task commits and raises if it may not (its process was canceled)."""
    started = time.monotonic()
    work = task.input
    if isinstance(work, HudiServiceInput | PaimonServiceInput):  # by the table's location: no Iceberg catalog
        java_class(spark._jvm, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)
        engine = "hudi" if isinstance(work, HudiServiceInput) else "paimon"
        spark.sparkContext.setJobGroup(
            job_group(task, optimizer), f"{engine} {work.service} {work.table}", interruptOnCancel=True
        )
        done = run_hudi_service(spark, work) if isinstance(work, HudiServiceInput) else run_paimon_service(spark, work)
        return done.model_copy(update={"duration_ms": int((time.monotonic() - started) * 1000)})
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
    java_class(jvm, "org.apache.spark.sql.SparkSession").setActiveSession(jss)
    name = f"{spark_name}.{work.table}"
    spark3 = java_class(jvm, "org.apache.iceberg.spark.Spark3Util")
    # Spark's catalog may hand out a table it cached (cache-enabled, 30 s) while other writers committed: the
    # task must see the table as it is now. Above all orphan cleanup: a stale table's reachable files omit what
    # was committed since, its newest metadata file among them, which it would delete. Dropping the cached
    # entry first makes the load itself fresh: one read of the table's metadata, where a load and a refresh
    # would read it twice.
    found = spark3.catalogAndIdentifier(jss, name)
    found.catalog().invalidateTable(found.identifier())
    table = spark3.loadIcebergTable(jss, name)
    # interrupt running Spark tasks when the group is canceled: a canceled process stops at once
    spark.sparkContext.setJobGroup(job_group(task, optimizer), f"{work.action} {name}", interruptOnCancel=True)
    properties = {
        "lakewarden.optimizer": optimizer,
        "lakewarden.process-id": str(task.process_id),
        "lakewarden.task-id": str(task.task_id),
    }
    if isinstance(work, OptimizingInput):
        result: TaskResult = run_optimizing(spark, table, work, properties, gate)
    else:
        result = run_maintenance(spark, table, name, work, properties)
    return result.model_copy(update={"duration_ms": int((time.monotonic() - started) * 1000)})
