"""What another optimizing policy would have done to a table: its recorded commits and scans replayed.

The table is followed as counts of small files, other data files, delete files and bytes, each writer's commit
applied from its snapshot summary (lakewarden's own rewrites left out). A policy (`amoro`, `scheduled:<minutes>`,
`budget:<cpu-seconds per hour>`, `none`) decides after each commit and on its own clock; a process costs its bytes
at the group's CPU-seconds per byte, and each recorded scan reads its share of the files the policy left."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakewarden.domain.budget import HARD_DELETE_FILES_DEFAULT, HARD_SMALL_FILES_DEFAULT, MIN_PROCESS_CPU_SECONDS
from lakewarden.domain.errors import InvalidField

POLICY_FORMS = "amoro, none, scheduled:<minutes> or budget:<cpu-seconds per hour>"
MAX_POLICIES = 8


@dataclass(frozen=True)
class Policy:
    kind: str  # amoro, scheduled, budget, none
    every: timedelta | None = None  # scheduled
    budget: float | None = None  # budget

    @property
    def name(self) -> str:
        if self.kind == "scheduled" and self.every is not None:
            return f"scheduled:{self.every.total_seconds() / 60:g}"
        if self.kind == "budget":
            return f"budget:{self.budget:g}"
        return self.kind

    @staticmethod
    def parse(text: str, what: str = "policy") -> Policy:
        kind, _, argument = text.strip().partition(":")
        if kind in ("amoro", "none") and not argument:
            return Policy(kind)
        try:
            number = float(argument)
        except ValueError:
            number = -1.0
        if kind in ("scheduled", "budget") and 0 < number < 1e9:
            return Policy(kind, every=timedelta(minutes=number)) if kind == "scheduled" else Policy(kind, budget=number)
        raise InvalidField(what, f"{text!r} is not a policy: one of {POLICY_FORMS}")


@dataclass(frozen=True)
class Commit:
    """A writer's commit as its snapshot summary tells it (`own`: one of lakewarden's rewrites)."""

    at: datetime
    added_files: int
    added_bytes: int
    removed_files: int
    removed_bytes: int
    added_deletes: int
    removed_deletes: int
    live_files: int  # data and delete files after it (the summary's totals)
    own: bool = False
    data_files: int = 0  # the summary's totals: data files, their bytes, delete files
    data_bytes: int = 0
    delete_files: int = 0

    @staticmethod
    def of(at: datetime, summary: dict[str, str], own: bool) -> Commit:
        def n(key: str) -> int:
            value = summary.get(key, "0")
            return int(value) if str(value).lstrip("-").isdigit() else 0

        return Commit(
            at=at,
            added_files=n("added-data-files"),
            added_bytes=n("added-files-size"),
            removed_files=n("deleted-data-files"),
            removed_bytes=n("removed-files-size"),
            added_deletes=n("added-delete-files"),
            removed_deletes=n("removed-delete-files"),
            live_files=n("total-data-files") + n("total-delete-files"),
            own=own,
            data_files=n("total-data-files"),
            data_bytes=n("total-files-size"),
            delete_files=n("total-delete-files"),
        )


@dataclass(frozen=True)
class Scan:
    at: datetime
    files: int  # data and delete files it planned
    delete_files: int


@dataclass(frozen=True)
class Table:
    """What the replay needs of the table's configuration."""

    target_size: int
    fragment_threshold: int
    minor_trigger_file_count: int
    minor_trigger_interval: timedelta | None  # None: no interval trigger
    cpu_seconds_per_byte: float


@dataclass
class _Files:
    small: int = 0
    small_bytes: int = 0
    large: int = 0
    large_bytes: int = 0
    deletes: int = 0

    @property
    def live(self) -> int:
        return self.small + self.large + self.deletes

    def write(self, c: Commit, table: Table) -> None:
        if c.removed_files:
            data = self.small + self.large
            share = min(1.0, c.removed_files / data) if data else 0.0
            gone_small = round(self.small * share)
            self.small, self.small_bytes = self.small - gone_small, int(self.small_bytes * (1 - share))
            self.large = max(0, self.large - (c.removed_files - gone_small))
            self.large_bytes = int(self.large_bytes * (1 - share))
        if c.added_files:
            if c.added_bytes / c.added_files <= table.fragment_threshold:
                self.small, self.small_bytes = self.small + c.added_files, self.small_bytes + c.added_bytes
            else:
                self.large, self.large_bytes = self.large + c.added_files, self.large_bytes + c.added_bytes
        self.deletes = max(0, self.deletes + c.added_deletes - c.removed_deletes)

    def merge(self, table: Table) -> int:
        """Merges the small files and applies the delete files; returns the bytes rewritten."""
        rewritten = self.small_bytes
        written = math.ceil(rewritten / table.target_size) if rewritten else 0
        self.large, self.large_bytes = self.large + written, self.large_bytes + rewritten
        self.small = self.small_bytes = self.deletes = 0
        return rewritten


