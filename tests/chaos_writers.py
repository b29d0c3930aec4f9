"""The chaos harness's writers (tests/chaos.py): three tables, three writers racing lakewarden and the faults.

Each writer keeps a model of its table (its rows by id). An operation that raised is resolved by reading the
table: it applied entirely or not at all, else that is a problem of the schedule.
- `mor` (Spark, Iceberg's SQL catalog `local`): appends, and merge-on-read MERGE, UPDATE and DELETE;
- `cdc` (Spark, `local`): appends, and upserts as Flink commits them (one RowDelta: an equality delete of the
  keys and a data file of their new versions, tests/cdc.py's recipe);
- `stream` (pyiceberg, lakewarden's own REST catalog `lake`, so server faults hit its commits): appends and
  copy-on-write deletes (pyiceberg writes no delete files).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession

Rows = dict[int, str]
ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


class Writers:
    """The schedule's tables, their models and the writers' threads. `problem` and `count` report into the
    schedule's outcome; a table that does not answer is read again for up to `answer_within` seconds."""

    def __init__(
        self,
        spark: SparkSession,
        rest: RestCatalog,
        ns: str,
        seed: int,
        ops: int,
        problem: Callable[[str], None],
        count: Callable[[str], None],
        answer_within: float,
    ) -> None:
        self.spark = spark
        self.rest = rest
        self.ns = ns
        self.seed = seed
        self.ops = ops
        self.problem = problem
        self.count = count
        self.answer_within = answer_within
        self.models: dict[str, Rows] = {}
        self.locations: dict[str, str] = {}  # as the table's metadata names it (a path or a URI)

    def create(self, properties: dict[str, str]) -> None:
        text = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS local.{self.ns}")
        for name in ("mor", "cdc"):
            table = f"local.{self.ns}.{name}"
            self.spark.sql(f"CREATE TABLE {table} (id BIGINT NOT NULL, v STRING) USING iceberg TBLPROPERTIES ({text})")
            location = self.spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()
            assert location is not None
            self.locations[table] = str(location[1])
            self.models[table] = {}
        self.rest.create_namespace(self.ns)
        stream = self.rest.create_table(
            f"{self.ns}.stream", ARROW_SCHEMA, properties={**properties, "write.delete.mode": "copy-on-write"}
        )
        self.locations[f"lake.{self.ns}.stream"] = stream.location()
        self.models[f"lake.{self.ns}.stream"] = {}

    def threads(self) -> list[threading.Thread]:
        """One thread a writer, not started; each runs its `ops` operations with short random pauses."""
        return [
            threading.Thread(target=self._write, args=(name, op), name=f"chaos-{name}")
            for name, op in (("mor", self._mor_op), ("cdc", self._cdc_op), ("stream", self._stream_op))
        ]

    def rows(self, table: str) -> Rows:
        """What the table holds now, read as its writer reads it."""
        if table.startswith("lake."):
            read = self.rest.load_table(table.removeprefix("lake.")).scan().to_arrow()
            return dict(zip(read["id"].to_pylist(), read["v"].to_pylist(), strict=True))
        return {int(r[0]): str(r[1]) for r in self.spark.sql(f"SELECT id, v FROM {table}").collect()}

    def _write(self, name: str, op: Callable[[random.Random, int], None]) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        for number in range(self.ops):
            try:
                op(rng, number)
            except Exception as exc:  # a writer that cannot even resolve its operation: the schedule fails
                self.problem(f"{name} op {number}: {type(exc).__name__}: {str(exc)[:300]}")
                return
            time.sleep(rng.uniform(0.0, 1.0))

    def _apply(self, table: str, after: Rows, attempt: Callable[[], object]) -> None:
        """Runs one operation whose effect on the model is `after`: if it raised, the table tells whether it
        applied (all of it) or not (none of it); anything else is a problem."""
        before = self.models[table]
        try:
            attempt()
        except Exception as exc:
            self.count("raised")
            found = self._read_until_answered(table)
            if found == after:
                self.models[table] = after
                self.count("applied")
            elif found == before:
                self.count("not applied")
            else:
                self.problem(
                    f"{table}: an operation that raised ({type(exc).__name__}) half applied: {diff(after, found)}"
                )
                self.models[table] = found  # go on from what is there
            return
        self.models[table] = after
        self.count("applied")

    def _read_until_answered(self, table: str) -> Rows:
        deadline = time.monotonic() + self.answer_within
        while True:
            try:
                return self.rows(table)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _fresh(
        self, table: str, rng: random.Random, number: int, tag: str, sizes: tuple[int, int]
    ) -> tuple[range, Rows]:
        """Between `sizes` ids no operation used yet (operation `number` owns number*1000 on), and the model
        once they are appended with value `tag`."""
        start = number * 1000
        ids = range(start, start + rng.randint(*sizes))
        return ids, {**self.models[table], **dict.fromkeys(ids, tag)}

    def _spark_append(self, table: str, rng: random.Random, number: int, tag: str) -> None:
        ids, after = self._fresh(table, rng, number, tag, (50, 400))
        sql = f"INSERT INTO {table} SELECT id, '{tag}' FROM range({ids.start}, {ids.stop})"
        self._apply(table, after, lambda: self.spark.sql(sql).collect())

    # ---- the writers' operations
    def _mor_op(self, rng: random.Random, number: int) -> None:
        table = f"local.{self.ns}.mor"
        rows, tag = self.models[table], f"m{number}"
        kind = "append" if number < 2 or not rows else rng.choice(["append", "append", "update", "delete", "merge"])
        if kind == "append":
            self._spark_append(table, rng, number, tag)
            return
        after = dict(rows)
        if kind == "update":
            modulus, rest = rng.randint(2, 7), rng.randint(0, 1)
            after.update({k: tag for k in rows if k % modulus == rest})
            sql = f"UPDATE {table} SET v = '{tag}' WHERE id % {modulus} = {rest}"
        elif kind == "delete":
            modulus, rest = rng.randint(5, 11), rng.randint(0, 4)
            after = {k: v for k, v in rows.items() if k % modulus != rest}
            sql = f"DELETE FROM {table} WHERE id % {modulus} = {rest}"
        else:  # some of the ids exist (updated), some are new (inserted)
            # ids stay >= 0: SQL's % keeps the sign of a negative id, Python's does not (the model uses Python's)
            start = max(0, rng.choice(sorted(rows)) - rng.randint(0, 50))
            count = rng.randint(20, 200)
            after.update(dict.fromkeys(range(start, start + count), tag))
            sql = (
                f"MERGE INTO {table} t USING (SELECT id, '{tag}' AS v FROM range({start}, {start + count})) s "
                "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *"
            )
        self._apply(table, after, lambda: self.spark.sql(sql).collect())

    def _cdc_op(self, rng: random.Random, number: int) -> None:
        table = f"local.{self.ns}.cdc"
        rows, tag = self.models[table], f"c{number}"
        if number < 2 or not rows or rng.random() < 0.3:
            self._spark_append(table, rng, number, tag)
            return
        existing = rng.sample(sorted(rows), min(len(rows), rng.randint(5, 60)))
        fresh = [number * 1000 + 500 + i for i in range(rng.randint(0, 20))]
        keys = sorted(set(existing) | set(fresh))
        self._apply(table, {**rows, **dict.fromkeys(keys, tag)}, lambda: self._upsert(table, keys, tag))

    def _upsert(self, table: str, keys: list[int], tag: str) -> None:
        """As a Flink upsert sink commits: one RowDelta adding an equality delete of the keys and a data file of
        their new versions (same sequence number, so the delete does not hide them). Both files are written
        through the table's own FileIO, wherever the table lives."""
        spark = self.spark
        jvm: Any = spark._jvm
        java = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
        io, spec = java.io(), java.spec()
        data_dir = str(java.location()).rstrip("/") + "/data"
        ids = pa.array(keys, pa.int64())
        key_field = pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"})
        value_field = pa.field("v", pa.string(), metadata={b"PARQUET:field_id": b"2"})
        deletes = f"{data_dir}/eq-{uuid.uuid4().hex}.parquet"
        deletes_size = _put(io, deletes, pa.table([ids], pa.schema([key_field])))
        data = f"{data_dir}/up-{uuid.uuid4().hex}.parquet"
        data_size = _put(io, data, pa.table([ids, pa.array([tag] * len(keys))], pa.schema([key_field, value_field])))
        gateway: Any = spark.sparkContext._gateway
        field_ids = gateway.new_array(jvm.int, 1)
        field_ids[0] = 1
        delete_file = (
            jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(spec)
            .ofEqualityDeletes(field_ids)
            .withPath(deletes)
            .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .withFileSizeInBytes(deletes_size)
            .withRecordCount(len(keys))
            .build()
        )
        metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
            io.newInputFile(data), jvm.org.apache.iceberg.MetricsConfig.forTable(java)
        )
        data_file = (
            jvm.org.apache.iceberg.DataFiles.builder(spec)
            .withPath(data)
            .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .withFileSizeInBytes(data_size)
            .withMetrics(metrics)
            .build()
        )
        java.newRowDelta().addRows(data_file).addDeletes(delete_file).commit()

    def _stream_op(self, rng: random.Random, number: int) -> None:
        table = f"lake.{self.ns}.stream"
        rows, tag = self.models[table], f"s{number}"
        name = table.removeprefix("lake.")
        if number < 2 or not rows or rng.random() < 0.75:
            ids, after = self._fresh(table, rng, number, tag, (10, 300))
            batch = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([tag] * len(ids))}, ARROW_SCHEMA)

            def attempt() -> None:
                self.rest.load_table(name).append(batch)

        else:  # copy-on-write: the files holding the range are rewritten without it
            low = rng.choice(sorted(rows))
            high = low + rng.randint(10, 200)
            after = {k: v for k, v in rows.items() if not low <= k < high}

            def attempt() -> None:
                self.rest.load_table(name).delete(f"id >= {low} and id < {high}")

        self._apply(table, after, attempt)  # a 409 (lost race) resolves as not applied


def _put(io: Any, location: str, rows: pa.Table) -> int:
    """Writes `rows` as one Parquet file at `location` through an Iceberg FileIO (Java); its size."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    data = sink.getvalue().to_pybytes()
    out = io.newOutputFile(location).create()
    try:
        out.write(bytearray(data))
    finally:
        out.close()
    return len(data)


def local_path(location: str) -> str:
    """A path of the local file system from a location (`file:/…`, `file:///…` or a plain path)."""
    return "/" + location.removeprefix("file:").lstrip("/")


def diff(expected: Rows, found: Rows) -> str:
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    changed = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    parts = [
        f"{len(missing)} missing (e.g. {missing[:3]})" if missing else "",
        f"{len(extra)} unexpected (e.g. {extra[:3]})" if extra else "",
        f"{len(changed)} with another value (e.g. {[(k, expected[k], found[k]) for k in changed[:3]]})"
        if changed
        else "",
    ]
    return "; ".join(p for p in parts if p) or "the same ids and values"
