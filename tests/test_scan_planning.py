"""Server-side scan planning (`…/plan`, `…/tasks`) against pyiceberg's and Iceberg Java's own planning: the same
files for the same filter, the same delete files for each, and the same rows read."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

from tests.cdc import equality_delete, java_table
from tests.servers import ServerProcess, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "cat", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "v", DoubleType(), required=False),
    NestedField(5, "s", StringType(), required=False),
    NestedField(6, "g", LongType(), required=False),
)
START = dt.datetime(2026, 1, 1)
FILTERS = [  # pyiceberg's filter syntax
    "cat = 'b'",
    "cat != 'b'",
    "cat in ('a', 'c')",
    "id > 450",
    "id < 40",
    "cat = 'a' and id >= 300",
    "cat = 'c' or id < 10",
    "not cat = 'a'",
    "s is null",
    "s is not null",
    "v is nan",
    "s like 'x1%'",
    "ts >= '2026-01-09T00:00:00'",
    "id = 123456",  # nothing
    "g = 1",  # the evolved spec's field: pruned by partition there, by metrics in the first spec's files
    "g = 0 and cat = 'b'",
]


def batch(start: int, count: int, day: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array(["abc"[i % 3] for i in ids]),
            "ts": pa.array([START + dt.timedelta(days=day, seconds=i) for i in ids], pa.timestamp("us")),
            "v": pa.array([float("nan") if i % 17 == 0 else i / 3 for i in ids], pa.float64()),
            "s": pa.array([None if i % 5 == 0 else f"x{i}" for i in ids]),
            "g": pa.array([i % 2 for i in ids], pa.int64()),
        }
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with started_server(tmp_path_factory.mktemp("planning")) as process:
        clients(process)[0].create_namespace("db")
        yield process


def clients(server: ServerProcess) -> tuple[RestCatalog, RestCatalog]:
    """The same catalog planned by pyiceberg itself and by the server."""
    local = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    remote = RestCatalog(
        "lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token, **{"scan-planning-mode": "server"}
    )
    return local, remote


def files(scan: Any) -> list[str]:
    return sorted(task.file.file_path for task in scan.plan_files())


def rows(scan: Any) -> list[tuple[Any, ...]]:
    def comparable(value: Any) -> Any:
        return "NaN" if isinstance(value, float) and value != value else value  # NaN equals nothing

    return sorted(tuple(comparable(v) for v in r.values()) for r in scan.to_arrow().to_pylist())


def test_server_planning_matches_pyiceberg_on_partitioned_and_evolved_tables(server: ServerProcess) -> None:
    local, remote = clients(server)
    # tiny splits: every file beyond the first is a plan task of its own, fetched from /tasks
    table = local.create_table(
        "db.evolved",
        SCHEMA,
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat")),
        properties={"read.split.target-size": "1", "read.split.open-file-cost": "1"},
    )
    for day in range(6):
        table.append(batch(day * 50, 50, day))
    with table.update_spec() as spec:  # a second spec: files of both are pruned each by their own
        spec.add_identity("g")
    for day in range(6, 10):
        table.append(batch(day * 50, 50, day))
    assert len({task.file.spec_id for task in table.scan().plan_files()}) == 2

    served = remote.load_table("db.evolved")
    assert served.scan()._should_use_server_side_planning()
    for row_filter in FILTERS:
        mine, theirs = served.scan(row_filter=row_filter), local.load_table("db.evolved").scan(row_filter=row_filter)
        assert files(mine) == files(theirs), row_filter
        assert rows(mine) == rows(theirs), row_filter
    # a time-travel scan plans the snapshot asked for
    first = table.snapshots()[2].snapshot_id
    assert files(served.scan(snapshot_id=first)) == files(table.scan(snapshot_id=first))
    assert len(files(served.scan(snapshot_id=first))) == 9  # 3 appends of 3 partitions


def test_answers_carry_residuals_deletes_once_and_plan_tasks(server: ServerProcess) -> None:
    local, _ = clients(server)
    table = local.create_table(
        "db.shape", SCHEMA, partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat"))
    )
    table.append(batch(0, 30, 0))
    url = f"{server.url}/iceberg/v1/lake/namespaces/db/tables/shape/plan"
    answer = server.http.post(
        url,
        json={
            "filter": {
                "type": "and",
                "left": {"type": "eq", "term": "cat", "value": "a"},
                "right": {"type": "gt", "term": "id", "value": 3},
            },
            "stats-fields": ["id"],
        },
    ).json()
    assert answer["status"] == "completed" and "plan-tasks" not in answer
    (task,) = answer["file-scan-tasks"]
    assert task["data-file"]["partition"] == ["a"] and task["data-file"]["file-format"] == "parquet"
    # the partition part of the filter is settled for this file: what is left is the id test
    assert task["residual-filter"] == {"type": "gt", "term": "id", "value": 3}
    assert task["data-file"]["lower-bounds"] == {"keys": [1], "values": [0]}  # only the stats asked for
    assert "upper-bounds" in task["data-file"] and "null-value-counts" in task["data-file"]
    unfiltered = server.http.post(url, json={}).json()
    # no filter, no residual: what a client applies without one, the scan's filter, is `true` as well
    assert all("residual-filter" not in t for t in unfiltered["file-scan-tasks"])
    everything = server.http.post(url, json={"filter": True}).json()
    assert all("residual-filter" not in t for t in everything["file-scan-tasks"])
    # with a filter, even a residual of `true` is given (without it the client would apply the whole filter)
    by_partition = server.http.post(url, json={"filter": {"type": "eq", "term": "cat", "value": "a"}}).json()
    assert [t["residual-filter"] for t in by_partition["file-scan-tasks"]] == [True]
    assert all("lower-bounds" not in t["data-file"] for t in unfiltered["file-scan-tasks"])
    # the same scan of the same snapshot again: answered from the cache of planning results
    metrics = server.http.get(f"{server.url}/metrics").text
    before = _sample(metrics, 'lakewarden_scan_planning_cache_lookups_total{cache="results",result="hit"}')
    assert server.http.post(url, json={}).json() == unfiltered
    metrics = server.http.get(f"{server.url}/metrics").text
    assert _sample(metrics, 'lakewarden_scan_planning_cache_lookups_total{cache="results",result="hit"}') == before + 1
    assert _sample(metrics, 'lakewarden_manifest_cache_lookups_total{part="entries",result="hit"}') >= 1
    assert (
        0
        < _sample(metrics, "lakewarden_manifest_cache_bytes")
        <= _sample(metrics, "lakewarden_manifest_cache_max_bytes")
    )
    # planning reads: the audit log, which records changes, holds none of these plans; the table's creation it does
    audited = [e["action"] for e in server.http.get(f"{server.url}/api/v1/audit", params={"limit": 1000}).json()]
    assert "POST /iceberg/v1/{prefix}/namespaces/{namespace}/tables" in audited
    assert not [a for a in audited if "/plan" in a or a.endswith("/tasks")], audited


def test_soft_affinity_gives_each_file_the_same_hosts_in_every_scan(server: ServerProcess) -> None:
    """lakewarden's extension: a reader that names its hosts gets a stable preference of hosts per file."""
    from pyiceberg.catalog.rest.scan_planning import PlanCompleted

    local, _ = clients(server)
    table = local.create_table("db.affine", SCHEMA, properties={"self-optimizing.enabled": "false"})
    for day in range(4):
        table.append(batch(day * 10, 10, day))
    url = f"{server.url}/iceberg/v1/lake/namespaces/db/tables/affine/plan"
    hosts = ["w1:7337", "w2:7337", "w3:7337"]

    def preferred(body: dict[str, Any]) -> dict[str, list[str]]:
        answer = server.http.post(url, json=body)
        assert answer.status_code == 200, answer.text
        PlanCompleted.model_validate(answer.json())  # a client that does not know the extension ignores it
        return {t["data-file"]["file-path"]: t["lakewarden-preferred-hosts"] for t in answer.json()["file-scan-tasks"]}

    first = preferred({"lakewarden-affinity": {"hosts": hosts, "replicas": 2}})
    assert len(first) == 4 and all(len(h) == 2 and set(h) <= set(hosts) for h in first.values())
    assert preferred({"lakewarden-affinity": {"hosts": hosts[::-1], "replicas": 2}}) == first
    filtered = preferred({"filter": {"type": "lt", "term": "id", "value": 20}, "lakewarden-affinity": {"hosts": hosts}})
    assert filtered and all(hosts == first[path][:1] for path, hosts in filtered.items())
    plain = server.http.post(url, json={}).json()["file-scan-tasks"]
    assert all("lakewarden-preferred-hosts" not in t for t in plain)  # no hint unless asked
    for bad, field in (({"hosts": []}, "lakewarden-affinity.hosts"), ({"hosts": ["a"], "replicas": 9}, "replicas")):
        refused = server.http.post(url, json={"lakewarden-affinity": bad})
        assert refused.status_code == 400 and field in refused.json()["error"]["message"], refused.text


