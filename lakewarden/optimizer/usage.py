"""What Spark measured of a task: the executor figures of every stage its job group ran.

Each task's Spark jobs run in a job group of their own (executor.job_group); the driver's status store (the
AppStatusStore behind the Spark UI and its REST API, kept whether or not the UI is served) has, for each stage
attempt, the sums of its Spark tasks' metrics. lakewarden's JobGroupUsage (spark/java) adds them up over the group's
jobs in the driver, reading each figure by key, and hands them over in one call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakewarden.protocol.messages import SparkUsage
from lakewarden.spark.classes import java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# how long the listener bus (which fills the store) may take to drain before the figures are read
DRAIN_TIMEOUT_MS = 5000


def job_group_usage(spark: SparkSession, group: str) -> SparkUsage:
    """The figures of every stage attempt of the group's jobs; zeros for a group that ran no job."""
    jsc: Any = spark.sparkContext._jsc
    usage = java_class(spark._jvm, "io.lakewarden.spark.JobGroupUsage")
    return SparkUsage.model_validate_json(usage.of(jsc.sc(), group, DRAIN_TIMEOUT_MS))
