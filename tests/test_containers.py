"""The spark container's spark-submit command lines for each master and deploy mode, and how optimizers are
released: asked at their heartbeat (the only way to reach a driver that runs on a cluster), else signalled."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from lakewarden.services.resources.containers import ContainerError, Instance, LocalContainer, SparkContainer
from lakewarden.services.resources.resource_maintainer import ResourceMaintainer
from lakewarden.spark.jars import JAVA_JAR, maven_coordinates
from lakewarden.store import allocation as allocation_store
from lakewarden.store import processes as store
from lakewarden.store.database import as_utc, utcnow
from tests.servers import LAKEWARDEN
from tests.test_scheduling import ctx_of


def container(tmp_path: Path, server: str = "http://127.0.0.1:1630") -> SparkContainer:
    return SparkContainer("cluster", server, tmp_path, {"driver-memory": "1g"}, lambda group: f"reg-{group}")


def option(command: list[str], name: str) -> list[str]:
    """Every value given to an option (`--conf` appears many times)."""
    return [command[i + 1] for i, arg in enumerate(command) if arg == name]


@pytest.mark.spark  # asks `lakewarden setup-spark --submit-command` for the jars, as the server does
@pytest.mark.parametrize(
    ("master", "wait", "env"),
    [
        ("yarn", "spark.yarn.submit.waitAppCompletion", "spark.yarn.appMasterEnv.LAKEWARDEN_TOKEN"),
        ("k8s://https://k8s.example:6443", "spark.kubernetes.submission.waitAppCompletion", None),
    ],
)
def test_cluster_mode_runs_the_driver_on_yarn_and_kubernetes(
    tmp_path: Path, master: str, wait: str, env: str | None
) -> None:
    env = env or "spark.kubernetes.driverEnv.LAKEWARDEN_TOKEN"
    spark = container(tmp_path)
    group = {"spark-master": master, "deploy-mode": "cluster", "server-url": "https://lw.example:1630"}
    group["optimizer-program"] = "local:///opt/lakewarden/submitted.py"
    command = spark.command("etl", group, "cluster-etl-1")
    assert option(command, "--deploy-mode") == ["cluster"] and option(command, "--master") == [master]
    confs = option(command, "--conf")
    assert f"{wait}=true" in confs  # spark-submit lives as long as the application: its death is noticed
    assert f"{env}=reg-etl" in confs  # the driver's environment is the cluster's: the credential goes along
    assert option(command, "--driver-class-path") == []  # no paths of this machine for a driver elsewhere
    (jars,) = option(command, "--jars")
    assert all(Path(jar).is_file() for jar in jars.split(","))  # spark-submit uploads them
    program = command.index("local:///opt/lakewarden/submitted.py")
    assert command[program + 1 : program + 3] == ["--server", "https://lw.example:1630"]  # the program's options
    assert option(command, "--resource-id") == ["cluster-etl-1"] and option(command, "--group") == ["etl"]

    # client mode: the driver here, the JDBC drivers on its class path, lakewarden's own program
    client = spark.command("etl", {"spark-master": master}, "cluster-etl-2")
    assert option(client, "--deploy-mode") == ["client"] and option(client, "--driver-class-path")
    assert Path(client[client.index("--server") - 1]).name == "submitted.py"
    assert not any(c.startswith(("spark.yarn", "spark.kubernetes")) for c in option(client, "--conf"))

    maven = spark.command("etl", {**group, "spark-jars": "maven"}, "cluster-etl-3")
    assert option(maven, "--packages") == [",".join(maven_coordinates())]
    assert [Path(j).name for j in option(maven, "--jars")] == [JAVA_JAR]  # only lakewarden's own classes


def test_the_local_container_gives_its_optimizers_the_group_s_java_options(tmp_path: Path) -> None:
    local = LocalContainer("local", "http://127.0.0.1:1630", tmp_path, {"java-options": "-Xss2m"})
    assert "--java-options=-Xss2m" in local.command("etl", {}, "local-etl-1")  # the container's
    chosen = local.command("etl", {"java-options": "-XX:+UseG1GC"}, "local-etl-2")  # the group's, over it
    assert [a for a in chosen if a.startswith("--java-options")] == ["--java-options=-XX:+UseG1GC"]
    assert "--java-options=" in local.command("etl", {"java-options": ""}, "local-etl-3")  # the JVM's defaults
    unset = LocalContainer("local", "http://127.0.0.1:1630", tmp_path).command("etl", {}, "local-etl-4")
    assert not [a for a in unset if a.startswith("--java-options")]  # the optimizer's own (JAVA_OPTIONS)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"spark-master": "spark://127.0.0.1:7077", "deploy-mode": "cluster"}, "cannot run a Python driver"),
        ({"spark-master": "local[2]", "deploy-mode": "cluster"}, "cannot run a Python driver"),
        ({"spark-master": "yarn", "deploy-mode": "cluster"}, "set server-url"),  # the server on loopback
        ({"spark-master": "yarn", "deploy-mode": "remote"}, "neither client nor cluster"),
        ({"spark-master": "yarn", "spark-jars": "ivy"}, "spark-jars 'ivy'"),
        ({"spark-master": "mesos://m:5050"}, "is not a Spark master URL"),
        ({}, "spark-master is not set"),
        ({"spark-master": "yarn", "spark-submit": "/nowhere/spark-submit"}, "spark-submit not found"),
        ({"spark-master": "yarn", "engines": "hudi"}, "carry Iceberg's only"),
    ],
)
def test_settings_that_cannot_work_are_refused_with_the_reason(
    tmp_path: Path, group: dict[str, str], message: str
) -> None:
    with pytest.raises(ContainerError, match=message):
        container(tmp_path).command("etl", group, "cluster-etl-1")


def test_a_heartbeat_tells_the_optimizers_of_a_released_resource_to_leave(client: TestClient) -> None:
    ctx = ctx_of(client)
    tokens = {}
    for resource in ("r-1", "r-2"):
        body = {"group": "default", "parallelism": 1, "resource_id": resource}
        tokens[resource] = client.post("/api/v1/optimizer/register", json=body).json()["token"]
    with ctx.db.write() as session:
        assert store.ask_to_leave(session, "r-1") == 1
        assert store.ask_to_leave(session, "r-unknown") == 0

    def touch(resource: str) -> bool:
        answer = client.post("/api/v1/optimizer/touch", json={"token": tokens[resource]})
        assert answer.status_code == 200, answer.text
        return bool(answer.json()["leave"])

    assert touch("r-1") and not touch("r-2")
    shown = client.get("/api/v1/resource-groups/default/optimizers").json()
    assert {o["resource_id"] for o in shown} == {"r-1", "r-2"}  # asked, not removed: it leaves by itself


def test_a_draining_optimizer_stays_alive_until_its_heartbeat_tells_it_to_leave(client: TestClient) -> None:
    """Its polls (empty: it takes nothing new) still count as heartbeats, and it is told to beat at least three
    times per heart-beat-timeout: were it lost first, it would register again and never hear that it should leave."""
    ctx = ctx_of(client)
    body = {"group": "default", "parallelism": 1, "resource_id": "r-1"}
    registered = client.post("/api/v1/optimizer/register", json=body).json()
    assert registered["heartbeat_seconds"] <= ctx.keeper.heartbeat_timeout.total_seconds() / 3
    token = registered["token"]
    with ctx.db.write() as session:
        store.ask_to_leave(session, "r-1")
        store.get_optimizer(session, token).last_heartbeat_at = utcnow() - ctx.keeper.heartbeat_timeout * 0.9
    polled = client.post("/api/v1/optimizer/poll", json={"token": token, "thread_id": 0, "timeout_seconds": 0})
    assert polled.status_code == 204
    with ctx.db.read() as session:
        beat = as_utc(store.get_optimizer(session, token).last_heartbeat_at)
    assert utcnow() - beat < timedelta(seconds=5)
    ctx.keeper.release()  # the keeper's pass: not lost
    answer = client.post("/api/v1/optimizer/touch", json={"token": token})
    assert answer.status_code == 200 and answer.json()["leave"] is True


def sleeper(tmp_path: Path, ignore_term: bool) -> Instance:
    """A stand-in optimizer process: exits when its `leave` file appears; ignores SIGTERM if told to."""
    script = (
        "import os, signal, sys, time\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
        + f"while not os.path.exists({str(tmp_path / 'leave')!r}): time.sleep(0.05)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    return Instance("cluster-etl-1", "etl", process, tmp_path / "log")


def test_release_asks_first_then_signals_a_local_driver(tmp_path: Path) -> None:
    asked: list[float] = []

    def ask() -> None:
        asked.append(time.monotonic())
        if len(asked) == 2:  # it hears the request at its second heartbeat
            (tmp_path / "leave").touch()

    instance = sleeper(tmp_path, ignore_term=True)
    instance.release(timeout=60, ask=ask)
    assert len(asked) == 2 and returncode(instance) == 0  # it left by itself: no signal

    # a local driver that does not hear the request is signalled after half the time
    (tmp_path / "leave").unlink()
    instance = sleeper(tmp_path, ignore_term=False)
    begun = time.monotonic()
    instance.release(timeout=4, ask=lambda: None)
    # SIGTERM at half the time (2 s), well before the SIGKILL the deadline (4 s) would bring
    assert returncode(instance) == -15 and time.monotonic() - begun > 1.5


def returncode(instance: Instance) -> int | None:
    assert instance.process is not None
    return instance.process.returncode


def test_a_remote_driver_is_never_signalled_and_its_client_killed_at_the_deadline(tmp_path: Path) -> None:
    instance = sleeper(tmp_path, ignore_term=False)
    instance.driver_remote = True
    begun = time.monotonic()
    instance.release(timeout=3, ask=lambda: None)
    assert returncode(instance) == -9 and time.monotonic() - begun >= 3  # SIGKILL, no SIGTERM before


def test_setup_spark_prints_the_arguments_for_each_deploy_mode_and_refuses_others() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*LAKEWARDEN, "setup-spark", "--submit-args", *args], capture_output=True, text=True, check=False
        )

    refused = run("--deploy-mode", "remote")
    assert refused.returncode == 1 and "--deploy-mode 'remote'" in refused.stderr and "Traceback" not in refused.stderr
    maven = run("--maven", "--deploy-mode", "cluster")
    assert maven.returncode == 0, maven.stderr
    words = shlex.split(maven.stdout.strip().splitlines()[-1])
    assert words[:2] == ["--packages", ",".join(maven_coordinates())] and words[-1].endswith("cli/submitted.py")


def test_an_optimizer_that_registered_and_died_is_replaced_at_once(client: TestClient, tmp_path: Path) -> None:
    """Back-off is for optimizers that cannot start (a failing submission): one that registered with the server
    and then died (killed, its JVM lost) is replaced at the next pass, or its tasks wait minutes for nothing
    (found by the chaos harness: after a few kills the back-off had grown to minutes)."""
    ctx = ctx_of(client)
    maintainer = ResourceMaintainer(ctx.db, ctx.config, "http://127.0.0.1:1")
    started: list[Instance] = []

    class StandIn:  # starts a process that only waits, as a container starts an optimizer
        name = "local"

        def start(self, group: str, properties: dict[str, str]) -> Instance:
            process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
            started.append(Instance(f"stand-in-{len(started)}", group, process, tmp_path / "log"))
            return started[-1]

    stand_in: Any = StandIn()
    try:
        maintainer._scale("default", stand_in, {}, 1)
        body = {"group": "default", "parallelism": 1, "resource_id": "stand-in-0"}
        assert client.post("/api/v1/optimizer/register", json=body).status_code == 200
        maintainer._scale("default", stand_in, {}, 1)
        assert started[0].registered and started[0].process is not None and started[1:] == []
        started[0].process.kill()
        started[0].process.wait()
        maintainer._scale("default", stand_in, {}, 1)
        assert len(started) == 2 and "default" not in maintainer.errors  # replaced at once
        assert started[1].process is not None
        started[1].process.kill()  # dies young, never registered: a failing start, backed off
        started[1].process.wait()
        maintainer._scale("default", stand_in, {}, 1)
        assert len(started) == 2 and "next try in" in maintainer.errors["default"]
    finally:
        stop_all(started)


def stop_all(started: list[Instance]) -> None:
    for instance in started:
        if instance.process is not None and instance.process.poll() is None:
            instance.process.kill()
            instance.process.wait()


def test_a_new_leader_adopts_the_optimizers_the_last_one_started(client: TestClient, tmp_path: Path) -> None:
    """Optimizers a container started are recorded: a maintainer that takes over (a new leader) counts the
    registered, heartbeating ones as its group's and asks them to leave when there are too many, instead of
    starting doubles; the records of one that never registered, and of one that stopped heartbeating, go."""
    ctx = ctx_of(client)
    started: list[Instance] = []

    class StandIn:
        name = "local"

        def start(self, group: str, properties: dict[str, str]) -> Instance:
            process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
            started.append(Instance(f"stand-in-{len(started)}", group, process, tmp_path / "log"))
            return started[-1]

    def register(resource_id: str) -> str:
        body = {"group": "default", "parallelism": 1, "resource_id": resource_id}
        return str(client.post("/api/v1/optimizer/register", json=body).json()["token"])

    def recorded() -> list[str]:
        with ctx.db.read() as session:
            return [r.resource_id for r in allocation_store.recorded_resources(session, "default")]

    stand_in: Any = StandIn()
    first = ResourceMaintainer(ctx.db, ctx.config, "http://node-a")
    try:
        first._scale("default", stand_in, {}, 3)
        token = register("stand-in-0")
        stale = register("stand-in-2")
        with ctx.db.write() as session:  # stand-in-2 stopped heartbeating a minute ago
            session.execute(
                text("UPDATE optimizer SET last_heartbeat_at = :at WHERE token = :token"),
                {"at": datetime.now(UTC) - timedelta(minutes=1), "token": stale},
            )
        with ctx.db.read() as session:
            rows = allocation_store.recorded_resources(session, "default")
        assert [(r.resource_id, r.started_by) for r in rows] == [(f"stand-in-{i}", "http://node-a") for i in range(3)]

        second = ResourceMaintainer(ctx.db, ctx.config, "http://node-b")  # the first leader is gone
        second._adopt("default", rows)
        assert [(i.resource_id, i.process, i.registered) for i in second.instances["default"]] == [
            ("stand-in-0", None, True)
        ]
        assert recorded() == ["stand-in-0"]
        second._scale("default", stand_in, {}, 1)
        assert len(started) == 3  # no doubles
        second._scale("default", stand_in, {}, 0)  # too many: asked to leave, its record goes
        touched = client.post("/api/v1/optimizer/touch", json={"token": token}).json()
        assert touched["leave"] is True and recorded() == []
    finally:
        stop_all(started)
