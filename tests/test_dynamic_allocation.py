"""Dynamic allocation's decisions (domain/dynamic_allocation.py) at the boundaries Amoro's DynamicAllocationState
keeps: the floor, the backlog gates, the ramp, the cap, future demand, idle drains and their cooldown."""

from __future__ import annotations

import pytest

from lakewarden.domain.dynamic_allocation import (
    AllocationConfig,
    AllocationState,
    Candidate,
    GroupLoad,
    TableDemand,
    serviceable_planned,
    validate_allocation,
)
from lakewarden.domain.errors import InvalidField

BACKLOG = 60.0  # scheduler-backlog-timeout's default
SUSTAINED = 30.0  # sustained-backlog-timeout's default
IDLE = 300.0  # executor-idle-timeout's default
COOLDOWN = 60.0  # scale-down-cooldown's default


def config(low: int = 0, high: int = 100, k: int = 1, **more: str) -> AllocationConfig:
    props = {
        "dynamic-allocation.enabled": "true",
        "dynamic-allocation.min-parallelism": str(low),
        "dynamic-allocation.max-parallelism": str(high),
        "dynamic-allocation.executor-parallelism": str(k),
        **{f"dynamic-allocation.{key.replace('_', '-')}": value for key, value in more.items()},
    }
    validate_allocation("local", props)
    return AllocationConfig.of(props)


def load(threads: int, busy: int, serviceable: int = 0, pending: int = 0) -> GroupLoad:
    return GroupLoad(threads, busy, serviceable, pending, {})


def test_the_floor_is_covered_at_once_in_whole_optimizers_and_the_cap_wins() -> None:
    assert AllocationState().scale_up(load(0, 0), config(5, 100, 2), 0.0) == 3  # ceil(5 / 2)
    assert AllocationState().scale_up(load(0, 0), config(5, 6, 2), 0.0) == 3
    assert AllocationState().scale_up(load(4, 0), config(5, 6, 2), 0.0) == 1  # (6 - 4) // 2


def test_no_demand_no_start_and_no_backlog() -> None:
    state = AllocationState()
    assert state.scale_up(load(4, 2), config(0, 100, 2), 0.0) == 0
    assert state.scale_up(load(8, 2, 3), config(0, 100, 2), 0.0) == 0  # 2 + 3 <= 8
    assert state.backlog_seconds(10.0) == 0.0 and not state.demand_seen


def test_demand_waits_the_backlog_timeout_then_the_sustained_one() -> None:
    state, cfg = AllocationState(), config(0, 100, 1)
    assert state.scale_up(load(2, 2, 5), cfg, 0.0) == 0
    assert state.demand_seen and state.backlog_seconds(BACKLOG - 1) == BACKLOG - 1
    assert state.scale_up(load(2, 2, 5), cfg, BACKLOG - 0.001) == 0
    assert state.scale_up(load(2, 2, 5), cfg, BACKLOG) == 1
    assert state.scale_up(load(3, 3, 5), cfg, BACKLOG + SUSTAINED - 0.001) == 0
    assert state.scale_up(load(3, 3, 5), cfg, BACKLOG + SUSTAINED) == 2  # the ramp doubled


def test_the_ramp_doubles_while_it_binds_and_resets_when_the_need_does() -> None:
    state, cfg = AllocationState(), config(0, 1000, 2)
    assert state.scale_up(load(2, 2, 100), cfg, 0.0) == 0
    assert [state.scale_up(load(t, t, 100), cfg, BACKLOG + i * SUSTAINED) for i, t in enumerate((2, 4, 8, 16))] == [
        1,
        2,
        4,
        8,
    ]
    state = AllocationState()
    assert state.scale_up(load(2, 2, 10), cfg, 0.0) == 0
    assert state.scale_up(load(2, 2, 10), cfg, BACKLOG) == 1
    assert state.scale_up(load(3, 3, 1), cfg, BACKLOG + SUSTAINED) == 1  # need 1 < ramp 2: ramp back to 1
    assert state.ramp == 1


def test_demand_that_ends_starts_its_backlog_over() -> None:
    state, cfg = AllocationState(), config(0, 100, 1)
    assert state.scale_up(load(2, 2, 5), cfg, 0.0) == 0
    assert state.scale_up(load(2, 2, 0), cfg, 30.0) == 0  # gone: reset
    assert state.scale_up(load(2, 2, 5), cfg, 45.0) == 0
    assert state.scale_up(load(2, 2, 5), cfg, 45.0 + BACKLOG - 0.001) == 0
    assert state.scale_up(load(2, 2, 5), cfg, 45.0 + BACKLOG) == 1


