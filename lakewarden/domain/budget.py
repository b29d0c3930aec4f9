"""Optimizing within a budget, spent where reads are (a group's `optimizing.budget.*`; off by default).

Amoro optimizes a pending table whether anything reads it or not. A group with a budget ranks its pending tables
by value: the files its scans will no longer open per hour, per CPU-second the optimizing is expected to cost. A
process starts while the hour's spend is under the budget; hard limits fire regardless, so an unread table never
rots; a process pays off at the scans after it, so a table waits for a scan between two processes. The rules,
property by property, are in docs/self-optimizing.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lakewarden.domain.durations import format_duration, parse_duration
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.optimizing_config import OptimizingConfig

BUDGET = "optimizing.budget.cpu-seconds-per-hour"
HARD_SMALL_FILES = "optimizing.budget.hard-limit.small-files"
HARD_DELETE_FILES = "optimizing.budget.hard-limit.delete-files"
READ_TRIGGER = "optimizing.budget.read-trigger.file-count"
READ_PLAN_INTERVAL = "optimizing.budget.read-trigger.min-plan-interval"
WINDOW = "optimizing.budget.window"
READ_TRIGGER_DEFAULT = 2  # two small files are the fewest a rewrite can merge
# a read table planned again this soon: a few of its commits, and no replanning on every evaluation
READ_PLAN_INTERVAL_DEFAULT = timedelta(seconds=10)
READ_TRIGGERED = "read_trigger_file_count"  # the evaluation document's: the read trigger it was judged with
READ_RECENTLY = timedelta(hours=1)  # scanned this recently: the read trigger applies
MIN_WINDOW = timedelta(minutes=1)
HARD_SMALL_FILES_DEFAULT = 1000  # more than a scan should open for one table's worth of small writes
HARD_DELETE_FILES_DEFAULT = 200  # delete files every scan must apply to every data file they cover
COLD_SCANS_PER_HOUR = 1 / 24
MIN_PROCESS_CPU_SECONDS = 1.0  # a process's fixed cost: planning, a Spark job, a commit
DEFAULT_CPU_SECONDS_PER_GIB = 30.0  # before a group has history of its own
SPEND_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class BudgetConfig:
    cpu_seconds_per_hour: float
    hard_small_files: int
    hard_delete_files: int
    read_trigger_file_count: int = READ_TRIGGER_DEFAULT
    window: timedelta = SPEND_WINDOW
    read_plan_interval: timedelta = READ_PLAN_INTERVAL_DEFAULT

    @property
    def allowance(self) -> float:
        """The CPU-seconds the group may spend over its window."""
        return self.cpu_seconds_per_hour * (self.window / SPEND_WINDOW)

    def spent_text(self, spend: Spend) -> str:
        span = "this hour" if self.window == SPEND_WINDOW else f"in the last {format_duration(self.window)}"
        return f"the group spent {spend.total:.0f} of its {self.allowance:g} CPU-s {span}"

    @staticmethod
    def of(properties: Mapping[str, str]) -> BudgetConfig | None:
        """The group's budget (validated when the group was set); None when it sets none."""
        value = properties.get(BUDGET)
        if value is None:
            return None
        return BudgetConfig(
            float(value),
            int(properties.get(HARD_SMALL_FILES, HARD_SMALL_FILES_DEFAULT)),
            int(properties.get(HARD_DELETE_FILES, HARD_DELETE_FILES_DEFAULT)),
            int(properties.get(READ_TRIGGER, READ_TRIGGER_DEFAULT)),
            parse_duration(properties[WINDOW]) if WINDOW in properties else SPEND_WINDOW,
            parse_duration(properties[READ_PLAN_INTERVAL])
            if READ_PLAN_INTERVAL in properties
            else READ_PLAN_INTERVAL_DEFAULT,
        )

    def min_plan_interval(self, config: OptimizingConfig, read_triggered: bool) -> timedelta:
        """How soon after its last plan a table of the group may be planned again: a table pending by the read
        trigger after the read trigger's interval, when that is the shorter."""
        own = timedelta(milliseconds=config.min_plan_interval_ms)
        return min(own, self.read_plan_interval) if read_triggered else own


