"""Paimon's table services run by lakewarden, with Paimon's own code: tables written by Paimon's Spark writer (a
writer of their own, tests/engine_writer.py), a `paimon` catalog over their warehouse, and a group whose
optimizers carry Paimon's engine. A write-only table's verdict turns pending, an optimizer runs the services,
the snapshots show their commits, the verdict is healthy again and a query reads the same rows; a table whose
writers compact themselves is left to them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine_jobs import EngineWriter, engine_writer
from tests.helpers import wait_for
from tests.servers import FAST_EVALUATOR, started_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# the writers only write (Paimon's dedicated compaction): lakewarden compacts and expires; one sorted run per
# commit and bucket, so three commits reach the trigger
PRIMARY_KEY = (
    "'primary-key' = 'id,dt', 'bucket' = '1', 'write-only' = 'true', 'num-sorted-run.compaction-trigger' = '3', "
    "'snapshot.num-retained.min' = '2', 'snapshot.time-retained' = '1 ms'"
)
# an append table: three small files make a compaction; a partition two days past its date expires
APPEND = "'write-only' = 'true', 'compaction.max.file-num' = '3', 'partition.expiration-time' = '2 d'"


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineWriter]:
    with engine_writer(tmp_path_factory.mktemp("engine-writer") / "writer.log") as running:
        yield running


def _processes(api: httpx.Client, table: str) -> list[dict[str, Any]]:
    answer = api.get("/processes", params={"table": f"pm.db.{table}"})
    return answer.json() if answer.status_code == 200 else []


def _settled(api: httpx.Client, table: str) -> dict[str, Any] | None:
    """The table judged on its latest snapshot, idle, with no process running and at least one process done."""
    found: dict[str, Any] = api.get(f"/tables/pm/db/{table}").json()
    evaluation = found.get("evaluation") or {}
    done = _processes(api, table)
    fresh = evaluation.get("metadata_location") == found.get("metadata_location")
    ended = bool(done) and all(p["status"] != "running" for p in done)
    return found if fresh and ended and found["status"] == "idle" else None


def test_paimons_services_run_on_write_only_tables_and_theirs_are_left_to_them(
    tmp_path: Path, writer: EngineWriter
) -> None:
    warehouse = tmp_path / "warehouse"
    spark = {"w": warehouse}
    writer.sql(
        "CREATE DATABASE IF NOT EXISTS w.db",
        f"CREATE TABLE w.db.pk (id INT, v STRING, dt STRING) PARTITIONED BY (dt) TBLPROPERTIES ({PRIMARY_KEY})",
        f"CREATE TABLE w.db.ap (id INT, v STRING, dt STRING) PARTITIONED BY (dt) TBLPROPERTIES ({APPEND})",
        "CREATE TABLE w.db.inline (id INT, v STRING) TBLPROPERTIES ("
        "'primary-key' = 'id', 'bucket' = '1', 'num-sorted-run.compaction-trigger' = '3')",
        catalogs=spark,
    )
    for n in range(4):
        writer.sql(
            f"INSERT INTO w.db.pk VALUES ({n}, 'a{n}', 'd1'), ({n % 2}, 'b{n}', 'd2')",
            f"INSERT INTO w.db.ap VALUES ({n}, 'a', '2999-01-01')",
            f"INSERT INTO w.db.inline VALUES ({n}, 'c')",
            catalogs=spark,
        )
    writer.sql("INSERT INTO w.db.ap VALUES (9, 'old', '2020-01-01')", catalogs=spark)
    # the writers of `inline` compact as they commit (Paimon's default): it never piles up to lakewarden's work
    pk_rows = writer.sql("SELECT * FROM w.db.pk", catalogs=spark)
    ap_rows = writer.sql("SELECT * FROM w.db.ap WHERE dt <> '2020-01-01'", catalogs=spark)

    (tmp_path / "server").mkdir()
    with started_server(tmp_path / "server", extra=FAST_EVALUATOR) as server:
        api = server.api()
        group = {"name": "paimon", "container": "local", "properties": {"parallelism": "1", "engines": "paimon"}}
        assert api.post("/resource-groups", json=group).status_code == 201
        catalog = {
            "warehouse": str(warehouse),
            "table.self-optimizing.group": "paimon",
            "table.self-optimizing.min-plan-interval": "0",
        }
        added = api.post("/catalogs", json={"name": "pm", "type": "paimon", "properties": catalog})
        assert added.status_code == 201, added.text
        api.post("/catalogs/pm/refresh")
        assert api.post("/resource-groups/paimon/scale", json={"instances": 1}).is_success

        # a writer keeps writing while the services run: Paimon's appends never conflict with a compaction, and
        # nothing it wrote is lost
        live: list[list[Any]] = []
        overlapped = False

        def written_through_a_run() -> bool:
            nonlocal overlapped
            before = {p["process_id"] for p in _processes(api, "pk") if p["status"] == "running"}
            key = 100 + len(live)
            writer.sql(f"INSERT INTO w.db.pk VALUES ({key}, 'live', 'd1')", catalogs=spark)
            live.append([key, "live", "d1"])
            after = {p["process_id"] for p in _processes(api, "pk") if p["status"] == "running"}
            overlapped = overlapped or bool(before & after)
            return overlapped  # each three commits need another compaction: one of them lands during a run

        wait_for("a commit while a service runs", written_through_a_run, timeout=240, interval=0)
        pk_rows = sorted(pk_rows + live, key=str)
        pk = wait_for("the primary-key table's services run", lambda: _settled(api, "pk"), timeout=240)
        done = _processes(api, "pk")
        assert all(p["status"] == "success" for p in done), done
        detail = api.get(f"/processes/{done[-1]['process_id']}").json()
        assert detail["tasks"][0]["type"] == "compaction" and done[-1]["type"] == "major"
        kinds = writer.sql("SELECT commit_kind FROM w.db.`pk$snapshots`", catalogs=spark)
        assert ["COMPACT"] in kinds, kinds
        assert not [n for n in pk["evaluation"]["needs"] if n["service"] == "compaction"], pk["evaluation"]
        assert writer.sql("SELECT * FROM w.db.pk", catalogs=spark) == pk_rows

        ap = wait_for("the append table's services run", lambda: _settled(api, "ap"), timeout=180)
        services = {
            t["type"] for p in _processes(api, "ap") for t in api.get(f"/processes/{p['process_id']}").json()["tasks"]
        }
        assert {"compaction", "expire-partitions"} <= services, services
        summary = _processes(api, "ap")[-1]["summary"]
        assert summary["partitions_expired"] == 1, summary
        assert not ap["evaluation"]["needs"], ap["evaluation"]
        assert writer.sql("SELECT * FROM w.db.ap", catalogs=spark) == ap_rows  # the expired partition's row gone

        inline = wait_for("the inline table judged", lambda: api.get("/tables/pm/db/inline").json().get("evaluation"))
        assert _processes(api, "inline") == []
        assert api.get("/tables/pm/db/inline").json()["status"] == "idle"
        if inline["needs"]:  # only if the writers' own compaction left runs: their word, not lakewarden's work
            assert any("the writers run it with their commits" in r for r in inline["reasons"]), inline