def test_pending_tables_with_every_thread_busy_start_one_optimizer_at_a_time() -> None:
    state, cfg = AllocationState(), config(0, 100, 4)
    assert state.scale_up(load(0, 0, pending=10), cfg, 0.0) == 0  # a group of none: nobody plans
    assert state.scale_up(load(0, 0, pending=10), cfg, BACKLOG) == 1
    assert state.scale_up(load(4, 4, pending=10), cfg, BACKLOG + SUSTAINED) == 1  # no ramp for them
    idle = AllocationState()
    assert idle.scale_up(load(4, 3, pending=5), cfg, 0.0) == 0  # a thread is free: it plans them
    assert idle.scale_up(load(4, 3, pending=5), cfg, BACKLOG) == 0
    assert load(4, 3, pending=5).planning_bound and not load(0, 0, pending=5).planning_bound


def test_the_cap_holds_back_a_start_and_a_quota_in_threads_bounds_what_more_threads_serve() -> None:
    state, cfg = AllocationState(), config(0, 10, 2)
    assert state.scale_up(load(8, 8, 100), cfg, 0.0) == 0
    assert state.scale_up(load(8, 8, 100), cfg, BACKLOG) == 1
    assert state.scale_up(load(10, 10, 100), cfg, BACKLOG + SUSTAINED) == 0
    demands = [TableDemand(planned=7, quota=0.5, occupied=3), TableDemand(planned=7, quota=4, occupied=3)]
    assert serviceable_planned(demands) == 7 + 1


def test_idle_optimizers_drain_one_at_a_time_longest_idle_first_never_below_the_floor() -> None:
    state, cfg = AllocationState(), config(2, 10, 1)
    state.observe({"a", "b", "c"}, {"c": 1}, 0.0)
    state.observe({"a", "b", "c"}, {"a": 1, "c": 1}, 10.0)  # a worked later than b
    candidates = [Candidate("a", 1), Candidate("b", 1), Candidate("c", 1)]
    assert state.scale_down(candidates, 3, 0, cfg, IDLE - 0.001) is None  # b idle, not long enough
    assert state.scale_down(candidates, 3, 0, cfg, IDLE) == "b"
    assert state.scale_down(candidates, 3, 1, cfg, IDLE + 20.0) is None  # cooldown
    # after the cooldown: a is idle long enough, but b draining counts as gone and the floor is 2
    assert state.scale_down(candidates, 3, 1, cfg, IDLE + 20.0 + COOLDOWN) is None
    state.observe({"a", "c"}, {"c": 1}, IDLE + 30.0)  # b left; a stays idle, c busy
    assert state.scale_down([Candidate("a", 1), Candidate("c", 1)], 2, 0, cfg, 2 * IDLE) is None  # the floor


def test_a_registering_optimizer_is_idle_from_first_sight_and_a_gone_one_is_forgotten() -> None:
    state, cfg = AllocationState(), config(0, 10, 1)
    state.observe({"a"}, {}, 100.0)
    assert state.idle_seconds("a", 100.0 + IDLE) == IDLE
    assert state.scale_down([Candidate("a", 1)], 1, 0, cfg, 100.0 + IDLE) == "a"
    state.observe(set(), {}, 500.0)
    assert state.last_busy == {}


@pytest.mark.parametrize(
    ("props", "field", "message"),
    [
        ({}, "dynamic-allocation.max-parallelism", "required"),
        ({"max-parallelism": "2", "min-parallelism": "3"}, "dynamic-allocation.max-parallelism", ">= min"),
        ({"max-parallelism": "2000"}, "dynamic-allocation.max-parallelism", "1024"),
        ({"max-parallelism": "4", "executor-parallelism": "0"}, "executor-parallelism", ">= 1"),
        ({"max-parallelism": "4", "executor-parallelism": "5"}, "executor-parallelism", "must not exceed"),
        ({"max-parallelism": "5", "min-parallelism": "5", "executor-parallelism": "2"}, "min-parallelism", "6 thr"),
        ({"max-parallelism": "4", "executor-idle-timeout": "10s"}, "executor-idle-timeout", "30s"),
        ({"max-parallelism": "4", "sustained-backlog-timeout": "3min"}, "sustained-backlog-timeout", "half"),
        ({"max-parallelism": "4", "drain-timeout": "0s"}, "drain-timeout", "positive"),
        ({"max-parallelism": "four"}, "dynamic-allocation.max-parallelism", "not an integer"),
        ({"max-parallelism": "4", "scale-down-cooldown": "soon"}, "scale-down-cooldown", "not a duration"),
    ],
)
def test_bad_settings_name_the_property(props: dict[str, str], field: str, message: str) -> None:
    full = {"dynamic-allocation.enabled": "true", **{f"dynamic-allocation.{k}": v for k, v in props.items()}}
    with pytest.raises(InvalidField, match=message) as raised:
        validate_allocation("local", full)
    assert field in raised.value.field


def test_an_external_container_cannot_scale_and_a_disabled_group_is_not_checked() -> None:
    with pytest.raises(InvalidField, match="external"):
        validate_allocation(
            "external", {"dynamic-allocation.enabled": "true", "dynamic-allocation.max-parallelism": "2"}
        )
    validate_allocation("local", {"dynamic-allocation.max-parallelism": "-3"})
    with pytest.raises(InvalidField, match="true or false"):
        validate_allocation("local", {"dynamic-allocation.enabled": "yes"})
