"""Hudi's table services run by lakewarden, with Hudi's own code: tables written by Hudi's Spark datasource (a
writer of their own, tests/engine_writer.py), a `hudi` catalog over their warehouse, and a group whose optimizers
carry Hudi's engine. The verdict turns pending, an optimizer runs the service, the timeline shows its instant
completed, the verdict is healthy again and a query reads the same rows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakewarden.domain.hudi import COMPLETED
from lakewarden.metadata.hudi import read_timeline
from tests.engine_jobs import EngineWriter, engine_writer
from tests.helpers import wait_for
from tests.servers import FAST_EVALUATOR, started_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# the writer only writes and schedules its compactions (Hudi's async pattern): it compacts, cleans and archives
# nothing inline
# it keeps a metadata table (Hudi's default), so it and lakewarden's services commit under a lock (LOCK, which the
# catalog tells lakewarden too)
LOCK = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
    "hoodie.cleaner.policy.failed.writes": "LAZY",
}
ASYNC_WRITER = {
    **LOCK,
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
    "hoodie.compact.inline": "false",
    "hoodie.compact.schedule.inline": "true",
    "hoodie.compact.inline.max.delta.commits": "3",
    "hoodie.clean.automatic": "false",
    "hoodie.archive.automatic": "false",
}


# lakewarden runs every service of this one: its writer runs none (and keeps no metadata table, whose own
# compaction would hold back the archive of the table's timeline)
OWNED_WRITER = {
    "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
    "hoodie.parquet.small.file.limit": "0",
    "hoodie.clean.automatic": "false",
    "hoodie.archive.automatic": "false",
    "hoodie.metadata.enable": "false",
}


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineWriter]:
    with engine_writer(tmp_path_factory.mktemp("hudi-writer") / "writer.log") as running:
        yield running


def _instants(path: Path) -> list[Any]:
    return read_timeline(path)


def _processes(api: httpx.Client, table: str) -> list[dict[str, Any]]:
    """The table's processes, newest first (none while the explorer has not listed the table yet)."""
    answer = api.get("/processes", params={"table": table})
    return answer.json() if answer.status_code == 200 else []


def _idle(api: httpx.Client, catalog: str, name: str) -> dict[str, Any] | None:
    """The table once judged on its current timeline, idle, with no process running."""
    table: dict[str, Any] = api.get(f"/tables/{catalog}/default/{name}").json()
    evaluation = table.get("evaluation") or {}
    running = any(p["status"] == "running" for p in _processes(api, f"{catalog}.default.{name}"))
    fresh = evaluation.get("metadata_location") == table.get("metadata_location")
    return table if fresh and not running and table["status"] == "idle" else None


def _table(api: httpx.Client, name: str) -> dict[str, Any]:
    table: dict[str, Any] = api.get(f"/tables/hl/default/{name}").json()
    return table


