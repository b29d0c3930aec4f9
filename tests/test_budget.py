"""Optimizing within a budget, spent where reads are (domain/budget.py, services/processes/budget.py): pending
tables ranked by files saved per CPU-second from their own scans, a process started only while the group's
spend over the hour is below its budget, hard limits past it regardless, and every other table told why it
waits. Off by default: the group's own policy decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from lakewarden.domain.budget import (
    BUDGET,
    COLD_SCANS_PER_HOUR,
    READ_PLAN_INTERVAL,
    READ_TRIGGER,
    READ_TRIGGERED,
    WINDOW,
    BudgetConfig,
    Layout,
    RecentReads,
    Spend,
    by_value,
    deferral,
    may_go,
    may_start,
    value_of,
)
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.groups import validate_group_update
from lakewarden.domain.states import ProcessStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.store import processes as store
from lakewarden.store.database import utcnow
from lakewarden.store.models import TaskRow
from lakewarden.store.runtime import transition_table
from tests.helpers import record_scans
from tests.test_scheduling import add_table, ctx_of, make_pending, process_with_tasks

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
CONFIG = BudgetConfig(100.0, hard_small_files=1000, hard_delete_files=200)
MIB = 1024**2
LAYOUT = Layout(data_files=100, small_files=90, delete_files=0, pending_partitions=2, cost_bytes=64 * MIB)


def test_value_is_files_saved_per_cpu_second_from_the_tables_own_scans() -> None:
    per_byte = 1 / MIB  # 1 CPU-s per MiB: 64 CPU-s for the layout's 64 MiB
    hot = value_of("hot", LAYOUT, RecentReads(48, 50.0, NOW), per_byte, CONFIG)
    assert hot.scans_per_hour == 2 and hot.removed_share == pytest.approx(0.88) and hot.expected_cpu_seconds == 64
    assert hot.value == pytest.approx(2 * 50 * 0.88 / 64) and not hot.cold and hot.hard_limit is None
    cold = value_of("cold", LAYOUT, RecentReads(0, 0.0, None), per_byte, CONFIG)
    # nobody reads it: valued by its layout, as if one scan a day read every file
    assert cold.cold and cold.scans_per_hour == COLD_SCANS_PER_HOUR and cold.files_per_scan == 100
    assert cold.value == pytest.approx(COLD_SCANS_PER_HOUR * 100 * 0.88 / 64)
    assert [v.name for v in by_value([cold, hot])] == ["hot", "cold"]
    tiny = Layout(data_files=3, small_files=3, delete_files=0, pending_partitions=1, cost_bytes=10)
    assert value_of("t", tiny, RecentReads(0, 0.0, None), per_byte, CONFIG).expected_cpu_seconds == 1.0  # at least
    # hard limits fire whatever the reads
    many = Layout(data_files=2000, small_files=1500, delete_files=0, pending_partitions=1, cost_bytes=MIB)
    assert value_of("m", many, RecentReads(0, 0.0, None), per_byte, CONFIG).hard_limit == (
        "1500 small files >= optimizing.budget.hard-limit.small-files=1000"
    )
    deletes = Layout(data_files=10, small_files=0, delete_files=250, pending_partitions=1, cost_bytes=MIB)
    assert "250 delete files" in str(value_of("d", deletes, RecentReads(0, 0.0, None), per_byte, CONFIG).hard_limit)


def test_a_process_may_start_while_the_hour_spent_less_than_the_budget() -> None:
    assert may_start(Spend(60.0, 39.0), CONFIG) and not may_start(Spend(60.0, 40.0), CONFIG)


def test_a_shorter_window_prorates_the_budget_and_says_so() -> None:
    minute = BudgetConfig.of({BUDGET: "120", WINDOW: "1min"})
    assert minute is not None and minute.window == timedelta(minutes=1) and minute.allowance == pytest.approx(2.0)
    assert may_start(Spend(1.0, 0.9), minute) and not may_start(Spend(1.5, 0.5), minute)
    assert minute.spent_text(Spend(3.0, 0.0)) == "the group spent 3 of its 2 CPU-s in the last 60s"
    assert minute.read_trigger_file_count == 2  # the default
    assert BudgetConfig.of({BUDGET: "120", READ_TRIGGER: "5"}).read_trigger_file_count == 5  # type: ignore[union-attr]


def test_a_deferral_says_why_and_when() -> None:
    cold = value_of("cold", LAYOUT, RecentReads(0, 0.0, None), 1 / MIB, CONFIG)
    text = deferral(cold, 2, Spend(150, 0), CONFIG, 412, NOW - timedelta(days=3), NOW, NOW + timedelta(minutes=20))
    assert text == (
        "deferred: the group spent 150 of its 100 CPU-s this hour; no scans in the last day (last scanned 3 days "
        "ago); 412 small files; next look in 20 min, when the budget frees or at its first scan"
    )
    hot = value_of("hot", LAYOUT, RecentReads(48, 50.0, NOW), 1 / MIB, CONFIG)
    text = deferral(hot, 2, Spend(10, 0), CONFIG, 90, NOW, NOW, NOW)
    assert text.startswith("deferred: ranked 2 by value (1.38 files saved per CPU-second); 2 scans/h reading 50")
    assert text.endswith("next look when the tables ahead of it were planned")


def test_a_table_not_scanned_since_its_last_process_waits_for_a_scan_whatever_the_budget() -> None:
    ended = NOW - timedelta(minutes=30)
    unread = value_of("w", LAYOUT, RecentReads(2, 50.0, ended - timedelta(minutes=5)), 1 / MIB, CONFIG, ended)
    assert unread.awaits_scan_since == ended and not may_go(unread, Spend(0, 0), CONFIG)
    text = deferral(unread, 1, Spend(0, 0), CONFIG, 90, None, NOW, NOW)
    assert text == (
        "deferred: not scanned since its last optimizing process ended 30 min ago; 0.0833 scans/h reading 50 files "
        "each; 90 small files; next look at its next scan"
    )
    # a scan after the process, or no process yet: by value within the budget again
    read = value_of("w", LAYOUT, RecentReads(3, 50.0, ended + timedelta(minutes=1)), 1 / MIB, CONFIG, ended)
    assert read.awaits_scan_since is None and may_go(read, Spend(0, 0), CONFIG)
    assert not may_go(read, Spend(100, 0), CONFIG)  # the budget spent
    never = value_of("c", LAYOUT, RecentReads(0, 0.0, None), 1 / MIB, CONFIG, None)
    assert may_go(never, Spend(0, 0), CONFIG)
    # past a hard limit it goes regardless
    many = Layout(data_files=2000, small_files=1500, delete_files=0, pending_partitions=1, cost_bytes=MIB)
    rotting = value_of("m", many, RecentReads(0, 0.0, None), 1 / MIB, CONFIG, ended)
    assert rotting.awaits_scan_since == ended and may_go(rotting, Spend(100, 0), CONFIG)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("optimizing.budget.cpu-seconds-per-hour", "0"),
        ("optimizing.budget.cpu-seconds-per-hour", "lots"),
        ("optimizing.budget.cpu-seconds-per-hour", "inf"),
        ("optimizing.budget.hard-limit.small-files", "-3"),
        ("optimizing.budget.hard-limit.delete-files", "0"),
        ("optimizing.budget.read-trigger.file-count", "two"),
        ("optimizing.budget.window", "30s"),
        ("optimizing.budget.window", "2h"),
        ("optimizing.budget.window", "soon"),
        ("optimizing.budget.read-trigger.min-plan-interval", "-5s"),
        ("optimizing.budget.read-trigger.min-plan-interval", "often"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_property(key: str, value: str) -> None:
    with pytest.raises(InvalidField) as raised:
        validate_group_update("local", {key: value}, {"local": "local"})
    assert raised.value.field == f"properties.{key}"


# ---- the dispatcher, on the system database


def _pending(ctx: Any, name: str, small_files: int = 90) -> Any:
    rec = add_table(ctx, name)
    verdict = {**LAYOUT.__dict__, "small_files": small_files, "data_files": max(100, small_files + 10)}
    make_pending(ctx, rec, evaluation=verdict)
    return rec


def _spend(ctx: Any, rec: Any, cpu_seconds: float) -> None:
    """A process of the group whose one task ended 10 minutes ago, having spent `cpu_seconds` in all (a tenth of
    it on Spark's executors)."""
    pid = process_with_tasks(ctx, rec, tasks=1)
    with ctx.db.write() as session:
        session.execute(
            update(TaskRow)
            .where(TaskRow.process_id == pid)
            .values(
                status="success",
                acked_at=utcnow() - timedelta(minutes=20),
                ended_at=utcnow() - timedelta(minutes=10),
                usage={"cpu_ms": int(cpu_seconds * 100), "whole_cpu_ms": int(cpu_seconds * 1000)},
            )
        )
        store.transition_process(session, pid, ProcessStatus.RUNNING, ProcessStatus.SUCCESS)


def test_a_budgeted_group_plans_by_value_and_past_its_budget_only_hard_limits(client: TestClient) -> None:
    ctx = ctx_of(client)
    budget = {"optimizing.budget.cpu-seconds-per-hour": "100"}
    assert client.put("/api/v1/resource-groups/default", json={"properties": budget}).status_code == 200
    hot, _, rotting = _pending(ctx, "hot"), _pending(ctx, "cold"), _pending(ctx, "rotting", small_files=1500)
    record_scans(ctx.db, ("c", "db", "hot"), 48, files=50)
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "hot"
    why = picked[1]
    assert (why["policy"], why["candidates"], why["budget"], why["spent"]) == ("value", 3, 100.0, 0.0)
    assert why["reason"].startswith("value: ") and "2 scans/h reading 50 files each" in why["reason"]
    assert why["runner_up"]["table"] == "c.db.rotting"  # its layout alone outweighs the cold table's
    # the hot table waits for nothing; the others say why they wait
    assert client.get("/api/v1/tables/c/db/hot").json()["deferred"] is None
    shown = client.get("/api/v1/tables/c/db/cold").json()["deferred"]
    assert shown.startswith("deferred: ranked 3 by value") and "no scans in the last day (no scans kept)" in shown
    assert shown.endswith("or at its first scan")

    _spend(ctx, hot, cpu_seconds=150)  # the hour's budget is spent
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "rotting"  # past a hard limit: planned regardless
    assert picked[1]["reason"].startswith("value: past a hard limit (1500 small files")
    assert picked[1]["spent"] == 150.0
    shown = client.get("/api/v1/tables/c/db/hot").json()["deferred"]
    assert shown.startswith("deferred: the group spent 150 of its 100 CPU-s this hour; 2 scans/h")
    assert "next look in 50 min, when the budget frees" in shown
    with ctx.db.write() as session:  # once the rotting table is no longer pending, nothing else may start
        assert transition_table(session, rotting.runtime.table_id, TableStatus.PENDING, TableStatus.IDLE)
    assert ctx.dispatcher._pick_table("default") is None
    assert client.get("/api/v1/tables/c/db/cold").json()["deferred"].startswith("deferred: the group spent 150")

    # without a budget, the group's policy decides again (quota: hot used its quota, cold did not)
    assert client.put("/api/v1/resource-groups/default", json={"properties": {}}).status_code == 200
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[1]["policy"] == "quota"
    assert client.get("/api/v1/tables/c/db/cold").json()["deferred"] is None


def test_a_bad_budget_on_a_group_is_a_400_naming_it(client: TestClient) -> None:
    answer = client.put(
        "/api/v1/resource-groups/default", json={"properties": {"optimizing.budget.cpu-seconds-per-hour": "-1"}}
    )
    assert answer.status_code == 400 and "optimizing.budget.cpu-seconds-per-hour" in answer.text


def test_a_table_pending_by_its_reads_is_planned_again_after_the_read_triggers_interval(client: TestClient) -> None:
    """Amoro's min-plan-interval (1 min) caps a table at a process a minute; a table a budgeted group's reads made
    pending may go again after the read trigger's interval (10 s by default), when that is the shorter."""
    ctx = ctx_of(client)
    budget = {"optimizing.budget.cpu-seconds-per-hour": "100"}
    assert client.put("/api/v1/resource-groups/default", json={"properties": budget}).status_code == 200
    planned = utcnow() - timedelta(seconds=30)
    read, unread = add_table(ctx, "read"), add_table(ctx, "unread")
    quick = add_table(ctx, "quick", **{"self-optimizing.min-plan-interval": "20000"})
    for rec in (read, quick):
        make_pending(ctx, rec, evaluation={**LAYOUT.__dict__, READ_TRIGGERED: 2}, last_planned_at=planned)
    make_pending(ctx, unread, evaluation=dict(LAYOUT.__dict__), last_planned_at=planned)

    def candidates() -> int:
        picked = ctx.dispatcher._pick_table("default")
        return 0 if picked is None else int(picked[1]["candidates"])

    assert candidates() == 2  # read and quick, 30 s after their plans; unread waits for its 1 min

    budget[READ_PLAN_INTERVAL] = "1min"  # longer than its own 20 s: quick alone may go
    assert client.put("/api/v1/resource-groups/default", json={"properties": budget}).status_code == 200
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "quick" and picked[1]["candidates"] == 1

    assert client.put("/api/v1/resource-groups/default", json={"properties": {}}).status_code == 200
    picked = ctx.dispatcher._pick_table("default")  # no budget: each table's own min-plan-interval
    assert picked is not None and picked[0].name.table == "quick" and picked[1]["candidates"] == 1


def test_the_read_triggers_interval_is_the_shorter_of_the_two() -> None:
    config = BudgetConfig.of({BUDGET: "10", READ_PLAN_INTERVAL: "20s"})
    assert config is not None
    from lakewarden.domain.optimizing_config import OptimizingConfig

    amoro = OptimizingConfig.of({})
    assert config.min_plan_interval(amoro, read_triggered=True) == timedelta(seconds=20)
    assert config.min_plan_interval(amoro, read_triggered=False) == timedelta(minutes=1)
    short = OptimizingConfig.of({"self-optimizing.min-plan-interval": "5000"})
    assert config.min_plan_interval(short, read_triggered=True) == timedelta(seconds=5)
    default = BudgetConfig.of({BUDGET: "10"})
    assert default is not None and default.min_plan_interval(amoro, read_triggered=True) == timedelta(seconds=10)


def test_a_table_nobody_scanned_since_its_last_process_is_passed_over(client: TestClient) -> None:
    ctx = ctx_of(client)
    budget = {"optimizing.budget.cpu-seconds-per-hour": "100"}
    assert client.put("/api/v1/resource-groups/default", json={"properties": budget}).status_code == 200
    ended = utcnow() - timedelta(minutes=10)
    rec = add_table(ctx, "warm")
    make_pending(ctx, rec, evaluation=dict(LAYOUT.__dict__), last_minor_optimizing_at=ended)
    record_scans(ctx.db, ("c", "db", "warm"), 2, files=50, at=ended - timedelta(minutes=5))
    assert ctx.dispatcher._pick_table("default") is None  # budget to spare, but nobody read the last process's
    shown = client.get("/api/v1/tables/c/db/warm").json()["deferred"]
    assert shown.startswith("deferred: not scanned since its last optimizing process ended 10 min ago;")
    record_scans(ctx.db, ("c", "db", "warm"), 1, files=50, at=utcnow())  # a scan now: it goes
    picked = ctx.dispatcher._pick_table("default")
    assert picked is not None and picked[0].name.table == "warm"
    assert client.get("/api/v1/tables/c/db/warm").json()["deferred"] is None
