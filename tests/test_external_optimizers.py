"""Optimizers started outside the server: a group of an `external` container, and an optimizer launched with
pyspark's own spark-submit as its own Spark application, exactly as the README tells people to."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from lakewarden.services.resources.containers import descendants
from tests.clusters import spark_bin, standalone_cluster, wait_or_kill
from tests.helpers import FAST_DYNAMIC_ALLOCATION, PROPS, checksum, executors, open_lake, wait_for
from tests.servers import LAKEWARDEN, MAINTENANCE_OFF, ServerProcess, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
EXTERNAL = MAINTENANCE_OFF + "containers:\n  - {name: local}\n  - {name: ext, container-impl: external}\n"


@pytest.mark.parametrize("where", ["local", "standalone"])
def test_an_optimizer_submitted_with_spark_submit_into_an_external_group(
    tmp_path: Path, spark: SparkSession, where: str
) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(started_server(tmp_path, maintenance=EXTERNAL))
        if where == "standalone":
            cluster = stack.enter_context(standalone_cluster(tmp_path))
            master, ui = cluster.master, cluster.ui
            resources = ["--executor-memory", "512m", "--total-executor-cores", "2"]
        else:
            master, ui, resources = "local[1]", "", []
        run_submitted(tmp_path, spark, server, master, ui, resources)


def run_submitted(
    tmp_path: Path, spark: SparkSession, server: ServerProcess, master: str, ui: str, resources: list[str]
) -> None:
    """Submit an optimizer into group etl of an external container; it compacts a table; SIGTERM ends it."""
    api = open_lake(server, spark)
    assert api.post("/resource-groups", json={"name": "etl", "container": "ext"}).status_code == 201
    refused = api.post("/resource-groups/etl/scale", json={"instances": 1})
    assert refused.status_code == 400 and "external" in refused.json()["error"]["message"]
    assert "instances" in refused.text

    spark.sql(
        f"CREATE TABLE local.db.ext (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
        f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl')"
    )
    for i in range(4):
        spark.sql(
            f"INSERT INTO local.db.ext SELECT id, 'a', current_timestamp(), 'v' FROM range({i * 10}, {i * 10 + 10})"
        )
    before = checksum(spark, "local.db.ext")
    api.post("/catalogs/local/refresh")

    # `spark-submit --master ... $(lakewarden setup-spark --submit-args) --server ... --group ...`
    submit_args = subprocess.run(
        [*LAKEWARDEN, "setup-spark", "--submit-args"], capture_output=True, text=True, check=True
    ).stdout.split("\n")[-2]
    command = [
        spark_bin("spark-submit"),
        "--master",
        master,
        *resources,
        "--driver-memory",
        "1g",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        *shlex.split(submit_args),
        "--server",
        server.url,
        "--group",
        "etl",
        "--parallelism",
        "1",
    ]
    env = {
        **os.environ,
        "LAKEWARDEN_TOKEN": server.token,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    log = (tmp_path / "submitted.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:

        def registered() -> list[dict[str, Any]] | None:
            found = api.get("/resource-groups/etl/optimizers").json()
            return found or None

        (optimizer,) = wait_for("the submitted optimizer to register", registered, timeout=180)
        assert optimizer["container"] == "ext" and optimizer["resource_id"] is None
        assert optimizer["spark_master"] == master  # the master it was submitted to, not one of its own
        app_id = optimizer["spark_application_id"]
        if ui:  # on the cluster: the master runs the application, with executors on both workers
            state = httpx.get(f"{ui}/json/", timeout=5).json()
            (app,) = [a for a in state["activeapps"] if a["id"] == app_id]
            assert app["cores"] == 2
            assert sum(w["coresused"] for w in state["workers"]) == 2
        else:
            assert app_id.startswith("local-")

        def compacted() -> dict[str, Any] | None:
            done = [p for p in api.get("/processes", params={"table": "local.db.ext"}).json()]
            return done[0] if done and done[0]["status"] != "running" else None

        process_row = wait_for("the table to be compacted", compacted, timeout=240)
        assert process_row["status"] == "success", process_row
        if ui:
            assert_tasks_ran_on_executors(optimizer)
        assert checksum(spark, "local.db.ext") == before
        spark.sql("REFRESH TABLE local.db.ext")
        assert spark.sql("SELECT count(*) FROM local.db.ext.files").first()[0] == 1  # type: ignore[index]
        driver = [p for p, name in descendants(process.pid) if name.startswith("python")]
        assert len(driver) == 1  # spark-submit's JVM runs the optimizer's Python as its child
    finally:
        if ui:
            os.killpg(process.pid, signal.SIGTERM)  # the optimizer finishes, unregisters, and its JVM stops
        else:
            os.kill(process.pid, signal.SIGKILL)  # the JVM alone dies: its Python driver must not poll on forever
        wait_or_kill(process, 60)
        log.close()
    # it left: unregistered, and the server (which never started it) starts nothing in its place
    wait_for("the optimizer to unregister", lambda: api.get("/resource-groups/etl/optimizers").json() == [])
    wait_for("its Python driver to exit", lambda: not Path(f"/proc/{driver[0]}").exists(), timeout=30)
    shown = subprocess.run(
        [*LAKEWARDEN, "group", "show", "etl", "--server", server.url],
        capture_output=True,
        text=True,
        env={**os.environ, "LAKEWARDEN_TOKEN": server.token},
        check=True,
    )
    assert "etl" in shown.stdout


def assert_tasks_ran_on_executors(optimizer: dict[str, Any]) -> None:
    """The rewrites ran as Spark tasks on the cluster's executors (one on each worker), none in the driver."""
    found = executors(optimizer)
    assert found.pop("driver")["totalTasks"] == 0
    assert len(found) == 2 and sum(e["totalTasks"] for e in found.values()) > 0, found


