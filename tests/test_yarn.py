"""Optimizers on a real YARN: the `spark` container submits an optimizer with `--master yarn` to Hadoop's
MiniYARNCluster (tests/yarn_cluster.py), as a user's cluster is reached (`HADOOP_CONF_DIR`), and it compacts a
table on the cluster's executors. Its YARN application killed while it works, the server hands its task to the
optimizer the group starts in its place and nothing is lost; with dynamic allocation the group goes from zero to an
application on YARN and back."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import FAST_DYNAMIC_ALLOCATION, PROPS, checksum, executors, open_lake, wait_for
from tests.servers import MAINTENANCE_OFF, started_server
from tests.yarn_cluster import YarnCluster, yarn_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YarnCluster]:
    with yarn_cluster(tmp_path_factory.mktemp("yarn")) as cluster:
        yield cluster


def _yarn_processes(application_id: str) -> dict[str, int]:
    """The JVMs YARN runs for an application on this machine: its ApplicationMaster and executors, by role."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if application_id not in command or "java" not in command.split(" ", 1)[0]:
            continue
        if "ExecutorLauncher" in command:
            found["am"] = int(entry.name)
        elif "CoarseGrainedExecutorBackend" in command:
            found[f"executor-{entry.name}"] = int(entry.name)
    return found


def _yarn_container(yarn: YarnCluster) -> str:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    properties = (
        "spark-master: yarn, driver-memory: 1g, executor-memory: 512m, num-executors: '1', executor-cores: '1', "
        # Spark's own jars are on every node of this cluster already: none is uploaded per application
        f"spark-conf.spark.yarn.jars: 'local:{jars}/*', spark-conf.spark.yarn.am.memory: 512m, "
        "spark-conf.spark.yarn.maxAppAttempts: '1', spark-conf.spark.yarn.appMasterEnv.SPARK_LOCAL_IP: 127.0.0.1, "
        "spark-conf.spark.executorEnv.SPARK_LOCAL_IP: 127.0.0.1, "
        "spark-conf.spark.driver.host: 127.0.0.1, spark-conf.spark.driver.bindAddress: 127.0.0.1, "
        f"export.HADOOP_CONF_DIR: '{yarn.conf_dir}', export.SPARK_LOCAL_IP: 127.0.0.1"
    )
    return f"{{name: yarn, container-impl: spark, properties: {{{properties}}}}}"


