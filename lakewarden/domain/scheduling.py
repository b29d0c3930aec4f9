"""How a resource group shares its optimizer threads among its tables (Amoro's scheduling policies).

`quota`: the pending table that used the smallest share of its quota in the last hour goes first; `balanced`: the
table optimized least recently; ties go to the name. A table's thread limit is its quota as threads when above 1,
else ceil(quota x the group's threads), as Amoro's OptimizingQueue computes it. Pure functions: the dispatcher
gathers the numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

QUOTA_WINDOW_SECONDS = 3600.0

T = TypeVar("T")


@dataclass(frozen=True)
class Candidate(Generic[T]):
    """A pending table that may be planned now, with what the policies weigh."""

    table: T
    name: str
    quota: float
    limit: int  # the threads its tasks may hold at once (thread_cap)
    used_seconds: float  # optimizer-thread seconds its tasks used in the last hour (quota policy)
    last_optimized: float  # epoch seconds of its last minor, major or full optimizing; 0 if never (balanced)


def ranked(policy: str, candidates: Sequence[Candidate[T]]) -> list[Candidate[T]]:
    """The candidates in the order the group's policy plans them (an unknown policy counts as quota)."""
    if policy == "balanced":
        return sorted(candidates, key=lambda c: (c.last_optimized, c.name))
    return sorted(candidates, key=lambda c: (quota_share_used(c.used_seconds, c.limit), c.name))


def why_first(policy: str, order: Sequence[Candidate[T]], now: float) -> dict[str, Any]:
    """Why the policy picked the first of `order` (ranked): its numbers, the runner-up's, and a sentence."""
    policy = "balanced" if policy == "balanced" else "quota"
    chosen, runner_up = order[0], (order[1] if len(order) > 1 else None)

    def numbers(c: Candidate[T]) -> dict[str, Any]:
        return {
            "table": c.name,
            "quota": c.quota,
            "thread_limit": c.limit,
            "used_seconds": round(c.used_seconds, 3),
            "quota_share_used": round(quota_share_used(c.used_seconds, c.limit), 6),
            "seconds_since_optimized": round(now - c.last_optimized, 3) if c.last_optimized else None,
        }

    def weighed(c: Candidate[T]) -> str:
        if policy == "quota":
            return f"used {quota_share_used(c.used_seconds, c.limit):.1%} of its quota in the last hour"
        if not c.last_optimized:
            return "never optimized"
        return f"last optimized {now - c.last_optimized:.0f} s ago"

    reason = f"{policy}: {weighed(chosen)}"
    if runner_up is None:
        reason += "; the only table that could be planned"
    else:
        ties = " (a tie: by name)" if _key(policy, chosen) == _key(policy, runner_up) else ""
        reason += f", ahead of {len(order) - 1} other(s){ties}; runner-up {runner_up.name} {weighed(runner_up)}"
    return {
        "policy": policy,
        "candidates": len(order),
        "chosen": numbers(chosen),
        "runner_up": None if runner_up is None else numbers(runner_up),
        "reason": reason,
    }


def _key(policy: str, c: Candidate[T]) -> float:
    return c.last_optimized if policy == "balanced" else quota_share_used(c.used_seconds, c.limit)


def quota_share_used(used_seconds: float, limit: int) -> float:
    return used_seconds / (max(limit, 1) * QUOTA_WINDOW_SECONDS)


def thread_cap(quota: float, group_threads: int) -> int:
    """How many of the group's threads one table's tasks may hold at once: a quota above 1 is a number of
    threads; up to 1, a share of the group's threads (at least one)."""
    if quota > 1:
        return int(quota)
    return max(1, math.ceil(quota * max(1, group_threads)))
