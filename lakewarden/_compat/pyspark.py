"""pyspark's private names, as spark/ uses them: where pyspark's own Spark lives (its jars, its spark-submit). Imported
by spark/ only: the server never imports pyspark."""

from __future__ import annotations

from pathlib import Path

LIBRARY = "pyspark"
SUPPORTED = ">=3.5,<3.6"  # pyproject.toml pins the same


def spark_home() -> Path:
    """The Spark that pyspark runs (`pyspark.find_spark_home._find_spark_home`: SPARK_HOME, else pyspark's own
    directory, also when pyspark runs from a zip under spark-submit)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())  # type: ignore[no-untyped-call]