def test_optimizers_on_yarn_compact_survive_a_killed_application_and_scale_from_zero(
    tmp_path: Path, spark: SparkSession, yarn: YarnCluster
) -> None:
    containers = f"containers:\n  - {{name: local}}\n  - {_yarn_container(yarn)}\n"
    with started_server(tmp_path, maintenance=MAINTENANCE_OFF + containers) as server:
        api = open_lake(server, spark)
        assert api.post("/resource-groups", json={"name": "etl", "container": "yarn"}).status_code == 201
        spark.sql(
            "CREATE TABLE lake.db.onyarn (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
            f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl')"
        )
        for i in range(4):
            rows = f"range({i * 10}, {i * 10 + 10})"
            spark.sql(f"INSERT INTO lake.db.onyarn SELECT id, 'a', current_timestamp(), 'v' FROM {rows}")
        before = checksum(spark, "lake.db.onyarn")
        assert api.post("/resource-groups/etl/scale", json={"instances": 1}).status_code == 200

        def registered() -> list[dict[str, Any]] | None:
            return api.get("/resource-groups/etl/optimizers").json() or None

        (optimizer,) = wait_for("the optimizer submitted to YARN", registered, timeout=240)
        application = optimizer["spark_application_id"]
        assert optimizer["spark_master"] == "yarn" and application.startswith("application_")
        running = wait_for("its containers", lambda: _yarn_processes(application) or None, timeout=60)
        assert "am" in running  # YARN runs its ApplicationMaster (and its executors) in containers

        def compacted(table: str) -> dict[str, Any] | None:
            done = api.get("/processes", params={"table": table}).json()
            return done[0] if done and done[0]["status"] != "running" else None

        assert (
            wait_for("the table compacted on YARN", lambda: compacted("lake.db.onyarn"), timeout=240)["status"]
            == "success"
        )
        assert checksum(spark, "lake.db.onyarn") == before
        # the rewrite ran in YARN's executor containers, none of it in the optimizer's driver
        found = executors(optimizer)
        assert found.pop("driver")["totalTasks"] == 0
        assert found and sum(e["totalTasks"] for e in found.values()) > 0, found

        # its YARN application killed (the ApplicationMaster's container) while it rewrites: the optimizer ends, the
        # server hands the task out again to the optimizer the group starts in its place, and nothing is lost
        spark.sql(
            "CREATE TABLE lake.db.killed (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
            f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl', 'self-optimizing.enabled'='false')"
        )
        for i in range(6):
            rows = f"range({i * 100_000}, {(i + 1) * 100_000})"
            spark.sql(
                f"INSERT INTO lake.db.killed SELECT id, 'b', current_timestamp(), concat(uuid(), uuid()) FROM {rows}"
            )
        killed = checksum(spark, "lake.db.killed")
        spark.sql("ALTER TABLE lake.db.killed SET TBLPROPERTIES ('self-optimizing.enabled'='true')")

        def acked() -> bool:
            processes = api.get("/processes", params={"table": "lake.db.killed"}).json()
            tasks = api.get(f"/processes/{processes[0]['process_id']}").json()["tasks"] if processes else []
            return any(t["status"] == "acked" for t in tasks)

        wait_for("a task acked on YARN", acked, timeout=180, interval=0.1)
        os.kill(_yarn_processes(application)["am"], signal.SIGKILL)

        def replaced() -> list[dict[str, Any]] | None:
            now = api.get("/resource-groups/etl/optimizers").json()
            return [o for o in now if o["spark_application_id"] != application] or None

        wait_for("an optimizer in its place", replaced, timeout=240)
        done = wait_for("the table compacted after all", lambda: compacted("lake.db.killed"), timeout=300)
        assert done["status"] == "success", done
        assert checksum(spark, "lake.db.killed") == killed
        assert not _yarn_processes(application)  # the killed application left nothing running

        # dynamic allocation on YARN: from zero, a table that needs work has an application submitted, which
        # compacts it and, idle, is drained; its YARN application ends and the group is back at zero
        assert api.post("/resource-groups/etl/scale", json={"instances": 0}).status_code == 200
        wait_for("the group at zero", lambda: api.get("/resource-groups/etl/optimizers").json() == [], timeout=120)
        assert api.put("/resource-groups/etl", json={"properties": FAST_DYNAMIC_ALLOCATION}).is_success
        spark.sql(
            "CREATE TABLE lake.db.scaled (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
            f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group'='etl')"
        )
        for i in range(4):
            spark.sql(f"INSERT INTO lake.db.scaled SELECT id, 'a', current_timestamp(), 'v' FROM range({i}, {i + 1})")
        scaled = checksum(spark, "lake.db.scaled")
        (submitted,) = wait_for("an optimizer submitted for the pending table", registered, timeout=240)
        assert submitted["spark_master"] == "yarn"
        done = wait_for("lake.db.scaled compacted", lambda: compacted("lake.db.scaled"), timeout=240)
        assert done["status"] == "success" and checksum(spark, "lake.db.scaled") == scaled
        wait_for(
            "the idle optimizer drained",
            lambda: api.get("/resource-groups/etl/optimizers").json() == [],
            timeout=150,
        )
        ended = submitted["spark_application_id"]
        wait_for("its YARN application to end", lambda: not _yarn_processes(ended), timeout=90)
        assert api.get("/resource-groups/etl").json()["allocation"]["scale_downs"] >= 1
