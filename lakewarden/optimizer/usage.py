"""What Spark measured of a task: the executor figures of every stage its job group ran.

Each task's Spark jobs run in a job group of their own (executor.job_group); the driver's status store
(the AppStatusStore behind the Spark UI and its REST API, kept whether or not the UI is served) has, for
each stage attempt, the sums of its Spark tasks' metrics. Those are added up over the group's jobs. The
store is filled from the listener bus, so it is drained first: what the last stage of the task did is in.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lakewarden.protocol.messages import SparkUsage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_MS = 5000


def job_group_usage(spark: SparkSession, group: str) -> SparkUsage:
    """The figures of every stage attempt of the group's jobs; zeros for a group that ran no job."""
    sc = spark.sparkContext
    jsc: Any = sc._jsc
    context = jsc.sc()
    try:
        context.listenerBus().waitUntilEmpty(DRAIN_TIMEOUT_MS)
    except Exception as exc:  # a busy bus: the figures may miss the very last events of the task
        log.info("Spark's listener bus did not drain in %d ms: %s", DRAIN_TIMEOUT_MS, exc)
    store = context.statusStore()
    gateway: Any = sc._gateway
    top = gateway.new_array(gateway.jvm.double, 1)
    top[0] = 1.0  # a stage's task metrics at their 100th percentile: the figures of its largest task
    job_ids = sc.statusTracker().getJobIdsForGroup(group)
    stage_ids: set[int] = set()
    for job_id in job_ids:
        try:
            stage_ids.update(int(s) for s in _seq(store.job(job_id).stageIds()))
        except Exception:  # evicted from the store (spark.ui.retainedJobs): nothing more to add
            continue
    usage = SparkUsage(jobs=len(job_ids))
    cpu_ns = 0  # added up in nanoseconds, as the store keeps it, and turned into milliseconds once
    for stage_id in sorted(stage_ids):
        for attempt in _stage_attempts(store, stage_id, top):
            usage = usage.plus(_of_stage(attempt))
            cpu_ns += int(attempt.executorCpuTime())
    return usage.model_copy(update={"cpu_ms": cpu_ns // 1_000_000})


def _stage_attempts(store: Any, stage_id: int, quantiles: Any) -> list[Any]:
    """Every attempt of the stage (a retried stage cost twice), with the distribution of its tasks' metrics
    at the given quantiles."""
    try:
        # stageData(stageId, details, taskStatus, withSummaries, unsortedQuantiles): py4j cannot leave out a
        # Scala default argument, so the task-status filter's default is asked of its synthetic method
        no_status = getattr(store, "stageData$default$3")()
        return _seq(store.stageData(stage_id, False, no_status, True, quantiles))
    except Exception:  # a skipped stage that never ran, or one evicted from the store (spark.ui.retainedStages)
        return []


def _of_stage(stage: Any) -> SparkUsage:
    peak = 0
    distributions = stage.taskMetricsDistributions()
    if distributions.isDefined():
        values = _seq(distributions.get().peakExecutionMemory())
        peak = int(values[-1]) if values else 0
    return SparkUsage(
        tasks=int(stage.numCompleteTasks()) + int(stage.numFailedTasks()) + int(stage.numKilledTasks()),
        run_ms=int(stage.executorRunTime()),
        read_bytes=int(stage.inputBytes()),
        read_records=int(stage.inputRecords()),
        written_bytes=int(stage.outputBytes()),
        written_records=int(stage.outputRecords()),
        shuffle_bytes=int(stage.shuffleWriteBytes()),
        spilled_bytes=int(stage.diskBytesSpilled()),
        peak_memory_bytes=peak,
    )


def _seq(scala_seq: Any) -> list[Any]:
    """A Scala Seq's elements, through its iterator."""
    iterator = scala_seq.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items
