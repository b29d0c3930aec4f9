"""Hudi's table services run by lakewarden, with Hudi's own code: tables written by Hudi's Spark datasource (a
writer of their own, tests/hudi_writer.py), a `hudi` catalog over their warehouse, and a group whose optimizers
carry Hudi's engine. The verdict turns pending, an optimizer runs the service, the timeline shows its instant
completed, the verdict is healthy again and a query reads the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakewarden.domain.hudi import COMPLETED, timeline_of
from tests.helpers import wait_for
from tests.hudi_jobs import HudiWriter, hudi_writer
from tests.servers import FAST_EVALUATOR, started_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# the writer only writes and schedules its compactions (Hudi's async pattern): it compacts, cleans and archives
# nothing inline
ASYNC_WRITER = {
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
    "hoodie.compact.inline": "false",
    "hoodie.compact.schedule.inline": "true",
    "hoodie.compact.inline.max.delta.commits": "3",
    "hoodie.clean.automatic": "false",
    "hoodie.archive.automatic": "false",
}


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HudiWriter]:
    with hudi_writer(tmp_path_factory.mktemp("hudi-writer") / "writer.log") as running:
        yield running


def _instants(path: Path) -> list[Any]:
    names = [p.name for p in (path / ".hoodie").iterdir()]
    if (path / ".hoodie" / "timeline").is_dir():
        names += [p.name for p in (path / ".hoodie" / "timeline").iterdir()]
    return timeline_of(names)


def _table(api: httpx.Client, name: str) -> dict[str, Any]:
    table: dict[str, Any] = api.get(f"/tables/hl/default/{name}").json()
    return table


def test_a_compaction_the_writer_scheduled_is_run_and_the_table_is_healthy_again(
    tmp_path: Path, writer: HudiWriter
) -> None:
    warehouse = tmp_path / "warehouse"
    events = warehouse / "events"
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
            done = api.get("/processes", params={"table": "hl.default.events"}).json()
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
