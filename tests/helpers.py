"""Helpers shared by the end-to-end tests: waiting, checksums, a lake on a server, an optimizer thread."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import TaskSpec
from lakewarden.optimizer.app import Optimizer
from lakewarden.protocol.inputs import OptimizingInput, PartitionRef
from lakewarden.protocol.messages import Assignment
from lakewarden.spark.session import configure_catalogs
from tests.servers import ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# small files pile up into a minor optimizing quickly; deletes and updates are merge-on-read
PROPS = ", ".join(
    f"'{k}'='{v}'"
    for k, v in {
        "self-optimizing.minor.trigger.file-count": "3",
        "self-optimizing.min-plan-interval": "0",
        "write.delete.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.merge.mode": "merge-on-read",
    }.items()
)


def wait_for(what: str, check: Any, timeout: float = 120.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def create_by_cat(spark: SparkSession, table: str, properties: str) -> None:
    """An Iceberg table of (id, cat, v) partitioned by cat, with `properties` (SQL: 'k'='v', ...)."""
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({properties})"
    )


def insert_ids(spark: SparkSession, table: str, start: int, rows: int) -> None:
    """Rows start..start+rows-1 of a create_by_cat table in one commit: even ids in cat=a, odd in b, one file each."""
    spark.sql(
        f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ id, IF(id % 2 = 0, 'a', 'b'), 'v' "
        f"FROM range({start}, {start + rows})"
    )


def checksum(spark: SparkSession, table: str, columns: str = "id, cat, v") -> tuple[int, int]:
    row = spark.sql(f"SELECT count(*), sum(xxhash64({columns})) FROM {table}").first()
    assert row is not None
    return int(row[0]), int(row[1])


def open_lake(server: ServerProcess, spark: SparkSession) -> httpx.Client:
    """An API client of the server, and Spark on its embedded catalogs `local` (sql) and `lake` (internal,
    lakewarden's REST catalog), each with a namespace `db`."""
    api = server.api()
    catalogs = {c["name"]: c for c in api.get("/catalogs").json()}
    lake = CatalogSpec("lake", "internal", {**catalogs["lake"]["properties"], "token": server.token})
    configure_catalogs(spark, [CatalogSpec("local", "sql", catalogs["local"]["properties"]), lake])
    spark.sql("CREATE NAMESPACE local.db")
    spark.sql("CREATE NAMESPACE lake.db")
    return api


@contextmanager
def running_optimizer(server: ServerProcess, spark: SparkSession, parallelism: int = 1) -> Iterator[Optimizer]:
    """A real optimizer on the test session's Spark, in a thread, stopped (tasks finished) on exit."""
    optimizer = Optimizer(server.url, "default", parallelism=parallelism, spark=spark, credential=server.token)
    runner = threading.Thread(target=optimizer.run, daemon=True)
    runner.start()
    try:
        yield optimizer
    finally:
        optimizer.stop.set()
        runner.join(120)


def table_status(api: httpx.Client, table: str, status: str) -> dict[str, Any]:
    """Wait until local.db.<table> has the status; returns the table."""

    def check() -> dict[str, Any] | None:
        shown = dict(api.get(f"/tables/local/db/{table}").json())
        return shown if shown["status"] == status else None

    return dict(wait_for(f"{table} {status}", check))


def minor_task(path: str = "", values: list[Any] | None = None, cost_bytes: int = 1) -> TaskSpec:
    """A planned minor-optimizing task of db.t on one partition, for tests that drive the protocol by hand."""
    partition = PartitionRef(spec_id=0, path=path, values=values or [])
    work = OptimizingInput(table="db.t", snapshot_id=1, type="minor", partitions=[partition], filter='"true"')
    return TaskSpec("minor", work, [partition.model_dump()], cost_bytes)


def spark_sql_catalog(spark: SparkSession, tmp_path: Path, name: str) -> CatalogSpec:
    """A fresh Iceberg SQL catalog `name` with a namespace `db`, configured in Spark (for executor tests)."""
    from lakewarden.metadata.catalogs import initialize_catalog

    spec = CatalogSpec(name, "sql", {"uri": f"sqlite:///{tmp_path}/{name}.db", "warehouse": str(tmp_path / name)})
    initialize_catalog(spec)
    configure_catalogs(spark, [spec])
    spark.sql(f"CREATE NAMESPACE {name}.db")
    return spec


def assignment(spec: CatalogSpec, work: dict[str, Any], process_id: int = 1, task_id: int = 1) -> Assignment:
    """A task as poll hands it out, on a table of `spec`'s catalog."""
    catalog = {"name": spec.name, "type": spec.type, "properties": spec.properties}
    return Assignment.model_validate(
        {
            "process_id": process_id,
            "task_id": task_id,
            "attempt": 1,
            "type": "manual",
            "input": work,
            "catalog": catalog,
        }
    )


_PLANNED = itertools.count(1000)


def file_counts(spark: SparkSession, table: str) -> tuple[int, int]:
    """Data files and delete files (position, deletion vectors and equality) of the table now."""
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(f"SELECT content FROM {table}.files").collect()
    return sum(r[0] == 0 for r in rows), sum(r[0] != 0 for r in rows)


def planned_process(spec: CatalogSpec, table: str, full: bool = False) -> Any:
    """The table's self-optimizing process as the server would plan it (pyiceberg, through the catalog's own
    settings); `table` is `catalog.database.table`."""
    from lakewarden.domain.evaluator import OptimizingClock
    from lakewarden.domain.optimizing_config import OptimizingConfig
    from lakewarden.metadata.catalogs import open_catalog
    from lakewarden.metadata.files import snapshot_files
    from lakewarden.metadata.manifest_cache import ManifestCache
    from lakewarden.services.processes.self_optimizing import plan_process

    name = table.split(".", 1)[1]
    loaded = open_catalog(spec).load_table(tuple(name.split(".")))
    now = int(time.time() * 1000)
    clock = OptimizingClock(now, last_minor_ms=now, last_full_ms=0 if full else now)
    config = OptimizingConfig.of(loaded.properties)
    return plan_process(name, loaded, snapshot_files(loaded, ManifestCache()), config, clock)


def run_task(spark: SparkSession, spec: CatalogSpec, work: dict[str, Any], gate: Any = None) -> Any:
    """One task on the test session's Spark, as an optimizer runs it."""
    from lakewarden.optimizer.executor import execute_task

    if gate is None:
        return execute_task(spark, assignment(spec, work, next(_PLANNED), 1), "test")
    return execute_task(spark, assignment(spec, work, next(_PLANNED), 1), "test", gate=gate)


def optimize_table(spark: SparkSession, spec: CatalogSpec, table: str, full: bool = False) -> Any:
    """Plan the table and run every task, stage by stage; the plan."""
    planned = planned_process(spec, table, full)
    assert planned.tasks, f"nothing planned for {table}"
    for task in sorted(planned.tasks, key=lambda t: t.stage):
        run_task(spark, spec, task.input.model_dump(mode="json"))
    return planned


# a group that scales from zero within seconds of demand, and drains an optimizer idle for half a minute
FAST_DYNAMIC_ALLOCATION = {
    "dynamic-allocation.enabled": "true",
    "dynamic-allocation.max-parallelism": "2",
    "dynamic-allocation.scheduler-backlog-timeout": "1s",
    "dynamic-allocation.sustained-backlog-timeout": "2s",
    "dynamic-allocation.executor-idle-timeout": "30s",
    "dynamic-allocation.scale-down-cooldown": "1s",
}


def record_scans(db: Any, owner: tuple[str, str, str], count: int, files: int, at: Any = None) -> None:
    """`count` scans of the table by the engine `bi`, each planning `files` data files, one a minute from `at`
    (10 minutes ago unless given) back."""
    from datetime import timedelta

    from lakewarden.domain.reads import scan_report
    from lakewarden.store import reads as reads_store
    from lakewarden.store.database import utcnow

    latest = at if at is not None else utcnow() - timedelta(minutes=10)
    with db.write() as session:
        for i in range(count):
            report = scan_report({"result-data-files": {"value": files}}, 1, True, {}, "bi")
            reads_store.record_read(session, owner, report, latest - timedelta(minutes=i))


def executors(optimizer: dict[str, Any], everyone: bool = False) -> dict[str, dict[str, Any]]:
    """The optimizer's executors (and its driver) by id, from its application's own status API."""
    api = f"{optimizer['spark_ui_url']}/api/v1/applications/{optimizer['spark_application_id']}"
    # generous: on 2 busy cores the driver answers its UI slowly while it runs a rewrite
    listed = httpx.get(f"{api}/{'allexecutors' if everyone else 'executors'}", timeout=60).json()
    return {e["id"]: e for e in listed}
