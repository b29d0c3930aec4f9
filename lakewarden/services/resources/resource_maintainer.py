"""The resource maintainer keeps each resource group's optimizers at the count its `instances` property asks for.

As Amoro's ResourceMaintainer does: an optimizer process that exits is started again, extra ones are released
(asked at their heartbeat, else SIGTERM: they finish their running tasks). One that dies before it ever
registered counts as a failing start, and the group backs off (10 s doubled per failure, at most 5 min); one
that registered and then died (killed, its JVM lost) is replaced at once, since its tasks wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lakewarden.config import Config
from lakewarden.services.loop import LoopService
from lakewarden.services.resources.containers import (
    CONTAINERS,
    OPTIMIZER_LOGS,
    ContainerError,
    Instance,
    LocalContainer,
)
from lakewarden.store import groups as group_store
from lakewarden.store import processes as process_store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)

HEALTHY_SECONDS = 60.0  # an optimizer that lived this long was no failing start, registered or not


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
            built = factory(container, server_url, config.data_dir / OPTIMIZER_LOGS, tokens)
            ssl = config.ams.http_server.ssl
            built.trusted_certificate = None if ssl is None else ssl.certfile.expanduser().resolve()
            self.containers[container.name] = built
        self.instances: dict[str, list[Instance]] = {}
        # per group: why its container could not keep its optimizers running (shown on the group), and when
        # to try again (a failing submission backs off: 10 s doubled per failure, at most 5 min)
        self.errors: dict[str, str] = {}
        self._retry_at: dict[str, float] = {}
        self._backoff: dict[str, float] = {}

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
        now = time.monotonic()
        self._note_registered([i for i in instances if not i.registered])
        for gone in [i for i in instances if not i.alive]:
            lived = now - gone.started_at
            message = (
                f"optimizer {gone.resource_id} exited with code {gone.process.returncode} after {lived:.0f}s; "
                f"see {gone.log_path}"
            )
            log.warning("group %s: %s", group, message)
            instances.remove(gone)
            # died young before it ever registered: the submission or the application fails, back off. One that
            # registered and then died (killed, its JVM lost, out of memory) is replaced at once: its tasks wait
            if lived < HEALTHY_SECONDS and not gone.registered:
                self._failed(group, message)
        if any(now - i.started_at >= HEALTHY_SECONDS or i.registered for i in instances):
            self.errors.pop(group, None)
            self._backoff.pop(group, None)
        while container is not None and len(instances) < wanted and now >= self._retry_at.get(group, 0.0):
            try:
                instances.append(container.start(group, properties))
            except (ContainerError, OSError) as exc:
                log.warning("group %s: cannot start an optimizer: %s", group, exc)
                self._failed(group, f"cannot start an optimizer: {exc}")
                break
        while len(instances) > wanted:
            self._release(instances.pop())
        if wanted == 0:
            self.errors.pop(group, None)

    def _note_registered(self, instances: list[Instance]) -> None:
        """Marks the instances whose optimizer has registered with the server (alive or not by now)."""
        if not instances:
            return
        with self.db.read() as session:
            known = process_store.registered_resources(session, [i.resource_id for i in instances])
        for instance in instances:
            instance.registered = instance.resource_id in known

    def _failed(self, group: str, message: str) -> None:
        backoff = min(max(2 * self._backoff.get(group, 5.0), 10.0), 300.0)
        self._backoff[group] = backoff
        self._retry_at[group] = time.monotonic() + backoff
        self.errors[group] = f"{message} (next try in {backoff:.0f}s)"

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        for instances in self.instances.values():
            for instance in instances:
                self._release(instance)
        self.instances.clear()

    def _release(self, instance: Instance) -> None:
        """Its optimizer is asked to leave at its heartbeat (see Instance.release); for a spark container only,
        whose driver may run where no signal reaches it."""

        def ask() -> None:
            with self.db.write(any_node=True) as session:  # also as a deposed leader lets its optimizers go
                process_store.ask_to_leave(session, instance.resource_id)

        instance.release(ask=ask if instance.driver_in_child else None)
