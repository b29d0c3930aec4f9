"""Dynamic allocation of a resource group's optimizers (Amoro's `dynamic-allocation.*`, its AIP-5; pure rules).

A group gets as many optimizers as its work asks for, between `min-parallelism` and `max-parallelism` threads.
The resource maintainer feeds a group's load to its AllocationState each round and starts or drains what it
decides, with the decisions of Amoro's DynamicAllocationState: the floor covered at once, starts after a sustained
backlog (doubling while the need is larger), idle optimizers drained one at a time after a cooldown.
docs/operations.md lists the properties."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from lakewarden.domain.durations import parse_duration
from lakewarden.domain.errors import InvalidField

PREFIX = "dynamic-allocation."
ENABLED = PREFIX + "enabled"
MIN_PARALLELISM = PREFIX + "min-parallelism"
MAX_PARALLELISM = PREFIX + "max-parallelism"
EXECUTOR_PARALLELISM = PREFIX + "executor-parallelism"
SCHEDULER_BACKLOG_TIMEOUT = PREFIX + "scheduler-backlog-timeout"
SUSTAINED_BACKLOG_TIMEOUT = PREFIX + "sustained-backlog-timeout"
EXECUTOR_IDLE_TIMEOUT = PREFIX + "executor-idle-timeout"
SCALE_DOWN_COOLDOWN = PREFIX + "scale-down-cooldown"
DRAIN_TIMEOUT = PREFIX + "drain-timeout"
MAX_PARALLELISM_LIMIT = 1024  # Amoro's hard limit
IDLE_TIMEOUT_MIN = timedelta(seconds=30)
DURATIONS = {  # Amoro's defaults
    SCHEDULER_BACKLOG_TIMEOUT: "1min",
    SUSTAINED_BACKLOG_TIMEOUT: "30s",
    EXECUTOR_IDLE_TIMEOUT: "5min",
    SCALE_DOWN_COOLDOWN: "1min",
    DRAIN_TIMEOUT: "15min",
}
KEYS = frozenset({ENABLED, MIN_PARALLELISM, MAX_PARALLELISM, EXECUTOR_PARALLELISM, *DURATIONS})


@dataclass(frozen=True)
class AllocationConfig:
    enabled: bool
    min_parallelism: int
    max_parallelism: int
    executor_parallelism: int
    scheduler_backlog_timeout: timedelta
    sustained_backlog_timeout: timedelta
    executor_idle_timeout: timedelta
    scale_down_cooldown: timedelta
    drain_timeout: timedelta

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> AllocationConfig:
        """The group's settings, as validate_allocation accepted them."""
        return _parse(properties)


def _parse(properties: Mapping[str, str]) -> AllocationConfig:
    enabled_text = properties.get(ENABLED, "false").strip().lower()
    if enabled_text not in ("true", "false"):
        raise InvalidField(f"properties.{ENABLED}", f"{properties[ENABLED]!r} must be true or false")

    def integer(key: str, default: int) -> int:
        raw = properties.get(key)
        if raw is None:
            return default
        try:
            return int(raw.strip())
        except ValueError:
            raise InvalidField(f"properties.{key}", f"{raw!r} is not an integer") from None

    def duration(key: str) -> timedelta:
        raw = properties.get(key, DURATIONS[key])
        try:
            value = parse_duration(raw)
        except ValueError as exc:
            raise InvalidField(f"properties.{key}", str(exc)) from None
        if value <= timedelta(0):
            raise InvalidField(f"properties.{key}", f"{raw!r} must be positive")
        return value

    return AllocationConfig(
        enabled=enabled_text == "true",
        min_parallelism=integer(MIN_PARALLELISM, 0),
        max_parallelism=integer(MAX_PARALLELISM, -1),  # required once enabled
        executor_parallelism=integer(EXECUTOR_PARALLELISM, 1),
        scheduler_backlog_timeout=duration(SCHEDULER_BACKLOG_TIMEOUT),
        sustained_backlog_timeout=duration(SUSTAINED_BACKLOG_TIMEOUT),
        executor_idle_timeout=duration(EXECUTOR_IDLE_TIMEOUT),
        scale_down_cooldown=duration(SCALE_DOWN_COOLDOWN),
        drain_timeout=duration(DRAIN_TIMEOUT),
    )


