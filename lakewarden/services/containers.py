"""Containers start and release optimizers for resource groups; the maintainer keeps their count right.

A resource group whose container is `local` and whose property `instances` is N has N optimizer
processes kept alive on this machine by the server, as Amoro's ResourceMaintainer does: a process
that exits is started again, extra ones are released (SIGTERM: they finish their running tasks).
Each optimizer is told its resource id, and the server stopping (or dying) stops them too.
Containers are a registry of implementations by name, so others (spark-submit, kubernetes) fit in. An
`external` container starts nothing: optimizers started outside lakewarden register into its groups, and the
keeper times them out like any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.config import Config, ContainerConfig
from lakewarden.services.loop import LoopService
from lakewarden.store import groups as group_store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when the server process dies."""
    with contextlib.suppress(OSError):  # not Linux: nothing asks the child to follow its parent
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Instance:
    resource_id: str
    group: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def release(self, timeout: float = 60.0) -> None:
        """SIGTERM: the optimizer finishes its running tasks, unregisters and exits."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("optimizer %s did not stop in %.0fs: killing it", self.resource_id, timeout)
                self.process.kill()
                self.process.wait()
        log.info("released optimizer %s of group %s", self.resource_id, self.group)


@dataclass
class LocalContainer:
    """Optimizers as child processes of the server: `lakewarden optimizer` with local[parallelism] Spark."""

    name: str
    server_url: str
    log_dir: Path
    properties: dict[str, str] = field(default_factory=dict)
    # a token that lets the optimizer register with its group (and nothing else); None: auth is off
    registration_token: Callable[[str], str] | None = None
    trusted_certificate: Path | None = None  # the server's own certificate, when it serves TLS

    def start(self, group: str, group_properties: dict[str, str]) -> Instance:
        resource_id = f"{self.name}-{group}-{uuid.uuid4().hex[:8]}"
        parallelism = group_properties.get("parallelism", self.properties.get("parallelism", "1"))
        memory = group_properties.get("memory", self.properties.get("memory", "2g"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{resource_id}.log"
        command = [
            sys.executable,
            "-m",
            "lakewarden.cli.main",
            "optimizer",
            "--server",
            self.server_url,
            "--group",
            group,
            "--parallelism",
            parallelism,
            "--driver-memory",
            memory,
            "--resource-id",
            resource_id,
        ]
        env = {**os.environ, **{k[len("export.") :]: v for k, v in self.properties.items() if k.startswith("export.")}}
        env.pop("LAKEWARDEN_TOKEN", None)  # never the server's own environment's credential
        if self.trusted_certificate is not None:  # a server with TLS: its optimizers trust its certificate
            env["SSL_CERT_FILE"] = str(self.trusted_certificate)  # the optimizer's HTTP client (httpx)
            env["LAKEWARDEN_TLS_CA"] = str(self.trusted_certificate)  # its Spark's JVM (spark/tls.py)
        if self.registration_token is not None:
            env["LAKEWARDEN_TOKEN"] = self.registration_token(group)
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
        return Instance(resource_id, group, process, log_path)


ContainerFactory = Callable[[ContainerConfig, str, Path, Callable[[str], str] | None], LocalContainer]
CONTAINERS: dict[str, ContainerFactory] = {
    "local": lambda cfg, url, logs, tokens: LocalContainer(cfg.name, url, logs, dict(cfg.properties), tokens),
}


class ResourceMaintainer(LoopService):
    name = "resource-maintainer"

    def __init__(
        self,
        db: Database,
        config: Config,
        server_url: str,
        registration_token: Callable[[str], str] | None = None,
        interval_seconds: float = 5.0,
    ) -> None:
        super().__init__(interval_seconds)
        self.db = db
        self.containers: dict[str, LocalContainer] = {}
        for container in config.containers:
            if container.container_impl == "external":  # its optimizers come and go by themselves
                continue
            factory = CONTAINERS.get(container.container_impl)
            if factory is None:
                log.warning("container %s: unknown container-impl %r", container.name, container.container_impl)
                continue
            tokens = registration_token if config.ams.auth.enabled else None
            built = factory(container, server_url, config.data_dir / "optimizers", tokens)
            ssl = config.ams.http_server.ssl
            built.trusted_certificate = None if ssl is None else ssl.certfile.expanduser().resolve()
            self.containers[container.name] = built
        self.instances: dict[str, list[Instance]] = {}

    def run_once(self) -> None:
        with self.db.read() as session:
            groups = [(g.name, g.container, dict(g.properties)) for g in group_store.list_groups(session)]
        wanted = {name for name, _, _ in groups}
        for name in list(self.instances):
            if name not in wanted:  # the group was deleted
                self._scale(name, None, {}, 0)
        for name, container_name, properties in groups:
            container = self.containers.get(container_name)
            if container is None or self.stopping:
                continue
            self._scale(name, container, properties, int(properties.get("instances", "0") or 0))

    def _scale(self, group: str, container: LocalContainer | None, properties: dict[str, str], wanted: int) -> None:
        instances = self.instances.setdefault(group, [])
        for gone in [i for i in instances if not i.alive]:
            log.warning(
                "optimizer %s of group %s exited (code %s); see %s",
                gone.resource_id,
                group,
                gone.process.returncode,
                gone.log_path,
            )
            instances.remove(gone)
        while container is not None and len(instances) < wanted:
            instances.append(container.start(group, properties))
        while len(instances) > wanted:
            instances.pop().release()

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        for instances in self.instances.values():
            for instance in instances:
                instance.release()
        self.instances.clear()