def test_commits_are_read_ahead_so_the_first_plan_parses_nothing(server: ServerProcess) -> None:
    local, remote = clients(server)
    table = local.create_table("db.ahead", SCHEMA, properties={"self-optimizing.enabled": "false"})

    def sample(name: str) -> float:
        return _sample(server.http.get(f"{server.url}/metrics").text, name)

    parses = 'lakewarden_manifest_cache_lookups_total{part="entries",result="miss"}'  # by anyone, first parses
    read_ahead = sample("lakewarden_scan_planning_read_ahead_manifests_total")
    for day in range(3):
        table.append(batch(day * 10, 10, day))
    # the reader may still be busy with an earlier test's commits: wait for it, and for every parse, to be done.
    # The evaluator, woken by the same commits, may parse some of these manifests first (it reads a table's
    # files before it looks at its settings); the reader then reads ahead only the others, so it is asked to
    # have read at least one
    deadline = time.monotonic() + 60
    seen, steady_since = (-1.0, -1.0), time.monotonic()
    while True:
        now = (sample("lakewarden_scan_planning_read_ahead_manifests_total"), sample(parses))
        if now != seen:
            seen, steady_since = now, time.monotonic()
        if now[0] >= read_ahead + 1 and time.monotonic() - steady_since > 1.0:
            break
        assert time.monotonic() < deadline, "the commits' manifests were not read ahead"
        time.sleep(0.1)
    parsed = sample(parses)
    scan = remote.load_table("db.ahead").scan(row_filter="id < 15")
    assert files(scan) == files(local.load_table("db.ahead").scan(row_filter="id < 15"))
    assert sample(parses) == parsed


