"""What a process cost: Spark's measured usage priced by its resource group (pure rules).

A price has two parts, as cloud maintenance services bill: compute by the core-hour — the time Spark tasks
held an executor core (executor run time), which is what a cluster is paid for whether the core computed or
waited on storage — and storage writes by the GB written. The server's `cost` section sets the defaults; a
resource group's `cost.core-hour` and `cost.gb-written` properties override them for its optimizers. A
task's cost is fixed when its attempt reports (at the price of that moment), so a later change of price does
not rewrite history, and a failed attempt costs what it ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakewarden.domain.errors import InvalidField
from lakewarden.protocol.messages import SparkUsage

CORE_HOUR = "cost.core-hour"
GB_WRITTEN = "cost.gb-written"
GB = 1024**3
# a task's usage as the server keeps it: Spark's figures and, with them, their cost
COST = "cost"


@dataclass(frozen=True)
class Price:
    core_hour: float = 0.0
    gb_written: float = 0.0
    currency: str = ""

    def of(self, usage: SparkUsage) -> float:
        return usage.run_ms / 3_600_000 * self.core_hour + usage.written_bytes / GB * self.gb_written

    def for_group(self, properties: Mapping[str, str]) -> Price:
        """The group's price: its own where it sets one, else this (the server's default)."""
        return Price(
            core_hour=_amount(properties, CORE_HOUR, self.core_hour),
            gb_written=_amount(properties, GB_WRITTEN, self.gb_written),
            currency=self.currency,
        )


def validate_prices(properties: Mapping[str, str]) -> None:
    for key in (CORE_HOUR, GB_WRITTEN):
        if key in properties:
            _amount(properties, key, 0.0)


def _amount(properties: Mapping[str, str], key: str, default: float) -> float:
    value = properties.get(key)
    if value is None:
        return default
    try:
        amount = float(value)
    except ValueError:
        amount = -1.0
    if not amount >= 0 or amount == float("inf"):  # also refuses NaN
        raise InvalidField(f"properties.{key}", f"{value!r} must be a number >= 0 (a price)")
    return amount


def add_usage(kept: Mapping[str, Any] | None, usage: SparkUsage, price: Price) -> dict[str, Any]:
    """A task's kept usage with one more attempt's added, and its cost."""
    before = SparkUsage(**{k: v for k, v in (kept or {}).items() if k != COST})
    cost = float((kept or {}).get(COST, 0.0)) + price.of(usage)
    return {**before.plus(usage).model_dump(), COST: cost}


def total_usage(kept: list[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The usage of several tasks together (a process's), and their cost."""
    usage = SparkUsage()
    cost = 0.0
    for one in kept:
        if one:
            usage = usage.plus(SparkUsage(**{k: v for k, v in one.items() if k != COST}))
            cost += float(one.get(COST, 0.0))
    return {**usage.model_dump(), COST: cost}


# a process summary's usage fields: Spark's figures of all its tasks' attempts, and their cost
USAGE_FIELDS = tuple(f"spark_{name}" for name in SparkUsage.model_fields)


def cpu_seconds(figures: Mapping[str, Any] | None, prefix: str = "") -> float:
    """The CPU-seconds a task's kept usage (prefix "") or a process summary ("spark_") cost in all: the whole
    CPU the optimizer measured, or Spark's executor CPU from an optimizer that did not measure it."""
    figures = figures or {}
    return max(float(figures.get(f"{prefix}whole_cpu_ms", 0)), float(figures.get(f"{prefix}cpu_ms", 0))) / 1000


def usage_summary(total: Mapping[str, Any]) -> dict[str, Any]:
    """total_usage's figures as a process summary keeps them (`spark_cpu_ms`, …, `cost`)."""
    return {**{f"spark_{k}": v for k, v in total.items() if k != COST}, COST: total[COST]}
