"""How a resource group shares its optimizer threads among its tables (Amoro's scheduling policies).

- `quota`: the pending table that used the smallest share of its quota in the last hour goes first
  (its tasks' optimizer-thread seconds over quota × 1 h);
- `balanced`: the pending table optimized least recently goes first.

Ties go to the table name (the policy names: domain/groups.SCHEDULING_POLICIES). A table holds
at most ceil(quota × the group's threads) threads at once.
Pure functions over plain values: the dispatcher (services/dispatcher.py) gathers the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

QUOTA_WINDOW_SECONDS = 3600.0

T = TypeVar("T")


@dataclass(frozen=True)
class Candidate(Generic[T]):
    """A pending table that may be planned now, with what the policies weigh."""

    table: T
    name: str
    quota: float
    used_seconds: float  # optimizer-thread seconds its tasks used in the last hour (quota policy)
    last_optimized: float  # epoch seconds of its last minor, major or full optimizing; 0 if never (balanced)


def next_table(policy: str, candidates: Sequence[Candidate[T]]) -> Candidate[T] | None:
    """The candidate the group's policy plans next (an unknown policy counts as quota)."""
    if not candidates:
        return None
    if policy == "balanced":
        return min(candidates, key=lambda c: (c.last_optimized, c.name))
    return min(candidates, key=lambda c: (quota_share_used(c.used_seconds, c.quota), c.name))


def quota_share_used(used_seconds: float, quota: float) -> float:
    return used_seconds / (max(quota, 1e-6) * QUOTA_WINDOW_SECONDS)


def thread_cap(quota: float, group_threads: int) -> int:
    """How many of the group's threads one table's tasks may hold at once."""
    return max(1, math.ceil(quota * max(1, group_threads)))