def _sample(metrics: str, name: str) -> float:
    line = next(line for line in metrics.splitlines() if line.startswith(name + " "))
    return float(line.rsplit(" ", 1)[1])


def test_bad_requests_name_what_is_wrong(server: ServerProcess) -> None:
    local, _ = clients(server)
    local.create_table("db.bad", SCHEMA).append(batch(0, 10, 0))
    url = f"{server.url}/iceberg/v1/lake/namespaces/db/tables/bad"

    def refused(body: dict[str, Any], field: str, status: int = 400) -> None:
        answer = server.http.post(f"{url}/plan", json=body)
        assert answer.status_code == status, answer.text
        assert field in answer.json()["error"]["message"], answer.text

    refused({"snapshot-id": 42}, "snapshot-id")
    refused({"filter": {"type": "eq", "term": "nope", "value": 1}}, "filter")
    refused({"filter": {"type": "eq", "term": "id"}}, "filter")
    refused({"filter": {"type": "frobnicate", "term": "id", "value": 1}}, "filter")
    refused({"stats-fields": ["nope"]}, "stats-fields")
    refused({"select": ["id", "nope"]}, "select")
    refused({"start-snapshot-id": 1}, "end-snapshot-id")
    missing = server.http.post(f"{server.url}/iceberg/v1/lake/namespaces/db/tables/gone/plan", json={})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NoSuchTableException"
    task = server.http.post(f"{url}/tasks", json={"plan-task": "nope-1"})
    assert task.status_code == 404 and task.json()["error"]["type"] == "NoSuchPlanTaskException"
    plan = server.http.get(f"{url}/plan/nope")
    assert plan.status_code == 404 and plan.json()["error"]["type"] == "NoSuchPlanIdException"


