"""Writes Paimon tables with pypaimon, Paimon's own Python library, in the interpreter of `.venv-paimon` (bin/test
makes it: pypaimon pins a pyarrow, fsspec and cachetools older than pyiceberg's, so it cannot share lakewarden's
environment). Run as `python tests/paimon_writer.py <warehouse> <plan.json>`; the plan is a list of steps:

    {"create": "db.t", "columns": {"id": "bigint", ...}, "partition_keys": [...], "primary_keys": [...],
     "options": {...}}
    {"write": "db.t", "rows": {"id": [...], ...}}           one commit
    {"add_column": "db.t", "name": "c", "type": "string"}  a schema change
    {"tag": "db.t", "name": "t1"}                           a tag of the latest snapshot

It prints, as JSON, each table's rows as pypaimon reads them back (sorted), so a test can compare.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa
from pypaimon import CatalogFactory, Schema
from pypaimon.schema.data_types import AtomicType
from pypaimon.schema.schema_change import SchemaChange

TYPES = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string(), "double": pa.float64(), "date": pa.date32()}


def run(warehouse: str, steps: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    catalog = CatalogFactory.create({"warehouse": warehouse})
    touched: list[str] = []
    for step in steps:
        if "create" in step:
            name = step["create"]
            catalog.create_database(name.split(".")[0], True)
            fields = [(k, TYPES[v]) for k, v in step["columns"].items()]
            arrow = pa.schema([pa.field(k, t, nullable=k not in step.get("primary_keys", [])) for k, t in fields])
            schema = Schema.from_pyarrow_schema(
                arrow,
                partition_keys=step.get("partition_keys") or None,
                primary_keys=step.get("primary_keys") or None,
                options=step.get("options") or {},
            )
            catalog.create_table(name, schema, False)
            touched.append(name)
        elif "write" in step:
            table = catalog.get_table(step["write"])
            builder = table.new_batch_write_builder()
            writer, commit = builder.new_write(), builder.new_commit()
            columns = {f.name: f.type for f in table.table_schema.fields}
            arrow_schema = _arrow_schema(table)
            rows = step["rows"]
            writer.write_arrow(
                pa.table(
                    {k: rows.get(k, [None] * len(next(iter(rows.values())))) for k in columns}, schema=arrow_schema
                )
            )
            commit.commit(writer.prepare_commit())
            writer.close()
            commit.close()
        elif "add_column" in step:
            change = SchemaChange.add_column(step["name"], AtomicType(step["type"].upper()))
            catalog.alter_table(step["add_column"], [change], False)
        elif "tag" in step:
            catalog.get_table(step["tag"]).create_tag(step["name"])
    out = {}
    for name in touched:
        table = catalog.get_table(name)
        read = table.new_read_builder()
        splits = read.new_scan().plan().splits()
        rows = read.new_read().to_arrow(splits).to_pylist()
        out[name] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return out


def _arrow_schema(table: Any) -> pa.Schema:
    from pypaimon.schema.data_types import PyarrowFieldParser

    return PyarrowFieldParser.from_paimon_schema(table.table_schema.fields)


if __name__ == "__main__":
    with open(sys.argv[2], encoding="utf-8") as plan:
        print(json.dumps(run(sys.argv[1], json.load(plan)), default=str))
