"""Test data like production: equality deletes written as Flink's upsert writers write them.

Nothing on this machine writes equality deletes (Spark writes position deletes, pyiceberg none), so this
follows ../shared/recipes/equality-deletes.md: a Parquet file holding the key columns, each carrying its
Iceberg field id, written under the table's data location, described by Iceberg's FileMetadata and
committed with a RowDelta through Iceberg's Java API from PySpark. An upsert is such a delete of the
keys followed by an append of the new row versions, whose higher sequence number keeps them visible.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_TYPES = {"long": pa.int64(), "int": pa.int32(), "string": pa.string()}


def java_table(spark: SparkSession, name: str) -> Any:
    jvm: Any = spark._jvm
    return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)


def equality_delete(spark: SparkSession, name: str, keys: dict[str, list[Any]], partition: str = "") -> str:
    """Commit one equality-delete file of table `name` deleting the rows whose columns equal `keys`
    (column -> values, one row per index) in `partition` (Iceberg's `cat=a` path; '' when unpartitioned).
    Returns the delete file's path."""
    jvm: Any = spark._jvm
    table = java_table(spark, name)
    schema = table.schema()
    fields = []
    gateway: Any = spark.sparkContext._gateway
    ids = gateway.new_array(jvm.int, len(keys))
    for i, column in enumerate(keys):
        field = schema.findField(column)
        ids[i] = field.fieldId()
        kind = _TYPES[str(field.type().typeId().toString()).lower()]
        fields.append(pa.field(column, kind, nullable=False, metadata={b"PARQUET:field_id": str(field.fieldId())}))
    rows = pa.table({c: pa.array(v, f.type) for (c, v), f in zip(keys.items(), fields, strict=True)}, pa.schema(fields))
    location = str(table.location()).removeprefix("file:")
    path = Path(location, "data", partition, f"eq-{uuid.uuid4().hex}.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path)
    builder = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec())
        .ofEqualityDeletes(ids)
        .withPath(str(path))
        .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
        .withFileSizeInBytes(path.stat().st_size)
        .withRecordCount(rows.num_rows)
    )
    if partition:
        builder = builder.withPartitionPath(partition)
    table.newRowDelta().addDeletes(builder.build()).commit()
    return str(path)


def upsert(
    spark: SparkSession, name: str, rows: list[tuple[Any, ...]], columns: str, key: str, partition_of: Any
) -> None:
    """Upsert `rows` (tuples in `columns` order) by `key` as a Flink upsert sink does: an equality delete of
    the keys per partition (`partition_of(row)` gives its path), then an append of the new versions."""
    names = [c.strip() for c in columns.split(",")]
    index = names.index(key)
    by_partition: dict[str, list[Any]] = {}
    for row in rows:
        by_partition.setdefault(partition_of(row), []).append(row[index])
    for partition, keys in sorted(by_partition.items()):
        equality_delete(spark, name, {key: keys}, partition)
    spark.createDataFrame(rows, schema=_schema_of(spark, name, names)).writeTo(name).append()


def _schema_of(spark: SparkSession, name: str, columns: list[str]) -> Any:
    return spark.table(name).select(*columns).schema