def test_an_incremental_scan_reads_what_appends_added(server: ServerProcess) -> None:
    local, _ = clients(server)
    table = local.create_table("db.incremental", SCHEMA)
    added: list[set[str]] = []
    for day in range(4):
        before = set(files(table.scan()))
        table.append(batch(day * 10, 10, day))
        added.append(set(files(table.scan())) - before)
    table.delete("id < 5")  # not an append: what it wrote is not read by an incremental scan
    before = set(files(table.scan()))
    table.append(batch(100, 10, 5))
    added.append(set(files(table.scan())) - before)
    snapshots = [s.snapshot_id for s in table.snapshots()]
    url = f"{server.url}/iceberg/v1/lake/namespaces/db/tables/incremental/plan"
    answer = server.http.post(url, json={"start-snapshot-id": snapshots[1], "end-snapshot-id": snapshots[-1]}).json()
    read = {t["data-file"]["file-path"] for t in answer["file-scan-tasks"]}
    assert read == added[2] | added[3] | added[4] and len(read) == 3
    backwards = {"start-snapshot-id": snapshots[-1], "end-snapshot-id": snapshots[1]}
    refused = server.http.post(url, json=backwards)
    assert refused.status_code == 400 and "start-snapshot-id" in refused.json()["error"]["message"]


@pytest.mark.spark
def test_delete_files_match_iceberg_java_planning(server: ServerProcess, spark: SparkSession) -> None:
    """Position deletes (v2), deletion vectors (v3) and equality deletes (Flink's way): for every data file,
    the delete files the server names are those Iceberg Java's own scan planning applies."""
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import configure_catalogs

    created = server.api().post("/catalogs", json={"name": "planning", "type": "internal"})
    assert created.status_code == 201, created.text
    configure_catalogs(
        spark, [CatalogSpec("planning", "internal", {"uri": f"{server.url}/iceberg", "token": server.token})]
    )
    spark.sql("CREATE NAMESPACE planning.db")
    mor = "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'"
    tables = {"v2": 2, "v3": 3, "eq": 2}  # position deletes, deletion vectors, and equality deletes too
    for table, version in tables.items():
        name = f"planning.db.{table}"
        spark.sql(
            f"CREATE TABLE {name} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
            f"TBLPROPERTIES ('format-version'='{version}', {mor})"
        )
        for start in (0, 100, 200):
            spark.sql(f"INSERT INTO {name} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range({start}, {start + 100})")
        spark.sql(f"DELETE FROM {name} WHERE id % 7 = 0")
        spark.sql(f"DELETE FROM {name} WHERE id % 11 = 0")
    equality_delete(spark, "planning.db.eq", {"id": [1, 3, 5]}, "cat=b")
    spark.sql("INSERT INTO planning.db.eq SELECT id, 'b' FROM range(1000, 1010)")  # newer: no delete applies

    for table in tables:
        expected = java_plan(spark, f"planning.db.{table}")
        answer = server.http.post(f"{server.url}/iceberg/v1/planning/namespaces/db/tables/{table}/plan", json={})
        listed = [(d["file-path"], d.get("content-offset")) for d in answer.json().get("delete-files", [])]
        assert len(listed) == len(set(listed))  # each delete file (or deletion vector) listed once per answer
        deletes = [path for path, _ in listed]
        served = {
            t["data-file"]["file-path"]: sorted(deletes[i] for i in t.get("delete-file-references", []))
            for t in answer.json()["file-scan-tasks"]
        }
        assert served == expected, table
        assert any(expected.values())
        kinds = {d["content"] for d in answer.json()["delete-files"]}
        assert kinds == ({"position-deletes", "equality-deletes"} if table == "eq" else {"position-deletes"})

    # pyiceberg reads through server planning what Spark reads, and what its own planning reads
    # (position deletes and deletion vectors; pyiceberg does not read equality deletes yet)
    def catalog(**mode: str) -> RestCatalog:
        return RestCatalog("planning", uri=f"{server.url}/iceberg", warehouse="planning", token=server.token, **mode)

    for table in ("v2", "v3"):
        served_ids = sorted(
            r["id"]
            for r in catalog(**{"scan-planning-mode": "server"}).load_table(f"db.{table}").scan().to_arrow().to_pylist()
        )
        assert served_ids == sorted(r[0] for r in spark.sql(f"SELECT id FROM planning.db.{table}").collect())
        if table == "v2":
            local_ids = sorted(r["id"] for r in catalog().load_table("db.v2").scan().to_arrow().to_pylist())
            assert served_ids == local_ids

    # the evaluator's records (read from the same cache, with v3's fields) name the one data file each
    # deletion vector applies to, as Java's planning applies it
    from lakewarden.metadata.files import snapshot_files
    from lakewarden.metadata.manifest_cache import ManifestCache

    vectors = snapshot_files(catalog().load_table("db.v3"), ManifestCache()).deletes
    expected = java_plan(spark, "planning.db.v3")
    assert vectors and all(d.path in expected[str(d.referenced_data_file)] for d in vectors)


