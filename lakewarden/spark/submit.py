"""What spark-submit needs to run an optimizer as a Spark application of its own."""

from __future__ import annotations

from pathlib import Path

from lakewarden.spark.jars import ensure_spark_jars


def optimizer_submit_arguments() -> list[str]:
    """The jars (Iceberg to driver and executors; the JDBC drivers on the driver's own class path, see
    SparkJars) and the program, to be followed by `lakewarden optimizer`'s options."""
    import lakewarden.optimizer.__main__ as entry

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
        str(Path(entry.__file__).resolve()),
    ]
