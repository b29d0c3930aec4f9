"""Optimizers started outside the server: a group of an `external` container, and an optimizer launched with
pyspark's own spark-submit as its own Spark application, exactly as the README tells people to."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import PROPS, checksum, open_lake, wait_for
from tests.servers import LAKEWARDEN, MAINTENANCE_OFF, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
EXTERNAL = MAINTENANCE_OFF + "containers:\n  - {name: local}\n  - {name: ext, container-impl: external}\n"


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def test_an_optimizer_submitted_with_spark_submit_into_an_external_group(tmp_path: Path, spark: SparkSession) -> None:
    with started_server(tmp_path, maintenance=EXTERNAL) as server:
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
            spark_submit(),
            "--master",
            "local[1]",
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
            assert optimizer["spark_master"] == "local[1]"  # the master it was submitted to, not one of its own
            assert optimizer["spark_application_id"].startswith("local-")

            def compacted() -> dict[str, Any] | None:
                done = [p for p in api.get("/processes", params={"table": "local.db.ext"}).json()]
                return done[0] if done and done[0]["status"] != "running" else None

            process_row = wait_for("the table to be compacted", compacted, timeout=240)
            assert process_row["status"] == "success", process_row
            assert checksum(spark, "local.db.ext") == before
            spark.sql("REFRESH TABLE local.db.ext")
            assert spark.sql("SELECT count(*) FROM local.db.ext.files").first()[0] == 1  # type: ignore[index]
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # the optimizer finishes, unregisters, and its JVM stops
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()
        # it left cleanly: unregistered, and the server (which never started it) starts nothing in its place
        wait_for("the optimizer to unregister", lambda: api.get("/resource-groups/etl/optimizers").json() == [])
        shown = subprocess.run(
            [*LAKEWARDEN, "group", "show", "etl", "--server", server.url],
            capture_output=True,
            text=True,
            env={**os.environ, "LAKEWARDEN_TOKEN": server.token},
            check=True,
        )
        assert "etl" in shown.stdout
