"""Values and names escaped for Spark SQL text (spark/sql.py), read back by Spark's own parser."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from lakewarden.spark.sql import identifier, string_literal

pytestmark = pytest.mark.spark


def test_literals_and_identifiers_survive_quotes_and_backslashes(spark: SparkSession) -> None:
    for text in ("it's a\\path", "", "a\\'b", "table$snapshots"):
        assert spark.sql(f"SELECT {string_literal(text)} AS v").collect()[0][0] == text
    name = "odd`name$x"
    assert spark.sql(f"SELECT 1 AS {identifier(name)}").columns == [name]