def read_triggered(config: OptimizingConfig, file_count: int | None) -> OptimizingConfig:
    """The table's optimizing configuration with a read trigger applied (None: none applies): the evaluator
    judges with it, and the planner plans with the one the verdict was judged with."""
    if file_count is None or file_count >= config.minor_trigger_file_count:
        return config
    return replace(config, minor_trigger_file_count=file_count)


def validate_budget(properties: Mapping[str, str]) -> None:
    value = properties.get(BUDGET)
    if value is not None:
        try:
            budget = float(value)
        except ValueError:
            budget = -1.0
        if not budget > 0 or budget == float("inf"):
            raise InvalidField(f"properties.{BUDGET}", f"{value!r} must be a number of CPU-seconds above 0")
    for key in (HARD_SMALL_FILES, HARD_DELETE_FILES, READ_TRIGGER):
        given = properties.get(key)
        if given is not None and (not given.isdigit() or int(given) < 1):
            raise InvalidField(f"properties.{key}", f"{given!r} must be an integer >= 1")
    interval = properties.get(READ_PLAN_INTERVAL)
    if interval is not None:
        try:
            parse_duration(interval)
        except (TypeError, ValueError):
            raise InvalidField(
                f"properties.{READ_PLAN_INTERVAL}", f"{interval!r} must be a duration such as 10s or 2min"
            ) from None
    window = properties.get(WINDOW)
    if window is not None:
        try:
            span = parse_duration(window)
        except (TypeError, ValueError):
            span = timedelta(0)
        if not MIN_WINDOW <= span <= SPEND_WINDOW:
            raise InvalidField(f"properties.{WINDOW}", f"{window!r} must be a duration from 1min to 1h")


@dataclass(frozen=True)
class Layout:
    """What the evaluator counted of a pending table (its verdict's summary)."""

    data_files: int
    small_files: int
    delete_files: int
    pending_partitions: int
    cost_bytes: int


@dataclass(frozen=True)
class RecentReads:
    """A table's scans over the last day (domain/reads.py), and when it was last scanned at all."""

    scans_last_day: int
    files_per_scan: float
    last_scan_at: datetime | None


@dataclass(frozen=True)
class TableValue:
    """What optimizing a pending table now is expected to buy, and cost."""

    name: str
    scans_per_hour: float  # COLD_SCANS_PER_HOUR for a table not scanned in the day
    cold: bool
    files_per_scan: float
    removed_share: float  # of the files a scan opens, those the process merges away
    expected_cpu_seconds: float
    hard_limit: str | None  # the hard limit it is past, if any
    # when its last optimizing process ended, if no scan came since: no process pays off before its next scan
    awaits_scan_since: datetime | None = None

    @property
    def files_saved_per_hour(self) -> float:
        return self.scans_per_hour * self.files_per_scan * self.removed_share

    @property
    def value(self) -> float:
        """Files its scans will not open per hour, per CPU-second of the process."""
        return self.files_saved_per_hour / self.expected_cpu_seconds


def value_of(
    name: str,
    layout: Layout,
    reads: RecentReads,
    cpu_seconds_per_byte: float,
    config: BudgetConfig,
    optimized_at: datetime | None = None,
) -> TableValue:
    """`optimized_at`: when the table's last optimizing process ended (None: never)."""
    live = layout.data_files + layout.delete_files
    merged = max(0, layout.small_files + layout.delete_files - layout.pending_partitions)
    cold = reads.scans_last_day == 0
    hard = None
    if layout.small_files >= config.hard_small_files:
        hard = f"{layout.small_files} small files >= {HARD_SMALL_FILES}={config.hard_small_files}"
    elif layout.delete_files >= config.hard_delete_files:
        hard = f"{layout.delete_files} delete files >= {HARD_DELETE_FILES}={config.hard_delete_files}"
    return TableValue(
        name=name,
        scans_per_hour=COLD_SCANS_PER_HOUR if cold else reads.scans_last_day / 24,
        cold=cold,
        # a table nobody reads: a scan of the whole table
        files_per_scan=float(live) if cold else reads.files_per_scan,
        removed_share=min(1.0, merged / live) if live else 0.0,
        expected_cpu_seconds=max(MIN_PROCESS_CPU_SECONDS, layout.cost_bytes * cpu_seconds_per_byte),
        hard_limit=hard,
        awaits_scan_since=optimized_at if awaits_scan(optimized_at, reads.last_scan_at) else None,
    )


