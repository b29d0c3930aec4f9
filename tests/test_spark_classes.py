"""Java classes reached through py4j by their full names, resolved once per JVM (lakewarden/spark/classes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakewarden.spark.classes import java_class


@pytest.mark.spark
def test_a_class_is_found_by_its_full_name_once_and_a_package_is_refused(spark: SparkSession) -> None:
    jvm: Any = spark._jvm
    array_list = java_class(jvm, "java.util.ArrayList")
    assert java_class(jvm, "java.util.ArrayList") is array_list  # kept: the next use is a plain call
    made = array_list(["a", "b"])
    assert made.size() == 2 and made.get(1) == "b"
    info = java_class(jvm, "org.apache.iceberg.actions.ImmutableRewriteDataFiles$FileGroupInfo")  # a nested class
    assert info.builder().globalIndex(3).getClass().getSimpleName() == "Builder"
    assert java_class(jvm, "org.apache.iceberg.FileFormat").PARQUET.name() == "PARQUET"  # a static field
    with pytest.raises(LookupError, match=r"no Java class org\.apache\.iceberg$"):
        java_class(jvm, "org.apache.iceberg")  # a package
