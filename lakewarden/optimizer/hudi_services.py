"""Running one of Hudi's table services on a Hudi table, with Hudi's own code: its Spark procedures, in a session
that carries Hudi's engine (`lakewarden optimizer --engine hudi`).

A plan a writer requested is executed as planned (`instants`); otherwise the procedure schedules its plan by the
table's strategy and runs it (`scheduleAndExecute`). Clean goes through Hudi's write client instead (`_clean`).
Hudi itself rolls back an attempt of the same plan that died midway before running it again. What the task did
is read off the table's timeline: the instants completed between before and after, and the instants the archive
moved off it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakewarden.domain.hudi import COMPLETED, Instant, timeline_of, timeline_tail
from lakewarden.protocol.inputs import HudiServiceInput
from lakewarden.protocol.results import HudiServiceResult
from lakewarden.spark.classes import java_class
from lakewarden.spark.sql import string_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# the actions each service completes on the timeline (a compaction completes as a commit, clustering as a
# replacecommit)
COMPLETES = {"compaction": "commit", "clustering": "replacecommit", "clean": "clean"}


def run_hudi_service(spark: SparkSession, work: HudiServiceInput) -> HudiServiceResult:
    before = timeline(spark, work.location)
    if work.service == "clean":
        deleted = _clean(spark, work)
    else:
        spark.sql(_statement(work)).collect()
        deleted = 0
    after = timeline(spark, work.location)
    done = {i.timestamp for i in before if i.state == COMPLETED}
    action = COMPLETES.get(work.service)
    completed = [i.timestamp for i in after if i.state == COMPLETED and i.timestamp not in done and i.action == action]
    archived = 0
    if work.service == "archive":
        kept = {i.timestamp for i in after}
        archived = sum(1 for t in done if t not in kept)
    ran = bool(completed or archived)
    return HudiServiceResult(
        service=work.service,
        instants=completed,
        services_run=1 if ran else 0,
        files_deleted=deleted,
        instants_archived=archived,
        idle_services=[] if ran else [work.service],
        # where the timeline stood before: a writer's commit that completes while the service runs may have been
        # in flight for it, and a tail from after would say it had seen that commit
        timeline_tail=timeline_tail(before),
    )


def _statement(work: HudiServiceInput) -> str:
    location = string_literal(work.location)
    options = string_literal(",".join(f"{k}={v}" for k, v in sorted(work.options.items())))
    match work.service:
        case "compaction" | "clustering":
            procedure = "run_compaction" if work.service == "compaction" else "run_clustering"
            if work.instant is None:
                plan = "op => 'scheduleAndExecute'"
            else:
                plan = f"op => 'execute', instants => {string_literal(work.instant)}"
            return f"CALL {procedure}({plan}, path => {location}, options => {options})"
        case "archive":
            counts = _archive_counts(work.options)
            return f"CALL archive_commits(path => {location}{counts})"
    raise ValueError(f"not a service lakewarden runs with a procedure: {work.service}")


def _clean(spark: SparkSession, work: HudiServiceInput) -> int:
    """Hudi's cleaner through its write client, on the table's path: its procedure takes only a table of the
    session's catalog, and registering one there writes the catalog's database into the table's
    hoodie.properties. Returns the files it deleted."""
    jvm: Any = spark._jvm
    props = java_class(jvm, "java.util.Properties")()
    for key, value in work.options.items():
        props.setProperty(key, value)
    config = java_class(jvm, "org.apache.hudi.config.HoodieWriteConfig").newBuilder()
    config = config.withPath(work.location).withProps(props).build()
    context = java_class(jvm, "org.apache.hudi.client.common.HoodieSparkEngineContext")(spark._jsc)
    client = java_class(jvm, "org.apache.hudi.client.SparkRDDWriteClient")(context, config)
    try:
        cleaned = client.clean()
    finally:
        client.close()
    return 0 if cleaned is None else int(cleaned.getTotalFilesDeleted())


def _archive_counts(options: Mapping[str, str]) -> str:
    """The archive procedure takes the table's `hoodie.keep.*` and retained commits as arguments of its own."""
    names = {
        "hoodie.keep.min.commits": "min_commits",
        "hoodie.keep.max.commits": "max_commits",
        "hoodie.cleaner.commits.retained": "retain_commits",
    }
    return "".join(f", {arg} => {int(options[key])}" for key, arg in names.items() if options.get(key, "").isdigit())


def timeline(spark: SparkSession, location: str) -> list[Instant]:
    """The table's active timeline, from its instant files' names (both layouts), through Hadoop's FileSystem:
    wherever the table lives."""
    jvm: Any = spark._jvm
    hadoop = spark._jsc.hadoopConfiguration()
    names: list[str] = []
    for folder in (f"{location.rstrip('/')}/.hoodie", f"{location.rstrip('/')}/.hoodie/timeline"):
        path = java_class(jvm, "org.apache.hadoop.fs.Path")(folder)
        fs = path.getFileSystem(hadoop)
        if fs.exists(path):
            names += [status.getPath().getName() for status in fs.listStatus(path)]
    return timeline_of(names)
