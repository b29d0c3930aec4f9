"""The resource maintainer keeps each resource group's optimizers at its `instances`, or at what its work asks
for with `dynamic-allocation.enabled` (allocator.py).

As Amoro's ResourceMaintainer: an optimizer that exits is started again, extra ones are released (they finish their
tasks); one that dies before registering counts as a failing start and the group backs off. Every optimizer
started is recorded until gone, so a new leader adopts the live ones instead of starting them twice."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from lakewarden.config import Config
from lakewarden.domain.dynamic_allocation import AllocationConfig
from lakewarden.domain.errors import InvalidField
from lakewarden.services.loop import LoopService
from lakewarden.services.resources.allocator import Allocator
from lakewarden.services.resources.containers import (
    CONTAINERS,
    OPTIMIZER_LOGS,
    ContainerError,
    Instance,
    LocalContainer,
)
from lakewarden.store import allocation as allocation_store
from lakewarden.store import groups as group_store
from lakewarden.store import processes as process_store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.models import OptimizerResourceRow

log = logging.getLogger(__name__)

HEALTHY_SECONDS = 60.0  # an optimizer that lived this long was no failing start, registered or not
# an adopted optimizer is alive while it heartbeats (every 10 s): three missed beats and it is taken for gone
ADOPTED_HEARTBEAT = timedelta(seconds=30)


class ResourceMaintainer(LoopService):
    name = "resource-maintainer"

    def __init__(
        self,
        db: Database,
        config: Config,
        server_url: str,
        registration_token: Callable[[str], str] | None = None,
        interval_seconds: float = 5.0,
        release_tokens: Callable[[set[str]], int] | None = None,
    ) -> None:
        super().__init__(interval_seconds)
        self.db = db
        self.server_url = server_url
        # dynamic allocation; `release_tokens` forgets optimizers and hands their tasks out again (the keeper's)
        self.allocator = Allocator(db, release_tokens or (lambda _tokens: 0))
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
            recorded: dict[str, list[OptimizerResourceRow]] = {}
            for row in allocation_store.recorded_resources(session):  # read once a pass, for every group
                recorded.setdefault(row.group_name, []).append(row)
        wanted = {name for name, _, _ in groups}
        for name in list(self.instances):
            if name not in wanted:  # the group was deleted
                self._scale(name, None, {}, 0)
                self.allocator.forget(name)
        for name, container_name, properties in groups:
            container = self.containers.get(container_name)
            if container is None or self.stopping:
                continue
            self._adopt(name, recorded.get(name, []))
            try:
                allocation = AllocationConfig.of(properties)
            except InvalidField as exc:  # set before the rules: the group keeps its `instances`
                log.warning("group %s: %s", name, exc)
                allocation = None
            if allocation is not None and allocation.enabled:
                instances = self.instances.setdefault(name, [])
                self._reap(name, instances)
                start = functools.partial(self._start, name, container)
                self.allocator.round(name, properties, allocation, instances, start)
            else:
                self.allocator.forget(name)
                self._scale(name, container, properties, int(properties.get("instances", "0") or 0))

    def _adopt(self, group: str, records: list[OptimizerResourceRow]) -> None:
        """The group's recorded optimizers (`records`) that this node did not start (a leader before it did) become
        its instances while they are registered and heartbeat; the others' records go."""
        instances = self.instances.setdefault(group, [])
        mine = {i.resource_id for i in instances}
        recorded = [r for r in records if r.resource_id not in mine]
        if not recorded:
            return
        with self.db.read() as session:
            live = allocation_store.live_resources(session, [r.resource_id for r in recorded], ADOPTED_HEARTBEAT)
        now, wall = time.monotonic(), utcnow()
        for record in recorded:
            if record.resource_id not in live:
                self._forget_record(record.resource_id)
                continue
            age = (wall - as_utc(record.started_at)).total_seconds()
            log_path = self._log_dir(record.container) / f"{record.resource_id}.log"
            instances.append(
                Instance(
                    record.resource_id,
                    group,
                    None,
                    log_path,
                    started_at=now - max(age, 0.0),
                    registered=True,
                    heartbeating=True,
                    threads=record.threads,
                )
            )
            log.info("group %s: adopted optimizer %s, started by %s", group, record.resource_id, record.started_by)

    def _log_dir(self, container: str) -> Path:
        known = self.containers.get(container)
        return known.log_dir if known is not None else Path(OPTIMIZER_LOGS)

    def _start(self, group: str, container: LocalContainer, properties: dict[str, str]) -> Instance | None:
        """Start one optimizer and record it; None when the container could not (the group backs off)."""
        if time.monotonic() < self._retry_at.get(group, 0.0):
            return None
        try:
            instance = container.start(group, properties)
        except (ContainerError, OSError) as exc:
            log.warning("group %s: cannot start an optimizer: %s", group, exc)
            self._failed(group, f"cannot start an optimizer: {exc}")
            return None
        with self.db.write() as session:
            allocation_store.record_resource(
                session, instance.resource_id, group, container.name, instance.threads, self.server_url
            )
        return instance

    def _forget_record(self, resource_id: str) -> None:
        with self.db.write(any_node=True) as session:  # also as a deposed leader lets its optimizers go
            allocation_store.forget_resource(session, resource_id)

    def _scale(self, group: str, container: LocalContainer | None, properties: dict[str, str], wanted: int) -> None:
        instances = self.instances.setdefault(group, [])
        self._reap(group, instances)
        while container is not None and len(instances) < wanted:
            instance = self._start(group, container, properties)
            if instance is None:
                break
            instances.append(instance)
        while len(instances) > wanted:
            self._release(instances.pop())
        if wanted == 0:
            self.errors.pop(group, None)

    def _reap(self, group: str, instances: list[Instance]) -> None:
        """The instances that are gone leave the list and the records; a failing start backs the group off."""
        now = time.monotonic()
        self._note_registered([i for i in instances if not i.registered or i.process is None])
        for gone in [i for i in instances if not i.alive]:
            lived = now - gone.started_at
            code = "unknown" if gone.process is None else gone.process.returncode
            message = f"optimizer {gone.resource_id} exited with code {code} after {lived:.0f}s; see {gone.log_path}"
            log.log(logging.INFO if code == 0 else logging.WARNING, "group %s: %s", group, message)
            instances.remove(gone)
            self._forget_record(gone.resource_id)
            # died young before it ever registered: the submission or the application fails, back off. One that
            # registered and then died (killed, its JVM lost, out of memory) is replaced at once: its tasks wait
            if lived < HEALTHY_SECONDS and not gone.registered and gone.process is not None:
                self._failed(group, message)
        if any(now - i.started_at >= HEALTHY_SECONDS or i.registered for i in instances):
            self.errors.pop(group, None)
            self._backoff.pop(group, None)

    def _note_registered(self, instances: list[Instance]) -> None:
        """Marks the instances whose optimizer has registered with the server (alive or not by now), and the
        adopted ones whose optimizer is registered and heartbeats now."""
        started = [i for i in instances if i.process is not None]
        adopted = [i for i in instances if i.process is None]
        if not instances:
            return
        with self.db.read() as session:
            known = process_store.registered_resources(session, [i.resource_id for i in started]) if started else set()
            live = (
                allocation_store.live_resources(session, [i.resource_id for i in adopted], ADOPTED_HEARTBEAT)
                if adopted
                else set()
            )
        for instance in started:
            instance.registered = instance.registered or instance.resource_id in known
        for instance in adopted:
            instance.heartbeating = instance.resource_id in live

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

        instance.release(ask=ask if instance.driver_in_child or instance.process is None else None)
        self._forget_record(instance.resource_id)