def test_hudis_services_run_as_its_writers_let_and_the_tables_are_healthy_again(
    tmp_path: Path, writer: EngineWriter
) -> None:
    warehouse = tmp_path / "warehouse"
    events = warehouse / "events"
    orders = tmp_path / "owned" / "orders"
    for n in range(5):  # a compaction is scheduled after the third delta commit; two more follow it
        writer.write(events, "events", [(k, f"v{n}", n, f"p{k % 2}") for k in range(12)], ASYNC_WRITER)
    rows = writer.read(events)
    (requested,) = [i for i in _instants(events) if i.action == "compaction"]
    assert requested.state == "requested"

    (tmp_path / "server").mkdir()
    with started_server(tmp_path / "server", extra=FAST_EVALUATOR) as server:
        api = server.api()
        catalog = {
            "warehouse": str(warehouse),
            "table.self-optimizing.group": "hudi",
            "table.self-optimizing.min-plan-interval": "0",
            **{f"table.{k}": v for k, v in LOCK.items()},
        }
        # a group without Hudi's engine: judged, not pending, and the reason says what is missing
        group = {"name": "hudi", "container": "local", "properties": {"parallelism": "1"}}
        assert api.post("/resource-groups", json=group).status_code == 201
        added = api.post("/catalogs", json={"name": "hl", "type": "hudi", "properties": catalog})
        assert added.status_code == 201, added.text
        api.post("/catalogs/hl/refresh")
        judged = wait_for("a verdict", lambda: _table(api, "events").get("evaluation"), timeout=60)
        assert _table(api, "events")["status"] == "idle"
        assert any("does not carry Hudi's engine" in r for r in judged["reasons"]), judged["reasons"]
        bad = api.put("/resource-groups/hudi", json={"properties": {"engines": "hudi,delta"}})
        assert bad.status_code == 400 and "properties.engines" in bad.text

        assert api.put("/resource-groups/hudi", json={"properties": {"engines": "hudi", "parallelism": "1"}}).is_success
        assert api.post("/resource-groups/hudi/scale", json={"instances": 1}).is_success

        def ended() -> dict[str, Any] | None:
            done = _processes(api, "hl.default.events")
            return done[0] if done and done[0]["status"] != "running" else None

        process = wait_for("Hudi's compaction run by an optimizer", ended, timeout=240)
        assert process["status"] == "success", process
        detail = api.get(f"/processes/{process['process_id']}").json()
        assert [t["type"] for t in detail["tasks"]] == ["compaction"]
        assert detail["summary"]["instants"] == [requested.timestamp]
        (compacted,) = [i for i in _instants(events) if i.timestamp == requested.timestamp]
        assert compacted.state == COMPLETED and compacted.action == "commit"  # a compaction completes as a commit
        assert writer.read(events) == rows

        def healthy() -> dict[str, Any] | None:
            table = _table(api, "events")
            evaluation = table.get("evaluation") or {}
            fresh = evaluation.get("metadata_location") == table.get("metadata_location")
            return table if fresh and table["status"] == "idle" and not evaluation.get("needs") else None

        wait_for("the table healthy again", healthy, timeout=60)
        # an optimizer that does not carry the engine its group needs is refused at registration, naming it
        refused = api.post("/optimizer/register", json={"group": "hudi", "parallelism": 1})
        assert refused.status_code == 400 and "engines" in refused.text and "--engine hudi" in refused.text

        # lakewarden owning a copy-on-write table's services (its catalog says so): it schedules and runs the
        # clustering of its small files, and archives only once a clean is past it; the versions the upsert
        # superseded are the last before the one commit retained, which Hudi's cleaner keeps
        for n in range(4):  # a file group per partition per commit: small base files
            keys = range(n * 10, n * 10 + 10)
            writer.write(orders, "orders", [(k, "a", n, f"p{k % 2}") for k in keys], OWNED_WRITER)
        writer.write(orders, "orders", [(k, "b", 9, f"p{k % 2}") for k in range(0, 40, 3)], OWNED_WRITER)
        owned_rows = writer.read(orders)
        owned = {
            "warehouse": str(tmp_path / "owned"),
            "table.self-optimizing.group": "hudi",
            "table.self-optimizing.min-plan-interval": "0",
            "table.hudi.table-services.owner": "lakewarden",
            "table.hoodie.clustering.inline.max.commits": "2",
            "table.hoodie.cleaner.commits.retained": "1",
            "table.hoodie.keep.min.commits": "2",
            "table.hoodie.keep.max.commits": "3",
        }
        assert api.post("/catalogs", json={"name": "ho", "type": "hudi", "properties": owned}).status_code == 201

        def owned_ended() -> list[dict[str, Any]] | None:
            done = _processes(api, "ho.default.orders")
            return done if done and all(p["status"] != "running" for p in done) else None

        first = wait_for("the owned table's services run", owned_ended, timeout=240)[-1]
        assert first["status"] == "success", first
        tasks = api.get(f"/processes/{first['process_id']}").json()["tasks"]
        assert [t["type"] for t in tasks] == ["clustering"]
        timeline = _instants(orders)
        assert any(i.action == "replacecommit" and i.state == COMPLETED for i in timeline)
        assert writer.read(orders) == owned_rows

        # Hudi cleans a clustered file group only once a commit is past the clustering: until the timeline moves,
        # lakewarden does not ask again
        idle = wait_for("the owned table idle", lambda: _idle(api, "ho", "orders"), timeout=60)
        assert any("Hudi found nothing to do" in r for r in idle["evaluation"]["reasons"]), idle["evaluation"]
        writer.write(orders, "orders", [(k, "c", 10, f"p{k % 2}") for k in range(0, 40, 7)], OWNED_WRITER)
        owned_rows = writer.read(orders)

        def cleaned() -> list[dict[str, Any]] | None:
            done = _processes(api, "ho.default.orders")
            return done if sum(p["summary"].get("files_deleted", 0) for p in done) > 0 else None

        wait_for("the replaced and superseded files cleaned", cleaned, timeout=120)
        assert any(i.action == "clean" and i.state == COMPLETED for i in _instants(orders))

        # with the clustering cleaned, the timeline past hoodie.keep.max.commits is archived
        def archived() -> list[dict[str, Any]] | None:
            done = _processes(api, "ho.default.orders")
            return done if sum(p["summary"].get("instants_archived", 0) for p in done) > 0 else None

        wait_for("the timeline archived", archived, timeout=120)
        settled = wait_for("the owned table idle again", lambda: _idle(api, "ho", "orders"), timeout=120)
        # what is still named is what Hudi itself found nothing to do for: no process runs it again meanwhile
        count = len(_processes(api, "ho.default.orders"))
        assert {n["service"] for n in settled["evaluation"]["needs"]} <= {"archive"}, settled["evaluation"]
        time.sleep(3)
        assert len(_processes(api, "ho.default.orders")) == count
        assert writer.read(orders) == owned_rows
        # the table's own configuration is the writers': running its services registered it nowhere, and built no
        # metadata table its writers keep none of
        assert "hoodie.database.name" not in (orders / ".hoodie" / "hoodie.properties").read_text()
        assert not (orders / ".hoodie" / "metadata").exists()
