"""How a table is read: the scan and commit reports its catalog is told, and what they add up to.

Iceberg's clients report every scan they plan and every commit to the REST catalog's metrics endpoint, and the
server's own scan planning records each plan it answers. Each becomes a `ReadReport`, kept per table (and per
partition when a filter pins one); `summarize` turns them into what a table's page shows. Metric names are those of
Iceberg's `ScanMetricsResult` and `CommitMetricsResult`. docs/reads.md describes the whole."""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import quote_plus, unquote_plus

import mmh3

FILTER_KEPT_CHARS = 1000  # a filter longer than this is kept cut (it is shown, never parsed again)
ENGINE_NAME = "engine-name"  # EnvironmentContext's key in a report's metadata


class ReportKind(StrEnum):
    SCAN = "scan"
    COMMIT = "commit"


class ReportSource(StrEnum):
    CLIENT = "client"  # a client's report to the metrics endpoint
    SERVER = "server"  # a plan the server's scan planning answered


@dataclass(frozen=True)
class ReadReport:
    """One scan (or commit) of a table, as reported: counts are of the files the scan planned to read (a commit's:
    the files it added)."""

    kind: ReportKind
    source: ReportSource
    snapshot_id: int | None
    data_files: int
    delete_files: int
    data_bytes: int
    delete_bytes: int
    manifests: int  # manifests read (scanned), data and delete
    planning_ms: float  # a scan's planning time; a commit's duration
    partition: str | None = None  # the one partition the filter pins, as Iceberg names its path
    filter: str | None = None
    engine: str | None = None
    principal: str | None = None
    operation: str | None = None  # a commit's operation (append, overwrite, …)


def _counter(metrics: Mapping[str, Any], name: str) -> int:
    value = metrics.get(name)
    return int(value.get("value", 0)) if isinstance(value, Mapping) else 0


def _timer_ms(metrics: Mapping[str, Any], name: str) -> float:
    """A TimerResult's total duration in milliseconds (Iceberg reports nanoseconds; other units are honoured)."""
    value = metrics.get(name)
    if not isinstance(value, Mapping):
        return 0.0
    per_ms = {"nanoseconds": 1e6, "microseconds": 1e3, "milliseconds": 1.0, "seconds": 1e-3, "minutes": 1 / 60_000}
    return float(value.get("total-duration", 0)) / per_ms.get(str(value.get("time-unit", "nanoseconds")).lower(), 1e6)


def scan_report(
    metrics: Mapping[str, Any],
    snapshot_id: int | None,
    filter_json: Any,
    metadata: Mapping[str, str],
    principal: str | None,
    identity_fields: Sequence[tuple[str, str]] = (),
    source: ReportSource = ReportSource.CLIENT,
) -> ReadReport:
    """A ScanReport's metrics as a ReadReport; `identity_fields` (`partition_of`) let a filter pinning a
    partition name it."""
    return ReadReport(
        kind=ReportKind.SCAN,
        source=source,
        snapshot_id=snapshot_id,
        data_files=_counter(metrics, "result-data-files"),
        delete_files=_counter(metrics, "result-delete-files"),
        data_bytes=_counter(metrics, "total-file-size-in-bytes"),
        delete_bytes=_counter(metrics, "total-delete-file-size-in-bytes"),
        manifests=_counter(metrics, "scanned-data-manifests") + _counter(metrics, "scanned-delete-manifests"),
        planning_ms=_timer_ms(metrics, "total-planning-duration"),
        partition=partition_of(filter_json, identity_fields),
        filter=filter_text(filter_json),
        engine=metadata.get(ENGINE_NAME),
        principal=principal,
    )


def commit_report(
    metrics: Mapping[str, Any],
    snapshot_id: int | None,
    operation: str,
    metadata: Mapping[str, str],
    principal: str | None,
) -> ReadReport:
    """A CommitReport's metrics as a ReadReport: the files and bytes the commit added."""
    return ReadReport(
        kind=ReportKind.COMMIT,
        source=ReportSource.CLIENT,
        snapshot_id=snapshot_id,
        data_files=_counter(metrics, "added-data-files"),
        delete_files=_counter(metrics, "added-delete-files"),
        data_bytes=_counter(metrics, "added-files-size-bytes"),
        delete_bytes=0,
        manifests=_counter(metrics, "manifests-created"),
        planning_ms=_timer_ms(metrics, "total-duration"),
        engine=metadata.get(ENGINE_NAME),
        principal=principal,
        operation=operation,
    )


