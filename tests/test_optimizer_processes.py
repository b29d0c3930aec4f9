"""Optimizer processes: the `local` container keeps them alive; one killed mid-task loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import httpx
import pytest

from lakewarden.services.resources.containers import descendants
from tests.helpers import FAST_DYNAMIC_ALLOCATION, PROPS, checksum, open_lake, running_optimizer, wait_for
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
FAST_TIMEOUTS = (
    "  evaluator: {interval: 1s, recheck-interval: 1s}\n"
    "  optimizer: {heart-beat-timeout: 4s, task-ack-timeout: 10s, task-execute-timeout: 10min}\n"
)


@pytest.fixture
def server_settings() -> str:
    return FAST_TIMEOUTS


def optimizers(server: ServerProcess, group: str = "default") -> list[dict[str, Any]]:
    return list(json.loads(cli(server, "group", "show", group, "--json").stdout)["optimizers"])


def test_local_container_scales_out_and_releases(server: ServerProcess) -> None:
    assert optimizers(server) == []
    assert "1 optimizer instance(s)" in cli(server, "group", "scale", "default", "--instances", "1").stdout
    (started,) = wait_for("an optimizer to register", lambda: optimizers(server), timeout=120)
    assert started["resource_id"].startswith("local-default-")
    assert started["threads"] == 1
    assert server.proc is not None
    (jvm,) = [pid for pid, name in descendants(server.proc.pid) if name == "java"]
    # an optimizer runs batches: its JVM takes the throughput collector (optimizer/app.py's JAVA_OPTIONS)
    assert "-XX:+UseParallelGC" in Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")
    cli(server, "group", "scale", "default", "--instances", "0")
    wait_for("the optimizer to be released", lambda: optimizers(server) == [], timeout=90)
    bad = cli(server, "group", "scale", "default", "--instances", "-1", ok=False)
    assert bad.returncode != 0


def pending_table(
    server: ServerProcess, spark: SparkSession, name: str, tasks: int = 1
) -> tuple[httpx.Client, tuple[int, int]]:
    """local.db.<name>: 12 small appends, pending; with several `tasks`, in as many partitions, each a task of its
    own (max-task-size-bytes of a byte). The API client and the table's checksum."""
    api = open_lake(server, spark)
    partitioned = "PARTITIONED BY (cat)" if tasks > 1 else ""
    props = f"{PROPS}, 'self-optimizing.max-task-size-bytes' = '1'" if tasks > 1 else PROPS
    spark.sql(
        f"CREATE TABLE local.db.{name} (id BIGINT, cat STRING, v STRING) USING iceberg {partitioned} "
        f"TBLPROPERTIES ({props})"
    )
    for i in range(12):
        rows = f"range({i * 20000}, {(i + 1) * 20000})"
        spark.sql(f"INSERT INTO local.db.{name} SELECT id, char(97 + id % {tasks}), repeat('x', 50) FROM {rows}")
    before = checksum(spark, f"local.db.{name}")
    api.post("/catalogs/local/refresh")
    wait_for("pending", lambda: api.get(f"/tables/local/db/{name}").json()["status"] == "pending")
    return api, before


def optimizer_process(server: ServerProcess, log: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """A `lakewarden optimizer` in a session of its own (its JVM with it), registered with the admin's token;
    its output goes to `log` when given."""
    return subprocess.Popen(
        [sys.executable, "-m", "lakewarden.cli.main", "optimizer", "--server", server.url, "--driver-memory", "1g"],
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "LAKEWARDEN_TOKEN": server.token},  # an operator's (here the admin's) token registers
    )


def acked_process(api: httpx.Client) -> dict[str, Any]:
    """The first process with a task acked by an optimizer (waited for)."""

    def acked() -> dict[str, Any] | None:
        for process in api.get("/processes").json():
            if any(t["status"] == "acked" for t in process["tasks"]):
                return dict(process)
        return None

    return dict(wait_for("the task to be acked", acked, timeout=120))