def validate_allocation(container_impl: str | None, properties: Mapping[str, str]) -> None:
    """Amoro's DynamicAllocationConfig.validate: an InvalidField naming the property that breaks a rule."""
    config = _parse(properties)
    if not config.enabled:
        return
    field_of = "properties."
    if container_impl == "external":
        raise InvalidField(
            "container", "an external container's optimizers come by themselves: dynamic allocation cannot scale them"
        )
    if config.max_parallelism < 0:
        raise InvalidField(field_of + MAX_PARALLELISM, "is required when dynamic allocation is enabled")
    if config.min_parallelism < 0:
        raise InvalidField(field_of + MIN_PARALLELISM, f"{config.min_parallelism} must not be negative")
    if config.max_parallelism < config.min_parallelism:
        raise InvalidField(
            field_of + MAX_PARALLELISM,
            f"{config.max_parallelism} must be >= min-parallelism ({config.min_parallelism})",
        )
    if config.max_parallelism > MAX_PARALLELISM_LIMIT:
        raise InvalidField(field_of + MAX_PARALLELISM, f"{config.max_parallelism} exceeds {MAX_PARALLELISM_LIMIT}")
    k = config.executor_parallelism
    if k < 1:
        raise InvalidField(field_of + EXECUTOR_PARALLELISM, f"{k} must be >= 1")
    if k > config.max_parallelism:  # not even one optimizer could start
        raise InvalidField(
            field_of + EXECUTOR_PARALLELISM, f"{k} must not exceed max-parallelism ({config.max_parallelism})"
        )
    floor = math.ceil(config.min_parallelism / k) * k
    if floor > config.max_parallelism:  # the floor is covered in whole optimizers
        raise InvalidField(
            field_of + MIN_PARALLELISM,
            f"{config.min_parallelism} needs {floor} threads in optimizers of {k}, more than max-parallelism "
            f"({config.max_parallelism})",
        )
    if config.executor_idle_timeout < IDLE_TIMEOUT_MIN:
        raise InvalidField(field_of + EXECUTOR_IDLE_TIMEOUT, "must be at least 30s")
    # idle is observed every sustained-backlog-timeout: slower than half the idle timeout, an optimizer that
    # worked between two looks could be taken for idle all along and drained
    if config.sustained_backlog_timeout * 2 > config.executor_idle_timeout:
        raise InvalidField(
            field_of + SUSTAINED_BACKLOG_TIMEOUT, "must be at most half of dynamic-allocation.executor-idle-timeout"
        )


@dataclass(frozen=True)
class TableDemand:
    """A table's planned tasks in the group: how many, its quota, the threads its tasks hold now."""

    planned: int
    quota: float
    occupied: int


def serviceable_planned(demands: Collection[TableDemand]) -> int:
    """The planned tasks more threads could run: all of a table whose quota is a share of the group's threads
    (more threads raise its limit); for a quota in threads (> 1) only what fits under that limit."""
    total = 0
    for demand in demands:
        if demand.quota <= 1:
            total += demand.planned
        else:
            total += min(demand.planned, max(0, int(demand.quota) - demand.occupied))
    return total


@dataclass(frozen=True)
class GroupLoad:
    """One look at a group: its threads (optimizers registered or starting), the threads running tasks, the
    planned tasks more threads could run, the tables waiting to be planned, and the tasks each optimizer holds."""

    threads: int
    busy: int
    serviceable: int
    pending_tables: int
    tasks_by_optimizer: Mapping[str, int]

    @property
    def planning_bound(self) -> bool:
        """Threads idle while tables wait to be planned: more optimizers would only add idle threads."""
        return self.threads > 0 and self.busy < self.threads and self.serviceable == 0 and self.pending_tables > 0