def filter_text(filter_json: Any) -> str | None:
    """The filter as compact JSON, cut to FILTER_KEPT_CHARS; None for no filter (`true`)."""
    if filter_json is None or filter_json is True or filter_json == "true":
        return None
    text = json.dumps(filter_json, separators=(",", ":"), sort_keys=True)
    return text[:FILTER_KEPT_CHARS]


def _pinned(expression: Any, into: dict[str, Any]) -> None:
    """Collects the `column = value` terms a scan's rows must all meet: those of the expression itself or of its
    `and`s. An `or` or a `not` pins nothing (either side may hold); another predicate (a range, `in`) narrows
    the scan further, inside whatever is pinned."""
    if not isinstance(expression, Mapping):
        return
    kind = expression.get("type")
    if kind == "and":
        _pinned(expression.get("left"), into)
        _pinned(expression.get("right"), into)
    elif kind == "eq" and isinstance(expression.get("term"), str) and "value" in expression:
        into[expression["term"]] = expression["value"]


def partition_of(filter_json: Any, identity_fields: Sequence[tuple[str, str]]) -> str | None:
    """The partition a scan reads when its filter pins every partition column with `=` through `and`s, named as
    Iceberg names its path ("day=2026-11-27/region=eu"). `identity_fields` are the table's partition fields as
    (source column, field name), empty unless every field is an identity one: None for an unpartitioned table,
    another transform, or a filter that could read several partitions."""
    if not identity_fields:
        return None
    pinned: dict[str, Any] = {}
    _pinned(filter_json, pinned)
    if any(column not in pinned for column, _ in identity_fields):
        return None
    return "/".join(
        f"{quote_plus(name, safe='')}={quote_plus(_human(pinned[column]), safe='')}" for column, name in identity_fields
    )