def test_the_spark_container_submits_and_releases_optimizers_on_a_cluster(tmp_path: Path, spark: SparkSession) -> None:
    with ExitStack() as stack:
        cluster = stack.enter_context(standalone_cluster(tmp_path))
        master, ui = cluster.master, cluster.ui
        properties = (
            f"spark-master: '{master}', driver-memory: 1g, executor-memory: 512m, total-executor-cores: '2', "
            "spark-conf.spark.driver.host: 127.0.0.1, spark-conf.spark.driver.bindAddress: 127.0.0.1, "
            "export.SPARK_LOCAL_IP: 127.0.0.1"
        )
        on_spark = f"{{name: cluster, container-impl: spark, properties: {{{properties}}}}}"
        containers = f"containers:\n  - {{name: local}}\n  - {on_spark}\n"
        server = stack.enter_context(started_server(tmp_path, maintenance=MAINTENANCE_OFF + containers))
        api = open_lake(server, spark)

        # bad input: a group whose master is no Spark master shows why on the group, and nothing runs
        bad = {"name": "bad", "container": "cluster", "properties": {"spark-master": "nowhere:7077"}}
        assert api.post("/resource-groups", json=bad).status_code == 201
        assert api.post("/resource-groups/bad/scale", json={"instances": 1}).status_code == 200

        def bad_error() -> str | None:
            error: str | None = api.get("/resource-groups/bad").json().get("container_error")
            return error

        assert "is not a Spark master URL" in wait_for("the bad group's error", bad_error, timeout=60)
        assert api.post("/resource-groups/bad/scale", json={"instances": 0}).status_code == 200

        assert api.post("/resource-groups", json={"name": "etl", "container": "cluster"}).status_code == 201
        tables = ["local.db.onspark", "lake.db.onspark"]  # a SQL catalog's table and one of lakewarden's own
        before = {}
        for table in tables:
            spark.sql(
                f"CREATE TABLE {table} (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
                f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl')"
            )
            for i in range(4):
                rows = f"range({i * 10}, {i * 10 + 10})"
                spark.sql(f"INSERT INTO {table} SELECT id, 'a', current_timestamp(), 'v' FROM {rows}")
            before[table] = checksum(spark, table)
        api.post("/catalogs/local/refresh")
        assert api.post("/resource-groups/etl/scale", json={"instances": 1}).status_code == 200

        def registered() -> list[dict[str, Any]] | None:
            return api.get("/resource-groups/etl/optimizers").json() or None

        (optimizer,) = wait_for("the submitted optimizer", registered, timeout=180)
        assert optimizer["resource_id"].startswith("cluster-etl-") and optimizer["spark_master"] == master
        app_id = optimizer["spark_application_id"]
        state = httpx.get(f"{ui}/json/", timeout=5).json()
        (app,) = [a for a in state["activeapps"] if a["id"] == app_id]
        assert app["name"] == f"lakewarden-optimizer-{optimizer['resource_id']}" and app["cores"] == 2

        def compacted(table: str) -> dict[str, Any] | None:
            done = api.get("/processes", params={"table": table}).json()
            return done[0] if done and done[0]["status"] != "running" else None

        for table in tables:
            assert wait_for(f"{table} to be compacted", partial(compacted, table), timeout=240)["status"] == "success"
            assert checksum(spark, table) == before[table]
        assert_tasks_ran_on_executors(optimizer)

        # a worker dies while a rewrite runs on its executor: Spark runs the task again on the other one. The
        # table is written with self-optimizing off: turned on while it is written, it was compacted piece by
        # piece as it grew, each piece in a few seconds, often before the test looked for a busy executor
        spark.sql(
            f"CREATE TABLE local.db.big (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
            f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl', 'self-optimizing.enabled'='false')"
        )
        # 16 files of about 7 MB that compress little: one rewrite of many seconds, so the victim still runs it
        # when it dies even when the driver's view of its tasks (a listener) lags on a busy machine
        for i in range(8):
            rows = f"range({i * 150_000}, {(i + 1) * 150_000})"
            spark.sql(
                f"INSERT INTO local.db.big SELECT id, 'b', current_timestamp(), "
                f"concat(uuid(), uuid(), uuid(), uuid(), uuid()) FROM {rows}"
            )
        big = checksum(spark, "local.db.big")
        spark.sql("ALTER TABLE local.db.big SET TBLPROPERTIES ('self-optimizing.enabled'='true')")
        api.post("/catalogs/local/refresh")

        busy_since: dict[str, float] = {}

        def busy_executor() -> str | None:
            """An executor busy for half a second on end: a rewrite (seconds long), not a short planning job."""
            now = time.monotonic()
            busy = {i for i, e in executors(optimizer).items() if i != "driver" and e["activeTasks"] > 0}
            for gone in set(busy_since) - busy:
                del busy_since[gone]
            for executor in busy:
                busy_since.setdefault(executor, now)
            return next((i for i in sorted(busy) if now - busy_since[i] >= 0.5), None)

        victim = wait_for("a rewrite task on an executor", busy_executor, timeout=240, interval=0.05)
        cluster.kill_worker(cluster.worker_of(app_id, victim))
        assert (
            wait_for("local.db.big to be compacted", lambda: compacted("local.db.big"), timeout=300)["status"]
            == "success"
        )
        assert checksum(spark, "local.db.big") == big
        lost = executors(optimizer, everyone=True)[victim]
        assert not lost["isActive"]

        def failed_tasks() -> int:
            stages = httpx.get(f"{optimizer['spark_ui_url']}/api/v1/applications/{app_id}/stages", timeout=5).json()
            return sum(s["numFailedTasks"] for s in stages)

        # it died with a task on it, which Spark ran again; the UI's figures come from a listener of the driver's
        # events, which may lag behind the job's end on a busy machine
        assert wait_for("the lost task in the stages' figures", failed_tasks, timeout=60) >= 1

        # releasing stops the application: asked at its heartbeat, its optimizer finishes, unregisters and stops
        # Spark; the master lists the application as done
        assert api.post("/resource-groups/etl/scale", json={"instances": 0}).status_code == 200
        wait_for("the optimizer to leave", lambda: api.get("/resource-groups/etl/optimizers").json() == [], timeout=120)
        optimizer_log = (server.data_dir / "optimizers" / f"{optimizer['resource_id']}.log").read_text()
        assert "the server asks this optimizer to leave" in optimizer_log

        def finished() -> bool:
            state = httpx.get(f"{ui}/json/", timeout=5).json()
            return app_id not in {a["id"] for a in state["activeapps"]} and app_id in {
                a["id"] for a in state["completedapps"]
            }

        wait_for("the application to finish", finished, timeout=60)
        assert api.get("/resource-groups/etl").json()["container_error"] is None

        # dynamic allocation on the cluster: a pending table submits an application, which compacts it and, idle,
        # is drained and finishes; the group is back at zero
        assert api.put("/resource-groups/etl", json={"properties": FAST_DYNAMIC_ALLOCATION}).is_success
        spark.sql(
            f"CREATE TABLE local.db.scaled (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
            f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl')"
        )
        for i in range(4):
            spark.sql(f"INSERT INTO local.db.scaled SELECT id, 'a', current_timestamp(), 'v' FROM range({i}, {i + 1})")
        scaled = checksum(spark, "local.db.scaled")
        api.post("/catalogs/local/refresh")
        (submitted,) = wait_for("an optimizer submitted for the pending table", registered, timeout=180)
        assert submitted["spark_master"] == master and submitted["threads"] == 1
        done = wait_for("local.db.scaled to be compacted", lambda: compacted("local.db.scaled"), timeout=240)
        assert done["status"] == "success" and checksum(spark, "local.db.scaled") == scaled
        wait_for(
            "the idle optimizer to be drained",
            lambda: api.get("/resource-groups/etl/optimizers").json() == [],
            timeout=150,
        )
        app_id = submitted["spark_application_id"]
        wait_for("its application to finish", finished, timeout=60)
        assert api.get("/resource-groups/etl").json()["allocation"]["scale_downs"] == 1
