"""The tests' writer of other formats' tables: a Spark application of its own whose session carries Hudi's and
Paimon's engines (the pytest process's shared session is Iceberg's alone), writing with their Spark writers as a
user's job does. It takes one JSON command per line on stdin and answers each with one line on stdout, `ANSWER `
and JSON (the JVM prints to the same stdout now and then):

- `{"op": "write", "path", "name", "rows": [[id, value, ts, part], ...], "options": {...}}`: an upsert of the
  rows into the Hudi table at `path` (created on the first write), with Hudi's write options;
- `{"op": "read", "path"}`: the Hudi table's rows as a query reads them now, sorted;
- `{"op": "sql", "catalogs": {name: warehouse}, "statements": [...]}`: Spark SQL statements, with Paimon
  catalogs of those names over those warehouses; answers the last statement's rows (values as JSON has them,
  others as text);
- `{"op": "stop"}`.

Run as `python -m tests.engine_writer` (tests/engine_jobs.py starts and talks to it)."""

from __future__ import annotations

import json
import sys
from typing import Any

from lakewarden.spark.session import build_spark_session

SCHEMA = "id INT, v STRING, ts INT, part STRING"
ANSWER = "ANSWER "


def _options(name: str, extra: dict[str, str]) -> dict[str, str]:
    return {
        "hoodie.table.name": name,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.operation": "upsert",
        **extra,
    }


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def main() -> None:
    spark = build_spark_session(app_name="tests-engine-writer", driver_memory="1g", engines=("hudi", "paimon"))
    print(ANSWER + json.dumps({"ok": True}), flush=True)
    for line in sys.stdin:
        command: dict[str, Any] = json.loads(line)
        try:
            if command["op"] == "stop":
                break
            if command["op"] == "write":
                rows = [tuple(row) for row in command["rows"]]
                frame = spark.createDataFrame(rows, SCHEMA)
                writer = frame.write.format("hudi").options(**_options(command["name"], command.get("options", {})))
                writer.mode("append").save(command["path"])
                answer: dict[str, Any] = {"ok": True}
            elif command["op"] == "read":
                found = spark.read.format("hudi").load(command["path"]).select("id", "v", "ts", "part")
                answer = {"ok": True, "rows": sorted([list(r) for r in found.collect()])}
            elif command["op"] == "sql":
                for name, warehouse in command.get("catalogs", {}).items():
                    spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.paimon.spark.SparkCatalog")
                    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", warehouse)
                last: list[Any] = []
                for statement in command["statements"]:
                    last = spark.sql(statement).collect()
                answer = {"ok": True, "rows": sorted([[_plain(v) for v in r] for r in last], key=str)}
            else:
                answer = {"ok": False, "error": f"unknown op {command['op']!r}"}
        except Exception as exc:  # the test reads the error; the writer goes on
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000]}
        print(ANSWER + json.dumps(answer), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