def _human(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# ---- partitions of sanitized filters

# Iceberg's clients sanitize a report's filter (ExpressionUtil.sanitize): a string becomes "(hash-%08x)" of its
# bucket hash, a number "(N-digit-int)", a date "(date-today)" or "(date-N-days-ago)" (its distance from the day of
# the report, up to 90 days), so a partition pinned by a client's scan names no value. It is found again among
# the table's known partitions: the one whose values sanitize, on the report's day, to what was reported.
SANITIZED = "("
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
INT_MAX = 2**31 - 1


def _hashed(value: str) -> int:
    """ExpressionUtil's HASH_FUNC: Iceberg's bucket transform of a string into Integer.MAX_VALUE buckets."""
    return (mmh3.hash(value.encode()) & INT_MAX) % INT_MAX


def _sanitized_date(day: date, today: date) -> str:
    diff = (today - day).days
    if diff == 0:
        return "(date-today)"
    if abs(diff) < 90:
        return f"(date-{abs(diff)}-days-{'ago' if diff > 0 else 'from-now'})"
    return "(date)"


def sanitized_forms(value: str, today: date) -> set[str]:
    """What a partition value (as its path shows it) may have been sanitized to by a client, for each type the
    value could have: a string's hash, a date's distance from `today`, an integer's digits."""
    forms = {f"(hash-{_hashed(value):08x})"}
    if _DATE.fullmatch(value):
        with contextlib.suppress(ValueError):
            forms.add(_sanitized_date(date.fromisoformat(value), today))
    with contextlib.suppress(ValueError):
        forms.add(f"({len(str(abs(int(value))))}-digit-int)")
    return forms


def _pairs(path: str) -> list[tuple[str, str]]:
    return [(unquote_plus(n), unquote_plus(v)) for n, _, v in (part.partition("=") for part in path.split("/"))]


def resolve_partition(reported: str, known: Sequence[str], today: date) -> str:
    """The known partition a sanitized `reported` one stands for when exactly one matches; else `reported`."""
    if SANITIZED not in unquote_plus(reported):
        return reported
    wanted = _pairs(reported)
    matches = []
    for candidate in known:
        pairs = _pairs(candidate)
        if [n for n, _ in pairs] == [n for n, _ in wanted] and all(
            got == value or got in sanitized_forms(value, today)
            for (_, got), (_, value) in zip(wanted, pairs, strict=True)
        ):
            matches.append(candidate)
    return matches[0] if len(matches) == 1 else reported


# ---- what a table's reports add up to


@dataclass(frozen=True)
class ReportedRead:
    """A kept report, as the summary reads it back."""

    at: datetime
    kind: str
    source: str
    data_files: int
    delete_files: int
    data_bytes: int
    delete_bytes: int
    planning_ms: float
    partition: str | None
    engine: str | None
    principal: str | None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (the smallest value with at least `fraction` of them at or below it)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = math.ceil(round(fraction * len(ordered), 9))  # rounded: 0.95 * 20 is 19, not 19.000000000000004
    return float(ordered[min(max(rank, 1), len(ordered)) - 1])


@dataclass(frozen=True)
class Spread:
    p50: float
    p95: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        return Spread(percentile(values, 0.5), percentile(values, 0.95))


@dataclass(frozen=True)
class HourOfReads:
    hour: datetime  # its start
    scans: int
    files_per_scan: float  # data and delete files, on average
    commits: int


@dataclass(frozen=True)
class ReadSummary:
    """What a table's reports of the last day (and week) say about how it is read; `engines`, `principals` and
    `partitions` count the sampled scans."""

    scans_last_hour: int
    scans_last_day: int
    scans_last_week: int
    commits_last_day: int
    last_scan_at: datetime | None
    files_per_scan: Spread  # data and delete files planned
    delete_files_per_scan: Spread
    bytes_per_scan: Spread
    planning_ms: Spread
    engines: dict[str, int]  # sampled scans of the last week by engine ("unknown" when the client did not say)
    principals: dict[str, int]  # and by who read
    partitions: dict[str, int]  # the partitions read most (filters that pinned one), up to PARTITIONS_SHOWN
    hourly: list[HourOfReads]  # the last day, oldest hour first


PARTITIONS_SHOWN = 10
WEEK = timedelta(days=7)
SAMPLED = 20_000  # the newest reports of the week the spreads and breakdowns are taken from


def day_of_hours(now: datetime) -> list[datetime]:
    """The starts of the 24 hours before `now`, oldest first: the last one is the last 60 minutes."""
    return [now - timedelta(hours=h) for h in range(24, 0, -1)]


def summarize(sample: Sequence[ReportedRead], hourly: Sequence[HourOfReads], scans_last_week: int) -> ReadSummary:
    """`sample` are the table's newest reports of the last week (at most SAMPLED, newest first), `hourly` its
    counts over the last day (`day_of_hours`); the spreads are of the last day's scans (the week's when the
    day has none)."""
    scans = [r for r in sample if r.kind == ReportKind.SCAN]
    day_start = hourly[0].hour if hourly else None
    recent = [r for r in scans if day_start is None or r.at >= day_start] or scans
    return ReadSummary(
        scans_last_hour=hourly[-1].scans if hourly else 0,
        scans_last_day=sum(h.scans for h in hourly),
        scans_last_week=scans_last_week,
        commits_last_day=sum(h.commits for h in hourly),
        last_scan_at=scans[0].at if scans else None,
        files_per_scan=Spread.of([r.data_files + r.delete_files for r in recent]),
        delete_files_per_scan=Spread.of([r.delete_files for r in recent]),
        bytes_per_scan=Spread.of([r.data_bytes + r.delete_bytes for r in recent]),
        planning_ms=Spread.of([r.planning_ms for r in recent]),
        engines=dict(Counter(r.engine or "unknown" for r in scans).most_common()),
        principals=dict(Counter(r.principal or "anonymous" for r in scans).most_common()),
        partitions=dict(Counter(r.partition for r in scans if r.partition).most_common(PARTITIONS_SHOWN)),
        hourly=list(hourly),
    )
