"""Runs a real Flink job with PyFlink, in the interpreter of `.venv-flink` (bin/test makes it from
tests/flink-writer.lock: PyFlink pins a numpy, pandas and pyarrow older than lakewarden's, so it cannot share
lakewarden's environment). Run as `python tests/flink_writer.py <job.json>`, with Hadoop's client on
HADOOP_CLASSPATH as Iceberg's Flink documentation asks. The job, as a team's streaming upserts are written:

    a checkpointed sequence source (0 .. rows-1, `rate` rows a second), each row an upsert of key `seq % keys`
    with value `seq`, into `table` of an Iceberg REST catalog, through Iceberg's Flink runtime (`jars`):
    equality deletes on the primary key, one commit per checkpoint (every `interval`); beside it every `seq`
    appended to `<table>_log`, so that a row lost or written twice across a restore shows.

The job json: uri, warehouse, token, jars, table, properties (the table's, when the job creates it), rows, keys,
rate, interval, checkpoints (a directory: checkpoints are retained there) and restore (a checkpoint to start from,
or null). It prints `JOB <id>` once the job runs and `DONE` when its source is exhausted and the last checkpoint
committed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyflink.table import EnvironmentSettings, TableEnvironment


def run(job: dict[str, Any]) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config().get_configuration()
    conf.set_string("pipeline.jars", ";".join(f"file://{jar}" for jar in job["jars"]))
    conf.set_string("parallelism.default", "1")
    conf.set_string("restart-strategy.type", "none")  # a failure ends the job: the test sees it
    conf.set_string("execution.checkpointing.interval", job["interval"])
    conf.set_string("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION")
    conf.set_string("state.checkpoints.dir", f"file://{job['checkpoints']}")
    conf.set_string("rest.bind-address", "127.0.0.1")
    conf.set_string("rest.address", "127.0.0.1")
    conf.set_string("taskmanager.host", "127.0.0.1")
    if job.get("restore"):
        conf.set_string("execution.savepoint.path", f"file://{job['restore']}")
    env.execute_sql(
        "CREATE CATALOG lake WITH ('type'='iceberg', 'catalog-type'='rest', 'rest.auth.type'='oauth2', "
        f"'uri'='{job['uri']}', 'warehouse'='{job['warehouse']}', 'token'='{job['token']}')"
    )
    namespace, table = job["table"].split(".")
    env.execute_sql(f"CREATE DATABASE IF NOT EXISTS lake.{namespace}")
    properties = ", ".join(f"'{k}'='{v}'" for k, v in job["properties"].items())
    env.execute_sql(
        f"CREATE TABLE IF NOT EXISTS lake.{namespace}.{table} (id BIGINT, v BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
        f"WITH ('format-version'='2', 'write.upsert.enabled'='true'{', ' + properties if properties else ''})"
    )
    env.execute_sql(
        "CREATE TEMPORARY TABLE source (seq BIGINT) WITH ('connector'='datagen', 'fields.seq.kind'='sequence', "
        f"'fields.seq.start'='0', 'fields.seq.end'='{job['rows'] - 1}', 'rows-per-second'='{job['rate']}')"
    )
    env.execute_sql(  # left alone by lakewarden: the record the test checks the table against
        f"CREATE TABLE IF NOT EXISTS lake.{namespace}.{table}_log (seq BIGINT) "
        "WITH ('format-version'='2', 'self-optimizing.enabled'='false', 'table-expire.enabled'='false')"
    )
    statements = env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO lake.{namespace}.{table} SELECT seq % {job['keys']}, seq FROM source")
    statements.add_insert_sql(f"INSERT INTO lake.{namespace}.{table}_log SELECT seq FROM source")
    result = statements.execute()
    client = result.get_job_client()
    print(f"JOB {client.get_job_id() if client is not None else ''}", flush=True)
    result.wait()
    print("DONE", flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as described:
        run(json.load(described))
