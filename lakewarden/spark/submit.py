"""What spark-submit needs to run an optimizer as a Spark application of its own."""

from __future__ import annotations

from pathlib import Path

from lakewarden.spark.jars import ensure_spark_jars


def spark_submit_path() -> str:
    """pyspark's own spark-submit."""
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "bin" / "spark-submit")  # type: ignore[no-untyped-call]


def optimizer_submit_arguments() -> list[str]:
    """The jars (Iceberg to driver and executors; the JDBC drivers on the driver's own class path, see
    SparkJars) and the program, to be followed by `lakewarden optimizer`'s options."""
    program = Path(__file__).resolve().parent.parent / "cli" / "submitted.py"  # a file: spark-submit runs it
    jars = ensure_spark_jars(quiet=True)
    library = jars.native_library_dir
    return [
        "--jars",
        jars.spark_jars,
        "--driver-class-path",
        jars.driver_classpath,
        "--driver-library-path",
        library,
        "--conf",
        f"spark.driver.extraJavaOptions=-Djava.library.path={library}",
        str(program),
    ]
