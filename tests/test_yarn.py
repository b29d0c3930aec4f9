"""Optimizers on a real YARN: the `spark` container submits an optimizer with `--master yarn` to Hadoop's
MiniYARNCluster (tests/yarn_cluster.py), as a user's cluster is reached (`HADOOP_CONF_DIR`), and it compacts a
table on the cluster's executors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import PROPS, checksum, open_lake, wait_for
from tests.servers import MAINTENANCE_OFF, started_server
from tests.test_external_optimizers import executors
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
        "spark-conf.spark.driver.host: 127.0.0.1, spark-conf.spark.driver.bindAddress: 127.0.0.1, "
        f"export.HADOOP_CONF_DIR: '{yarn.conf_dir}', export.SPARK_LOCAL_IP: 127.0.0.1"
    )
    return f"{{name: yarn, container-impl: spark, properties: {{{properties}}}}}"


def test_the_spark_container_submits_an_optimizer_to_yarn_that_compacts_a_table(
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