def test_a_stopped_optimizer_unregisters_logs_its_end_and_leaves_with_its_jvm(
    server: ServerProcess, tmp_path: Path
) -> None:
    """SIGTERM: the optimizer unregisters, stops Spark, and leaves without the interpreter's teardown
    (optimizer/app.py `leave`): its exit status is 0, its last log line is written, and its JVM goes with it."""
    log_path = tmp_path / "optimizer.log"
    with log_path.open("wb") as log:
        process = optimizer_process(server, log)
    try:
        wait_for("the optimizer to register", lambda: optimizers(server), timeout=120)
        jvms = [pid for pid, name in descendants(process.pid) if name == "java"]
        assert len(jvms) == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert log_path.read_text().rstrip().splitlines()[-1].endswith("optimizer stopped after 0 task(s)")
    assert optimizers(server) == []  # it unregistered: not left for the heartbeat timeout to find
    wait_for("its JVM to exit", lambda: exited(jvms[0]), timeout=30)


def exited(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (its parent left first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_optimizer_killed_mid_task_loses_nothing(server: ServerProcess, spark: SparkSession) -> None:
    """A process of three tasks: the optimizer running the first is killed mid-rewrite; another finishes the
    process, whose one commit is the only snapshot it makes."""
    api, before = pending_table(server, spark, "k", tasks=3)
    victim = optimizer_process(server)
    try:
        process = acked_process(api)
    finally:
        os.killpg(victim.pid, signal.SIGKILL)  # the optimizer and its JVM, mid-task
        victim.wait()

    # after the heartbeat timeout the task goes back to PLANNED, and another optimizer finishes it
    wait_for(
        "the task to be planned again",
        lambda: api.get(f"/processes/{process['process_id']}").json()["tasks"][0]["status"] == "planned",
        timeout=60,
    )
    with running_optimizer(server, spark):
        done = wait_for(
            "the process to end",
            lambda: (p := api.get(f"/processes/{process['process_id']}").json())["status"] != "running" and p,
        )
    assert done["status"] == "success", done
    assert done["tasks"][0]["attempt"] >= 2
    assert len(done["tasks"]) >= 3 and done["tasks"][-1]["type"] == done["type"]
    spark.sql("REFRESH TABLE local.db.k")
    assert checksum(spark, "local.db.k") == before
    assert spark.sql("SELECT count(*) FROM local.db.k.files").first()[0] == 3  # type: ignore[index]
    by_process = spark.sql(
        f"SELECT count(*) FROM local.db.k.snapshots WHERE summary['lakewarden.process-id'] = '{done['process_id']}'"
    ).first()[0]  # type: ignore[index]
    assert by_process == 1
    assert done["summary"]["files_in"] >= 12 and done["summary"]["files_out"] == 3


def test_an_optimizer_whose_spark_jvm_dies_leaves_and_fails_no_task(server: ServerProcess, spark: SparkSession) -> None:
    """Only the optimizer's Spark JVM is killed, mid-task: its Python must not live on without it, failing
    every task it polls (found by the chaos harness, tests/chaos.py). It leaves the server and exits; the task
    goes back to planned with no retry counted, and another optimizer finishes it."""
    api, before = pending_table(server, spark, "j")
    victim = optimizer_process(server)
    try:
        process = acked_process(api)
        (jvm,) = [pid for pid, name in descendants(victim.pid) if name == "java"]
        os.kill(jvm, signal.SIGKILL)
        assert victim.wait(timeout=30) == 1  # it noticed and left, well before the heartbeat timeout
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
    task = wait_for(
        "the task to be planned again",
        lambda: (t := api.get(f"/processes/{process['process_id']}").json()["tasks"][0])["status"] == "planned" and t,
        timeout=30,
    )
    assert task["retry_count"] == 0 and task["error"] is None, task  # not counted as the task's failure
    assert api.get("/resource-groups/default/optimizers").json() == []  # it unregistered
    with running_optimizer(server, spark):
        done = wait_for(
            "the process to end",
            lambda: (p := api.get(f"/processes/{process['process_id']}").json())["status"] != "running" and p,
        )
    assert done["status"] == "success", done
    spark.sql("REFRESH TABLE local.db.j")
    assert checksum(spark, "local.db.j") == before


def test_server_killed_mid_task_leaves_nothing_stuck(server: ServerProcess, spark: SparkSession) -> None:
    api = open_lake(server, spark)
    spark.sql(f"CREATE TABLE local.db.r (id BIGINT, cat STRING, v STRING) USING iceberg TBLPROPERTIES ({PROPS})")
    for i in range(8):  # enough rows that the rewrite takes a while, even on a warm JVM
        rows = f"range({i * 150000}, {(i + 1) * 150000})"
        spark.sql(f"INSERT INTO local.db.r SELECT id, 'a', sha2(CAST(id AS STRING), 256) FROM {rows}")
    before = checksum(spark, "local.db.r")
    api.post("/catalogs/local/refresh")
    wait_for("pending", lambda: api.get("/tables/local/db/r").json()["status"] == "pending")

    with running_optimizer(server, spark):
        statuses = wait_for(
            "a task in flight (or done)",
            lambda: {t["status"] for p in api.get("/processes").json() for t in p["tasks"]} - {"planned"},
            interval=0.05,
        )
        # normally mid-task; if the task was quicker than the check, this is still a kill -9 and restart
        print(f"killing the server with tasks {statuses}")
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL  # no clean shutdown at all
        server.start()  # same data directory: state recovered from the system database
        process = wait_for(
            "the process to end",
            lambda: next((p for p in api.get("/processes").json() if p["status"] != "running"), None),
        )
    assert process["status"] == "success", process
    assert wait_for("idle", lambda: api.get("/tables/local/db/r").json()["status"] == "idle")
    spark.sql("REFRESH TABLE local.db.r")
    assert checksum(spark, "local.db.r") == before


def test_dynamic_allocation_starts_optimizers_for_pending_work_and_drains_them_idle(
    server: ServerProcess, spark: SparkSession
) -> None:
    """A group of no optimizers with dynamic allocation: a pending table (demand nobody polls for) starts one
    after scheduler-backlog-timeout; it compacts the table, and once idle for executor-idle-timeout it is drained
    and leaves: the group is back at zero."""
    api = open_lake(server, spark)
    props = {**FAST_DYNAMIC_ALLOCATION, "memory": "1g"}
    assert api.post("/resource-groups", json={"name": "dra", "container": "local", "properties": props}).is_success
    bad = api.put(
        "/resource-groups/dra", json={"properties": {**props, "dynamic-allocation.executor-idle-timeout": "5s"}}
    )
    assert bad.status_code == 400 and "dynamic-allocation.executor-idle-timeout" in bad.text
    spark.sql(
        f"CREATE TABLE local.db.dra (id BIGINT, cat STRING, v STRING) USING iceberg "
        f"TBLPROPERTIES ({PROPS}, 'self-optimizing.group' = 'dra')"
    )
    for i in range(6):
        spark.sql(f"INSERT INTO local.db.dra SELECT id, 'a', 'v' FROM range({i * 100}, {i * 100 + 100})")
    before = checksum(spark, "local.db.dra")
    assert optimizers(server, "dra") == []
    api.post("/catalogs/local/refresh")

    (started,) = wait_for("an optimizer to be started", lambda: optimizers(server, "dra"), timeout=120)
    assert started["resource_id"].startswith("local-dra-") and started["threads"] == 1
    process = wait_for(
        "the table compacted",
        lambda: next(
            (p for p in api.get("/processes", params={"table": "local.db.dra"}).json() if p["status"] != "running"),
            None,
        ),
        timeout=180,
    )
    assert process["status"] == "success", process
    drained = time.monotonic()
    wait_for("the idle optimizer to be drained", lambda: optimizers(server, "dra") == [], timeout=150)
    assert time.monotonic() - drained > 20  # not before its idle timeout
    allocation = api.get("/resource-groups/dra").json()["allocation"]
    assert allocation["scale_ups"] == 1 and allocation["scale_downs"] == 1 and allocation["forced_stops"] == 0
    scraped = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=10).text
    assert 'lakewarden_dynamic_allocation_decisions_total{direction="down",group="dra"} 1.0' in scraped
    # the idle gauge is the maintainer's count at its last pass: the pass after the optimizer left says 0
    wait_for(
        "no idle optimizer in the gauge",
        lambda: (
            'lakewarden_group_idle_optimizers{group="dra"} 0.0'
            in httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=10).text
        ),
        timeout=30,
    )
    spark.sql("REFRESH TABLE local.db.dra")
    assert checksum(spark, "local.db.dra") == before