def java_plan(spark: SparkSession, name: str) -> dict[str, list[str]]:
    """Iceberg Java's own planning of the table's current snapshot: each data file and its delete files."""
    table = java_table(spark, name)
    planned: dict[str, list[str]] = {}
    tasks = table.newScan().planFiles()
    iterator = tasks.iterator()
    while iterator.hasNext():
        task = iterator.next()
        planned[str(task.file().location())] = sorted(str(d.location()) for d in task.deletes())
    tasks.close()
    return planned


def test_async_plans_are_polled_fetched_cancelled_and_expire(tmp_path: Path) -> None:
    settings = "  scan-planning: {sync-timeout: 0s, plan-ttl: 2s}\n"
    with started_server(tmp_path, extra=settings) as server:
        local, _ = clients(server)
        local.create_namespace("db")
        table = local.create_table(
            "db.t", SCHEMA, properties={"read.split.target-size": "1", "read.split.open-file-cost": "1"}
        )
        for day in range(3):
            table.append(batch(day * 10, 10, day))
        url = f"{server.url}/iceberg/v1/lake/namespaces/db/tables/t"

        def poll(plan_id: str) -> dict[str, Any]:
            deadline = time.monotonic() + 30
            while True:
                answer: dict[str, Any] = server.http.get(f"{url}/plan/{plan_id}").json()
                if answer["status"] != "submitted" or time.monotonic() > deadline:
                    return answer
                time.sleep(0.05)

        submitted = server.http.post(f"{url}/plan", json={}).json()
        assert submitted["status"] == "submitted" and "file-scan-tasks" not in submitted
        done = poll(submitted["plan-id"])
        assert done["status"] == "completed" and len(done["plan-tasks"]) == 2
        fetched = [server.http.post(f"{url}/tasks", json={"plan-task": t}).json() for t in done["plan-tasks"]]
        paths = {t["data-file"]["file-path"] for part in [done, *fetched] for t in part["file-scan-tasks"]}
        assert paths == {task.file.file_path for task in table.scan().plan_files()}
        # every plan task fetched: the plan's state is gone
        assert server.http.get(f"{url}/plan/{submitted['plan-id']}").status_code == 404

        cancelled = server.http.post(f"{url}/plan", json={}).json()["plan-id"]
        assert poll(cancelled)["status"] == "completed"
        assert server.http.delete(f"{url}/plan/{cancelled}").status_code == 204
        assert server.http.get(f"{url}/plan/{cancelled}").status_code == 404
        answer = server.http.post(f"{url}/tasks", json={"plan-task": f"{cancelled}-1"})
        assert answer.status_code == 404

        left = server.http.post(f"{url}/plan", json={}).json()["plan-id"]
        assert poll(left)["status"] == "completed"
        time.sleep(2.5)  # not used for longer than plan-ttl: freed
        assert server.http.get(f"{url}/plan/{left}").status_code == 404

        # a restarted server warms its manifest cache with the tables committed last: the first plan parses
        # nothing (and so does the evaluator's look at the table)
        server.stop()
        server.start()

        def sample(name: str) -> float:
            return _sample(server.http.get(f"{server.url}/metrics").text, name)

        deadline = time.monotonic() + 30
        while sample("lakewarden_scan_planning_read_ahead_manifests_total") < 3:
            assert time.monotonic() < deadline, "the cache was not warmed at start"
            time.sleep(0.1)
        parsed = sample('lakewarden_manifest_cache_lookups_total{part="entries",result="miss"}')
        answer = server.http.post(f"{url}/plan", json={}).json()
        assert answer["status"] == "submitted"
        assert poll(answer["plan-id"])["status"] == "completed"
        assert sample('lakewarden_manifest_cache_lookups_total{part="entries",result="miss"}') == parsed
        assert "warmed the manifest cache: 3 manifests of 1 tables" in server.log.read_text()
