"""A real Flink job is the writer: PyFlink with Iceberg's Flink runtime streams upserts (equality deletes, a commit
per checkpoint) into lakewarden's REST catalog while lakewarden compacts the table and expires its snapshots. The
job's machine dies; the job is started again from its last checkpoint, finds the checkpoint it last committed in
the table's history (lakewarden's expiry kept that snapshot: docs/maintenance.md) and goes on. Nothing is lost or
duplicated: every key ends with its last upsert, and every row of the source is in the job's log table once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from lakewarden.domain.retention import FLINK_CHECKPOINT, FLINK_JOB_ID
from tests.flink_jobs import flink_job, flink_python, iceberg_flink_runtime, latest_checkpoint
from tests.helpers import running_optimizer, wait_for
from tests.servers import FAST_EVALUATOR, MAINTENANCE_OFF, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROWS, KEYS, RATE = 1200, 20, 20  # a minute of upserts, each key upserted 60 times
EXPIRING = MAINTENANCE_OFF.replace("expire-snapshots: {enabled: false}", "expire-snapshots: {interval: 5s}")


def processes(api: httpx.Client, action: str) -> list[dict[str, Any]]:
    found = api.get("/processes", params={"limit": 1000}).json()
    return [p for p in found if p["table"] == "lake.db.upserts" and p["action"] == action]


def flink_commits(catalog: RestCatalog, job_id: str) -> list[tuple[int, int]]:
    """(snapshot id, checkpoint id) of the job's commits still in the table, by checkpoint."""
    table = catalog.load_table("db.upserts")
    return sorted(
        (
            (s.snapshot_id, int(s.summary[FLINK_CHECKPOINT]))
            for s in table.snapshots()
            if s.summary is not None and s.summary.get(FLINK_JOB_ID) == job_id
        ),
        key=lambda c: c[1],
    )


def test_a_flink_upsert_stream_killed_and_restored_from_its_checkpoint_loses_and_duplicates_nothing(
    tmp_path: Path, spark: SparkSession
) -> None:
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import configure_catalogs

    flink_python()  # PyFlink is there (or the test says why not) before a server starts
    with started_server(tmp_path, extra=FAST_EVALUATOR, maintenance=EXPIRING) as server:
        api = server.api()
        catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
        catalog.create_namespace("db")
        job: dict[str, Any] = {
            "uri": f"{server.url}/iceberg",
            "warehouse": "lake",
            "token": server.token,
            "jars": iceberg_flink_runtime(),
            "table": "db.upserts",
            "properties": {
                "self-optimizing.minor.trigger.file-count": "3",
                "self-optimizing.min-plan-interval": "0",
                "snapshot.keep.duration": "0min",  # every snapshot but the ones a rule keeps expires at once
                "snapshot.keep.min-count": "1",
            },
            "rows": ROWS,
            "keys": KEYS,
            "rate": RATE,
            "interval": "2 s",
            "checkpoints": str(tmp_path / "checkpoints"),
            "restore": None,
        }
        with running_optimizer(server, spark):
            with flink_job(tmp_path / "first", job) as first:
                # the job runs on while lakewarden compacts its table and expires its snapshots
                wait_for(
                    "compaction and expiry under the running job",
                    lambda: (
                        len(flink_commits(catalog, first.job_id)) >= 1
                        and any(p["status"] == "success" for p in processes(api, "optimizing"))
                        and any(p["status"] == "success" for p in processes(api, "expire-snapshots"))
                    ),
                    timeout=120,
                )
                assert first.process.poll() is None, first.output()[-4000:]  # mid-stream
                first.kill()
            checkpoint = latest_checkpoint(tmp_path / "checkpoints", first.job_id)
            # while the job is down another writer commits (a backfill), so the job's last commit is no longer the
            # head, and an expiry runs: it keeps that commit, which the restored job looks for
            backfill = pa.table({"id": pa.array([1000], pa.int64()), "v": pa.array([-1], pa.int64())})
            catalog.load_table("db.upserts").append(backfill.cast(catalog.load_table("db.upserts").schema().as_arrow()))
            last_commit = flink_commits(catalog, first.job_id)[-1]
            wait_for("expiry idle", lambda: all(p["status"] != "running" for p in processes(api, "expire-snapshots")))
            created = api.post("/tables/lake/db/upserts/actions/expire-snapshots", json={})
            assert created.status_code == 201, created.text
            process_id = created.json()["process_id"]
            expiry = wait_for(
                "the expiry",
                lambda: (lambda p: p if p["status"] != "running" else None)(api.get(f"/processes/{process_id}").json()),
            )
            assert expiry["status"] == "success", expiry
            kept = [(k["snapshot_id"], k["need"]) for k in expiry["summary"]["kept"]]
            assert (last_commit[0], "flink-checkpoint") in kept, (kept, last_commit)
            assert last_commit[1] >= int(checkpoint.name.split("-")[1]) - 1, (last_commit, checkpoint)
            expired = sum(p["summary"].get("snapshots_expired", 0) for p in processes(api, "expire-snapshots"))
            assert expired > 0  # expiry removed the job's other commits: the one it needs was kept by the rule

            with flink_job(tmp_path / "second", {**job, "restore": str(checkpoint)}) as second:
                second.process.wait(240)
                assert second.process.returncode == 0 and "DONE" in second.output(), second.output()[-4000:]

        properties = api.get("/catalogs/lake").json()["properties"]
        reader = spark.newSession()
        spec = CatalogSpec("lake", "internal", {**properties, "token": server.token})
        configure_catalogs(reader, [spec], {"lake": "r"})
        rows = [(int(r[0]), int(r[1])) for r in reader.sql("SELECT id, v FROM r.db.upserts").collect()]
        last = {key: max(seq for seq in range(ROWS) if seq % KEYS == key) for key in range(KEYS)}
        assert sorted(rows) == sorted([*last.items(), (1000, -1)])  # every key once, with its last upsert
        # the restored job went on from its checkpoint: every row of the source reached the log exactly once (a job
        # started afresh would write the first run's rows again)
        logged = [int(r[0]) for r in reader.sql("SELECT seq FROM r.db.upserts_log").collect()]
        assert sorted(logged) == list(range(ROWS))
        assert any(p["status"] == "success" for p in processes(api, "optimizing"))