@dataclass
class Projection:
    policy: str
    processes: int = 0
    cpu_seconds: float = 0.0
    bytes_rewritten: int = 0
    scans: int = 0
    files_per_scan: float = 0.0
    delete_files_per_scan: float = 0.0


def _cost(bytes_: int, table: Table) -> float:
    return max(MIN_PROCESS_CPU_SECONDS, bytes_ * table.cpu_seconds_per_byte)


def replay(policy: Policy, table: Table, commits: Sequence[Commit], scans: Sequence[Scan], end: datetime) -> Projection:
    """`commits` and `scans` in time order, the first commit the table's state at the start (its totals)."""
    out = Projection(policy.name)
    files = _Files()
    if commits:  # the table as the window starts: the first commit's totals
        first = commits[0]
        start = Commit(first.at, first.data_files, first.data_bytes, 0, 0, first.delete_files, 0, first.live_files)
        files.write(start, table)
    last_process = commits[0].at if commits else end
    next_run = (commits[0].at + policy.every) if policy.every is not None and commits else None
    events = sorted([(c.at, 0, c) for c in commits[1:]] + [(s.at, 1, s) for s in scans], key=lambda e: (e[0], e[1]))
    actual_live = commits[0].live_files if commits else 0
    seen_files: list[float] = []
    seen_deletes: list[float] = []
    spent: list[tuple[datetime, float]] = []  # each process's time and CPU-seconds (the budget's hour)
    scanned_since_process = True  # no process yet: the budget's first may go

    def run(at: datetime) -> None:
        nonlocal last_process, scanned_since_process
        scanned_since_process = False
        bytes_ = files.merge(table)
        cost = _cost(bytes_, table)
        out.processes += 1
        out.cpu_seconds += cost
        out.bytes_rewritten += bytes_
        spent.append((at, cost))
        last_process = at

    def triggered(at: datetime) -> bool:
        waiting = files.small + files.deletes
        if waiting >= table.minor_trigger_file_count:
            return True
        interval = table.minor_trigger_interval
        return waiting > 1 and interval is not None and at - last_process > interval

    def decide(at: datetime) -> None:
        if policy.kind in ("amoro", "budget") and triggered(at):
            if policy.kind == "budget" and policy.budget is not None:
                hour = sum(c for t, c in spent if at - t < timedelta(hours=1))
                hard = files.small >= HARD_SMALL_FILES_DEFAULT or files.deletes >= HARD_DELETE_FILES_DEFAULT
                if (hour >= policy.budget or not scanned_since_process) and not hard:
                    return
            run(at)

    def scheduled_until(at: datetime) -> None:
        nonlocal next_run
        while next_run is not None and next_run <= at:
            if files.small >= 2 or files.deletes:
                run(next_run)
            else:  # the job ran and found nothing: a Spark job all the same
                out.processes, out.cpu_seconds = out.processes + 1, out.cpu_seconds + MIN_PROCESS_CPU_SECONDS
            next_run += policy.every  # type: ignore[operator]

    for at, _, event in events:
        scheduled_until(at)
        if isinstance(event, Commit):
            actual_live = event.live_files
            if not event.own:
                files.write(event, table)
                decide(at)
        else:
            scanned_since_process = True
            share = min(1.0, event.files / actual_live) if actual_live else 1.0
            seen_files.append(share * files.live)
            seen_deletes.append(share * files.deletes)
            decide(at)  # the interval trigger fires on the evaluator's clock too
    scheduled_until(end)
    out.scans = len(seen_files)
    out.files_per_scan = sum(seen_files) / len(seen_files) if seen_files else 0.0
    out.delete_files_per_scan = sum(seen_deletes) / len(seen_deletes) if seen_deletes else 0.0
    return out


# ---- a group's shadow policy

SHADOW = "optimizing.shadow-policy"  # a group's policy run in shadow: replayed beside what its own does
SHADOW_SINCE = "optimizing.shadow-policy.since"  # when it was set (ISO 8601, set by the API)


def validate_shadow(properties: Mapping[str, str]) -> None:
    value = properties.get(SHADOW)
    if value is not None:
        Policy.parse(value, f"properties.{SHADOW}")
    since = properties.get(SHADOW_SINCE)
    if since is not None:
        try:
            datetime.fromisoformat(since)
        except ValueError:
            raise InvalidField(f"properties.{SHADOW_SINCE}", f"{since!r} is not an ISO 8601 time") from None


def stamp_shadow(old: Mapping[str, str], new: Mapping[str, str], now: datetime) -> dict[str, str]:
    """The properties to store: a shadow policy set or changed starts its period now (unless `since` is given)."""
    out = dict(new)
    if out.get(SHADOW) is None:
        out.pop(SHADOW_SINCE, None)
    elif out.get(SHADOW) != old.get(SHADOW) and SHADOW_SINCE not in {k for k in new if new.get(k) != old.get(k)}:
        out[SHADOW_SINCE] = now.isoformat()
    return out
