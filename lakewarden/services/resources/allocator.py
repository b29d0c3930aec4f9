"""Dynamic allocation's rounds for the resource maintainer: a group's load read from the system database, the
decision of domain/dynamic_allocation.py, and the starts and drains it asks for (Amoro's scaleIfNeeded).

A drained optimizer is asked to leave at its heartbeat: it takes no new task, finishes those it runs,
unregisters and exits. Past `drain-timeout` the process is killed and the keeper hands its tasks out again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lakewarden.domain.dynamic_allocation import AllocationConfig, AllocationState, Candidate, GroupLoad
from lakewarden.services.resources.containers import Instance
from lakewarden.store import allocation as allocation_store
from lakewarden.store import processes as process_store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
BOOT_SECONDS = 300.0  # an optimizer started this long ago that never registered is not coming


@dataclass
class GroupAllocation:
    """What the metrics and the group's page show of a group's dynamic allocation on this node."""

    state: AllocationState = field(default_factory=AllocationState)
    draining: dict[str, float] = field(default_factory=dict)  # resource id -> when it is stopped (monotonic)
    scale_ups: int = 0
    scale_downs: int = 0
    forced: int = 0
    idle_optimizers: int = 0
    threads: int = 0
    backlog_seconds: float = 0.0


class Allocator:
    """Runs a round of dynamic allocation for a group whose `dynamic-allocation.enabled` is true."""

    def __init__(
        self,
        db: Database,
        release_tokens: Callable[[set[str]], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.release_tokens = release_tokens  # forgets optimizers and hands their tasks out again (the keeper)
        self.clock = clock
        self.groups: dict[str, GroupAllocation] = {}

    def forget(self, group: str) -> None:
        self.groups.pop(group, None)

    def round(
        self,
        group: str,
        properties: dict[str, str],
        config: AllocationConfig,
        instances: list[Instance],
        start: Callable[[dict[str, str]], Instance | None],
    ) -> None:
        """One look at the group: `instances` are the optimizers started for it (started ones are added), `start`
        starts one with the given group properties (None when it could not)."""
        now = self.clock()
        allocation = self.groups.setdefault(group, GroupAllocation())
        with self.db.read() as session:
            facts = allocation_store.group_facts(session, group)
        held = facts.tasks_by_optimizer
        by_resource = {o.resource_id: o for o in facts.optimizers if o.resource_id is not None}
        self._drains(group, allocation, instances, by_resource, now)
        leaving = [o for o in facts.optimizers if o.leaving]
        registered_threads = sum(o.threads for o in facts.optimizers)
        draining_threads = sum(o.threads for o in leaving)
        starting = [
            i
            for i in instances
            if i.alive and i.resource_id not in by_resource and now - i.started_at < BOOT_SECONDS and not i.registered
        ]
        # a draining optimizer takes no new task: counted as gone, its tasks with it
        effective = registered_threads - draining_threads + sum(i.threads for i in starting)
        busy = sum(held.values()) - sum(held.get(o.token, 0) for o in leaving)
        allocation.state.observe({o.token for o in facts.optimizers}, held, now)
        allocation.idle_optimizers = sum(1 for o in facts.optimizers if not o.leaving and held.get(o.token, 0) == 0)
        allocation.threads = registered_threads
        load = GroupLoad(effective, busy, facts.serviceable, facts.pending_tables, held)
        add = allocation.state.scale_up(load, config, now)
        allocation.backlog_seconds = allocation.state.backlog_seconds(now)
        if add > 0:
            allocation.scale_ups += 1
            log.info(
                "group %s: starting %d optimizer(s) of %d thread(s) (threads %d, busy %d, planned %d, pending %d)",
                group,
                add,
                config.executor_parallelism,
                effective,
                busy,
                facts.serviceable,
                facts.pending_tables,
            )
            started = {**properties, "parallelism": str(config.executor_parallelism)}
            for _ in range(add):
                instance = start(started)
                if instance is None:
                    break
                instance.threads = config.executor_parallelism
                instances.append(instance)
            return
        if allocation.state.demand_seen:  # the capacity a scale-down would remove is what the next round asks for
            return
        ours = {i.resource_id for i in instances}
        candidates = [
            Candidate(o.token, o.threads)
            for o in facts.optimizers
            if o.resource_id in ours and not o.leaving and o.resource_id not in allocation.draining
        ]
        victim = allocation.state.scale_down(candidates, registered_threads, draining_threads, config, now)
        if victim is None:
            return
        resource = next(o.resource_id for o in facts.optimizers if o.token == victim)
        assert resource is not None
        with self.db.write() as session:
            process_store.ask_to_leave(session, resource)
        allocation.draining[resource] = now + config.drain_timeout.total_seconds()
        allocation.scale_downs += 1
        log.info(
            "group %s: draining optimizer %s, idle %.0fs",
            group,
            resource,
            allocation.state.idle_seconds(victim, now),
        )

    def _drains(
        self,
        group: str,
        allocation: GroupAllocation,
        instances: list[Instance],
        by_resource: dict[str, allocation_store.RegisteredOptimizer],
        now: float,
    ) -> None:
        """Drains that ended (the optimizer left) are forgotten; those past drain-timeout are stopped, their
        optimizer forgotten and its tasks handed out again."""
        for resource, deadline in list(allocation.draining.items()):
            instance = next((i for i in instances if i.resource_id == resource), None)
            registered = by_resource.get(resource)
            if instance is None or not instance.alive or registered is None:
                if registered is None:
                    del allocation.draining[resource]
                continue
            if now < deadline:
                continue
            log.warning("group %s: optimizer %s did not drain within its drain-timeout: stopping it", group, resource)
            if instance.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(instance.process.pid, signal.SIGKILL)
            self.release_tokens({registered.token})
            allocation.forced += 1
            del allocation.draining[resource]
