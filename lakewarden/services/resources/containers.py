"""Containers start and release optimizers for resource groups (services/resources/resource_maintainer.py keeps
their count right).

A `local` container runs each optimizer as a process on this machine; a `spark` container submits it to a
Spark master with spark-submit. Each optimizer is told its resource id, and the server stopping (or dying)
stops the ones it started. Containers are a registry of implementations by name (`CONTAINERS`), so others
(kubernetes) fit in. An `external` container starts nothing: optimizers started outside lakewarden register
into its groups, and the keeper times them out like any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from lakewarden.config import ContainerConfig
from lakewarden.domain.groups import group_engines

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1
# an optimizer that ran this long started fine: its group's errors and back-off are cleared
OPTIMIZER_LOGS = "optimizers"  # under the data directory: one log per optimizer a local container started


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when the server process dies."""
    with contextlib.suppress(OSError):  # not Linux: nothing asks the child to follow its parent
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def descendants(pid: int) -> list[tuple[int, str]]:
    """The processes below `pid` (pid, command name), read from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append((int(entry.name), name))
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


@dataclass
class Instance:
    resource_id: str
    group: str
    # None: adopted, started by another leader (recorded in the system database); alive while it heartbeats
    process: subprocess.Popen[bytes] | None
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)
    # spark-submit runs the optimizer's Python as a child of its JVM: the signal goes to the Python driver,
    # which finishes its tasks, unregisters and stops Spark (the JVM then exits with it)
    driver_in_child: bool = False
    # the driver runs on the cluster (deploy mode cluster): no signal reaches it, only the server's request
    driver_remote: bool = False
    # it registered with the server: it started well, so its end is no sign of a failing submission
    registered: bool = False
    # adopted ones only: its optimizer is registered and sent a heartbeat lately (the only sign it lives)
    heartbeating: bool = False
    threads: int = 1

    @property
    def alive(self) -> bool:
        if self.process is None:
            return self.heartbeating
        return self.process.poll() is None

    def release(self, timeout: float = 60.0, ask: Callable[[], None] | None = None) -> None:
        """The optimizer finishes its running tasks, unregisters and exits: asked at its heartbeat (`ask`
        records the request, repeated while it runs), else by SIGTERM; SIGKILL after `timeout`. An adopted one is
        only asked: no signal reaches a process another server started."""
        if self.process is None:
            if ask is not None:
                ask()
            log.info("asked adopted optimizer %s of group %s to leave", self.resource_id, self.group)
            return
        process = self.process
        deadline = time.monotonic() + timeout
        if ask is not None:  # a remote driver hears only this; a local one gets half the time before a signal
            until = deadline if self.driver_remote else time.monotonic() + timeout / 2
            while self.alive and time.monotonic() < until:
                ask()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(min(5.0, max(until - time.monotonic(), 0.0)))
        if self.alive and not self.driver_remote:
            target = process.pid
            if self.driver_in_child:
                drivers = [pid for pid, name in descendants(process.pid) if name.startswith("python")]
                target = drivers[0] if drivers else target
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGTERM)
        try:
            process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            log.warning("optimizer %s did not stop in %.0fs: killing it", self.resource_id, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.info("released optimizer %s of group %s", self.resource_id, self.group)


class ContainerError(RuntimeError):
    """A container cannot start an optimizer as configured: shown on the group, retried with back-off."""


@dataclass
class LocalContainer:
    """Optimizers as child processes of the server: `lakewarden optimizer` with local[parallelism] Spark."""

    driver_in_child: ClassVar[bool] = False  # whether the optimizer's Python runs under a process of its own

    name: str
    server_url: str
    log_dir: Path
    properties: dict[str, str] = field(default_factory=dict)
    # a token that lets the optimizer register with its group (and nothing else); None: auth is off
    registration_token: Callable[[str], str] | None = None
    trusted_certificate: Path | None = None  # the server's own certificate, when it serves TLS

    def setting(self, group_properties: dict[str, str], key: str, default: str | None = None) -> str | None:
        """A group property, else the container's, else `default`."""
        return group_properties.get(key, self.properties.get(key, default))

    def command(self, group: str, group_properties: dict[str, str], resource_id: str) -> list[str]:
        """The optimizer's command line (a ContainerError when the group's settings cannot make one)."""
        memory = self.setting(group_properties, "memory", "2g") or "2g"
        java = self.setting(group_properties, "java-options")
        return [
            sys.executable,
            "-m",
            "lakewarden.cli.main",
            *self.optimizer_options(group, group_properties, resource_id),
            "--driver-memory",
            memory,
            *([] if java is None else [f"--java-options={java}"]),
        ]

    def optimizer_options(self, group: str, group_properties: dict[str, str], resource_id: str) -> list[str]:
        parallelism = self.setting(group_properties, "parallelism", "1") or "1"
        return [
            "optimizer",
            "--server",
            self.setting(group_properties, "server-url") or self.server_url,  # as optimizers reach this server
            "--group",
            group,
            "--parallelism",
            parallelism,
            "--resource-id",
            resource_id,
            *(f"--engine={engine}" for engine in group_engines(group_properties)),
        ]

    def start(self, group: str, group_properties: dict[str, str]) -> Instance:
        resource_id = f"{self.name}-{group}-{uuid.uuid4().hex[:8]}"
        command = self.command(group, group_properties, resource_id)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{resource_id}.log"
        env = {**os.environ, **{k[len("export.") :]: v for k, v in self.properties.items() if k.startswith("export.")}}
        env.pop("LAKEWARDEN_TOKEN", None)  # never the server's own environment's credential
        if self.trusted_certificate is not None:  # a server with TLS: its optimizers trust its certificate
            env["SSL_CERT_FILE"] = str(self.trusted_certificate)  # the optimizer's HTTP client (httpx)
            env["LAKEWARDEN_TLS_CA"] = str(self.trusted_certificate)  # its Spark's JVM (spark/tls.py)
        if self.registration_token is not None:
            env["LAKEWARDEN_TOKEN"] = self.registration_token(group)
        remote = self.driver_remote(group_properties)
        if self.driver_in_child and not remote:  # spark-submit starts the optimizer's Python: this one
            env.setdefault("PYSPARK_PYTHON", sys.executable)
            env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        with log_path.open("ab") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,
                start_new_session=True,
            )
        log.info("started optimizer %s for group %s (pid %d)", resource_id, group, process.pid)
        threads = int(self.setting(group_properties, "parallelism", "1") or "1")
        return Instance(
            resource_id,
            group,
            process,
            log_path,
            driver_in_child=self.driver_in_child,
            driver_remote=remote,
            threads=threads,
        )

    def driver_remote(self, group_properties: dict[str, str]) -> bool:
        """Whether the optimizer's driver runs elsewhere than under the process this container starts."""
        return False