@dataclass(frozen=True)
class Candidate:
    """An optimizer the group started and is not draining: what a scale-down may pick."""

    token: str
    threads: int


@dataclass
class AllocationState:
    """A group's scale decisions over time (times are seconds of one monotonic clock)."""

    backlog_since: float | None = None
    next_start_at: float | None = None
    ramp: int = 1
    last_busy: dict[str, float] = field(default_factory=dict)
    last_drain_at: float | None = None
    demand_seen: bool = False

    def scale_up(self, load: GroupLoad, config: AllocationConfig, now: float) -> int:
        """How many optimizers (of executor-parallelism threads) to start now."""
        k = config.executor_parallelism
        allowed = max(0, (config.max_parallelism - load.threads) // k)
        if load.threads < config.min_parallelism:
            # below the floor: started at once; the demand phase starts over once the floor is met
            self.demand_seen = True
            self.backlog_since = self.next_start_at = None
            self.ramp = 1
            return min(math.ceil((config.min_parallelism - load.threads) / k), allowed)
        need = max(load.busy + load.serviceable - load.threads, 0)
        future = load.pending_tables > 0 and load.busy >= load.threads
        self.demand_seen = need > 0 or future
        if not self.demand_seen:
            self.backlog_since = self.next_start_at = None
            self.ramp = 1
            return 0
        if self.backlog_since is None:
            self.backlog_since, self.next_start_at = now, None
        gate = (
            self.next_start_at
            if self.next_start_at is not None
            else self.backlog_since + config.scheduler_backlog_timeout.total_seconds()
        )
        if now < gate:
            return 0
        if need > 0:
            want = math.ceil(need / k)
            add = min(want, self.ramp, allowed)
            if add <= 0:
                return 0
            # the ramp doubles only while it is what holds the starts back
            self.ramp = self.ramp * 2 if want > self.ramp else 1
        else:  # pending tables: one optimizer to plan them, their tasks are counted once planned
            add = min(1, allowed)
            if add <= 0:
                return 0
            self.ramp = 1
        self.next_start_at = now + config.sustained_backlog_timeout.total_seconds()
        return add

    def backlog_seconds(self, now: float) -> float:
        return 0.0 if self.backlog_since is None else now - self.backlog_since

    def observe(self, registered: Collection[str], tasks_by_optimizer: Mapping[str, int], now: float) -> None:
        """An optimizer holding tasks is busy now; one seen for the first time is idle from now; one gone is
        forgotten (registering again, it earns its idle time again)."""
        for token in [t for t in self.last_busy if t not in registered]:
            del self.last_busy[token]
        for token in registered:
            if tasks_by_optimizer.get(token, 0) > 0 or token not in self.last_busy:
                self.last_busy[token] = now

    def idle_seconds(self, token: str, now: float) -> float:
        busy = self.last_busy.get(token)
        return 0.0 if busy is None else now - busy

    def scale_down(
        self,
        candidates: Collection[Candidate],
        registered_threads: int,
        draining_threads: int,
        config: AllocationConfig,
        now: float,
    ) -> str | None:
        """The optimizer to drain now, if any: the longest idle past executor-idle-timeout whose leaving keeps
        the floor (draining optimizers count as gone), outside the cooldown of the last drain."""
        if self.last_drain_at is not None and now - self.last_drain_at < config.scale_down_cooldown.total_seconds():
            return None
        floor_base = registered_threads - draining_threads
        chosen: Candidate | None = None
        for candidate in candidates:
            busy = self.last_busy.get(candidate.token)
            if busy is None or now - busy < config.executor_idle_timeout.total_seconds():
                continue
            if floor_base - candidate.threads < config.min_parallelism:
                continue
            if chosen is None or busy < self.last_busy[chosen.token]:
                chosen = candidate
        if chosen is None:
            return None
        self.last_drain_at = now
        return chosen.token
