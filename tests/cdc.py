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
    name = f"eq-{uuid.uuid4().hex}.parquet"
    location = str(table.location())
    if "://" in location and not location.startswith(
        "file:"
    ):  # object storage: written through the table's own FileIO, as a writer's files are
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink)
        data = sink.getvalue().to_pybytes()
        written = "/".join([location.rstrip("/"), "data", *([partition] if partition else []), name])
        out = table.io().newOutputFile(written).create()
        out.write(bytearray(data))
        out.close()
        size = len(data)
    else:
        path = Path(location.removeprefix("file:"), "data", partition, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, path)
        written, size = str(path), path.stat().st_size
    builder = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec())
        .ofEqualityDeletes(ids)
        .withPath(written)
        .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
        .withFileSizeInBytes(size)
        .withRecordCount(rows.num_rows)
    )
    if partition:
        builder = builder.withPartitionPath(partition)
    table.newRowDelta().addDeletes(builder.build()).commit()
    return written


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