def awaits_scan(optimized_at: datetime | None, last_scan_at: datetime | None) -> bool:
    """Whether no scan came since the table's last optimizing process ended."""
    return optimized_at is not None and (last_scan_at is None or last_scan_at <= optimized_at)


def may_go(value: TableValue, spend: Spend, config: BudgetConfig) -> bool:
    """Whether the table may be planned now: past a hard limit always; otherwise once a scan came since its last
    process, while the budget allows."""
    if value.hard_limit is not None:
        return True
    return value.awaits_scan_since is None and may_start(spend, config)


def by_value(values: Sequence[TableValue]) -> list[TableValue]:
    """Highest value first (ties by name)."""
    return sorted(values, key=lambda v: (-v.value, v.name))


@dataclass(frozen=True)
class Spend:
    """A group's spend over the last hour: CPU-seconds of tasks that ended in it, and thread-seconds of the tasks
    running (their CPU is known only when they end: a thread held counts as a CPU-second a second)."""

    ended_cpu_seconds: float
    running_seconds: float

    @property
    def total(self) -> float:
        return self.ended_cpu_seconds + self.running_seconds


def may_start(spend: Spend, config: BudgetConfig) -> bool:
    return spend.total < config.allowance


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "no scans kept"
    hours = (now - moment).total_seconds() / 3600
    return f"last scanned {hours / 24:.0f} days ago" if hours >= 48 else f"last scanned {hours:.0f} h ago"


def chosen_reason(value: TableValue, spend: Spend, config: BudgetConfig, others: int) -> str:
    """Why a budgeted group picked this table."""
    within = may_start(spend, config) and value.awaits_scan_since is None
    head = (
        f"value: past a hard limit ({value.hard_limit})"
        if value.hard_limit is not None and not within
        else f"value: {value.value:.3g} files saved per CPU-second"
    )
    return f"{head}; {describe(value)}; {config.spent_text(spend)}" + (
        f"; ahead of {others} other(s)" if others else "; the only table that could be planned"
    )


def describe(value: TableValue) -> str:
    reads = (
        "no scans in the last day (valued by its layout alone)"
        if value.cold
        else f"{value.scans_per_hour:.3g} scans/h reading {value.files_per_scan:.3g} files each"
    )
    return f"{reads}; {value.removed_share:.0%} of them merged away; expected {value.expected_cpu_seconds:.3g} CPU-s"


def deferral(
    value: TableValue,
    rank: int,
    spend: Spend,
    config: BudgetConfig,
    small_files: int,
    last_scan_at: datetime | None,
    now: datetime,
    frees_at: datetime,
) -> str:
    """Why a pending table waits in a budgeted group, and when it is looked at next."""
    if value.awaits_scan_since is not None:
        minutes = max(0.0, (now - value.awaits_scan_since).total_seconds() / 60)
        reads = "no scans in the last day" if value.cold else describe(value).split("; ")[0]
        return (
            f"deferred: not scanned since its last optimizing process ended {minutes:.0f} min ago; {reads}; "
            f"{small_files} small files; next look at its next scan"
        )
    if may_start(spend, config):
        budget = f"ranked {rank} by value ({value.value:.3g} files saved per CPU-second)"
        when = "when the tables ahead of it were planned"
    else:
        budget = config.spent_text(spend)
        minutes = max(0.0, (frees_at - now).total_seconds() / 60)
        when = f"in {minutes:.0f} min, when the budget frees"
    reads = f"no scans in the last day ({_ago(last_scan_at, now)})" if value.cold else describe(value).split("; ")[0]
    first = " or at its first scan" if value.cold else ""
    return f"deferred: {budget}; {reads}; {small_files} small files; next look {when}{first}"
