"""What spark-submit needs to run an optimizer as a Spark application of its own."""

from __future__ import annotations

from pathlib import Path

from lakewarden._compat.pyspark import spark_home
from lakewarden.spark.jars import JAVA_JAR, ensure_spark_jars, maven_coordinates

DEPLOY_MODES = ("client", "cluster")


def spark_submit_path() -> str:
    """pyspark's own spark-submit."""
    return str(spark_home() / "bin" / "spark-submit")


def optimizer_program() -> str:
    """The Python file spark-submit runs (`lakewarden optimizer` under spark-submit)."""
    return str(Path(__file__).resolve().parent.parent / "cli" / "submitted.py")


def optimizer_submit_arguments(deploy_mode: str = "client", maven: bool = False) -> list[str]:
    """The jars and the program, to be followed by `lakewarden optimizer`'s options.

    Client mode (the driver on this machine): the jars lakewarden built go to the executors (`--jars`) and the
    JDBC drivers onto the driver's own class path (see SparkJars). Cluster mode (the driver on the cluster,
    YARN or Kubernetes): paths of this machine mean nothing there, so only `--jars` (spark-submit uploads
    them). `maven`: `--packages` with the pinned coordinates instead, for clusters that reach a Maven repository;
    only lakewarden's own classes go as a jar."""
    if deploy_mode not in DEPLOY_MODES:
        raise ValueError(f"deploy mode {deploy_mode!r} is none of {', '.join(DEPLOY_MODES)}")
    jars = ensure_spark_jars(quiet=True)
    if maven:
        own = next(j for j in jars.spark if j.endswith(JAVA_JAR))
        return ["--packages", ",".join(maven_coordinates()), "--jars", own, optimizer_program()]
    if deploy_mode == "cluster":
        return ["--jars", jars.shipped_jars, optimizer_program()]
    return ["--jars", jars.shipped_jars, "--driver-class-path", jars.driver_classpath, optimizer_program()]