# what the spark container passes to spark-submit, from group (or container) properties
SPARK_SUBMIT_OPTIONS = {
    "driver-memory": "--driver-memory",
    "executor-memory": "--executor-memory",
    "executor-cores": "--executor-cores",
    "num-executors": "--num-executors",
    "total-executor-cores": "--total-executor-cores",
}
MASTER_SCHEMES = ("spark://", "yarn", "k8s://", "local")
# masters whose clusters run Python drivers (cluster deploy mode), and what makes spark-submit wait for the
# application to end there (so the container notices when it dies) and hands the driver an environment variable
CLUSTER_MODE = {
    "yarn": ("spark.yarn.submit.waitAppCompletion", "spark.yarn.appMasterEnv."),
    "k8s://": ("spark.kubernetes.submission.waitAppCompletion", "spark.kubernetes.driverEnv."),
}


@dataclass
class SparkContainer(LocalContainer):
    """Optimizers submitted as Spark applications with pyspark's spark-submit (Amoro's SparkOptimizerContainer).

    Group (or container) properties: `spark-master` (spark://, yarn, k8s://); `deploy-mode` client (the
    optimizer's driver runs on the server's machine, its rewrites on the cluster's executors) or cluster (YARN
    and Kubernetes run the driver too; set `server-url` to an address of this server the cluster reaches);
    `driver-memory`, `executor-memory`, `executor-cores`, `num-executors` or `total-executor-cores`; any
    `spark-conf.<key>`; `spark-jars` local (the jars lakewarden builds, default) or maven (`--packages`);
    `optimizer-program` (cluster mode: where the driver finds lakewarden's program, e.g. local:// in an image).
    Released through its heartbeat (it finishes its tasks, unregisters and stops its application); in client
    mode a SIGTERM to its Python driver follows if it does not."""

    driver_in_child: ClassVar[bool] = True
    _submit: dict[tuple[str, bool], list[str]] = field(default_factory=dict, repr=False)

    def driver_remote(self, group_properties: dict[str, str]) -> bool:
        return self.setting(group_properties, "deploy-mode", "client") == "cluster"

    def command(self, group: str, group_properties: dict[str, str], resource_id: str) -> list[str]:
        master = self.setting(group_properties, "spark-master")
        if not master:
            raise ContainerError(
                "spark-master is not set (a group or container property: spark://host:7077, yarn, k8s://…)"
            )
        if not master.startswith(MASTER_SCHEMES):
            raise ContainerError(f"spark-master {master!r} is not a Spark master URL (spark://, yarn, k8s://, local)")
        mode = self.setting(group_properties, "deploy-mode", "client") or "client"
        cluster = next((v for k, v in CLUSTER_MODE.items() if master.startswith(k)), None)
        if mode not in ("client", "cluster"):
            raise ContainerError(f"deploy-mode {mode!r} is neither client nor cluster")
        if mode == "cluster" and cluster is None:
            raise ContainerError(
                f"deploy-mode cluster: {master} cannot run a Python driver (only YARN and Kubernetes can); use client"
            )
        jars = self.setting(group_properties, "spark-jars", "local")
        if jars not in ("local", "maven"):
            raise ContainerError(f"spark-jars {jars!r} is neither local (the jars lakewarden builds) nor maven")
        engines = group_engines(group_properties)
        if engines:  # their bundles must be on each JVM's own class path, which a submit does not set up yet
            raise ContainerError(
                f"engines {', '.join(engines)}: a spark container's optimizers carry Iceberg's only; run the "
                "table services of other formats in a group of a local container"
            )
        submit_command = self.submit_command(mode, jars == "maven")
        submit = self.setting(group_properties, "spark-submit") or submit_command[0]
        if not Path(submit).is_file():
            raise ContainerError(f"spark-submit not found at {submit}")
        command = [submit, "--master", master, "--deploy-mode", mode, "--name", f"lakewarden-optimizer-{resource_id}"]
        for key, option in SPARK_SUBMIT_OPTIONS.items():
            value = self.setting(group_properties, key)
            if value:
                command += [option, value]
        passthrough = {**self.properties, **group_properties}
        for key in sorted(passthrough):
            if key.startswith("spark-conf."):
                command += ["--conf", f"{key[len('spark-conf.') :]}={passthrough[key]}"]
        options = self.optimizer_options(group, group_properties, resource_id)[1:]
        program = submit_command[-1]
        if cluster is not None and mode == "cluster":
            server = options[options.index("--server") + 1]
            if _loopback(server):
                raise ContainerError(
                    f"deploy-mode cluster: the driver runs on the cluster and cannot reach {server}; "
                    "set server-url to an address of this server the cluster reaches"
                )
            wait, driver_env = cluster
            command += ["--conf", f"{wait}=true"]  # spark-submit lives as long as the application
            if self.registration_token is not None:  # the driver's environment is the cluster's, not this one's
                command += ["--conf", f"{driver_env}LAKEWARDEN_TOKEN={self.registration_token(group)}"]
            program = self.setting(group_properties, "optimizer-program") or program
        return command + submit_command[1:-1] + [program, *options]

    def submit_command(self, deploy_mode: str = "client", maven: bool = False) -> list[str]:
        """pyspark's spark-submit, the jars and the optimizer's program, as `lakewarden setup-spark
        --submit-command` prints them (asked once per kind: the jars do not change while the server runs)."""
        key = (deploy_mode, maven)
        if key not in self._submit:
            asked = ["setup-spark", "--submit-command", "--deploy-mode", deploy_mode, *(["--maven"] if maven else [])]
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "lakewarden.cli.main", *asked],
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise ContainerError("setting up the Spark jars took more than 15 minutes") from exc
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise ContainerError(f"the Spark jars cannot be set up: {reason}")
            self._submit[key] = shlex.split(lines[-1])
        return self._submit[key]


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


ContainerFactory = Callable[[ContainerConfig, str, Path, Callable[[str], str] | None], LocalContainer]
CONTAINERS: dict[str, ContainerFactory] = {
    "local": lambda cfg, url, logs, tokens: LocalContainer(cfg.name, url, logs, dict(cfg.properties), tokens),
    "spark": lambda cfg, url, logs, tokens: SparkContainer(cfg.name, url, logs, dict(cfg.properties), tokens),
}
