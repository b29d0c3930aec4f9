"""Table maintenance: the actions besides self-optimizing, their configuration and what is due.

Each action reads Amoro's table properties (with Amoro's defaults) and a per-table `<prefix>.interval`
that overrides the server's interval for that action. The functions here decide from table
metadata alone whether an action has work to do and why, so a process is only created when
there is something for Spark to do, with its reason recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lakewarden.domain.durations import parse_duration
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey
from lakewarden.domain.processes import Action
from lakewarden.domain.retention import LONG_MAX, Policy, Snapshot

MAINTENANCE_ACTIONS = tuple(a for a in Action if a is not Action.OPTIMIZING)

# the table-property prefix of each action: `<prefix>.enabled`, `<prefix>.interval` (lakewarden's override)
PREFIX = {
    Action.EXPIRE_SNAPSHOTS: "table-expire",
    Action.CLEAN_ORPHAN_FILES: "clean-orphan-file",
    Action.CLEAN_DANGLING_DELETE_FILES: "clean-dangling-delete-files",
    Action.EXPIRE_DATA: "data-expire",
    Action.AUTO_CREATE_TAGS: "tag.auto-create",
    Action.REWRITE_MANIFESTS: "rewrite-manifests",
}

MAINTENANCE_DEFAULTS: dict[str, str] = {
    "table-expire.enabled": "true",
    "snapshot.keep.duration": "720min",
    "snapshot.keep.min-count": "1",
    "snapshot.keep.flink.checkpoint-retention": "7d",
    "snapshot.keep.wap.staged-retention": "7d",
    "clean-orphan-file.enabled": "false",
    "clean-orphan-file.min-existing-time-minutes": "2880",
    "clean-dangling-delete-files.enabled": "true",
    "data-expire.enabled": "false",
    "data-expire.level": "partition",
    "data-expire.field": "",
    "data-expire.retention-time": "",
    "data-expire.datetime-string-pattern": "yyyy-MM-dd",
    "data-expire.datetime-number-format": "TIMESTAMP_MS",
    "data-expire.base-on-rule": "LAST_COMMIT_TIME",
    "tag.auto-create.enabled": "false",
    "tag.auto-create.trigger.period": "daily",
    "tag.auto-create.trigger.offset.minutes": "0",
    "tag.auto-create.trigger.max-delay.minutes": "60",
    "tag.auto-create.max-age-ms": "-1",
    "tag.auto-create.tag-format": "",
    "rewrite-manifests.enabled": "true",
    "rewrite-manifests.trigger.manifest-count": "100",
    # lakewarden's own work yields to the writers it raced: the bases they planned on are kept for the window
    "lakewarden.commit.maintenance-yields": "true",
    "lakewarden.commit.yield-window": "1h",
}
MAINTENANCE_YIELDS = "lakewarden.commit.maintenance-yields"
YIELD_WINDOW = "lakewarden.commit.yield-window"


def yield_window(props: Mapping[str, str]) -> timedelta:
    """How long the base of each of lakewarden's own commits is kept, for a writer that planned on it before
    lakewarden committed: zero when the table turned yielding off."""
    if not _bool(props, MAINTENANCE_YIELDS):
        return timedelta(0)
    return _duration(_get(props, YIELD_WINDOW), YIELD_WINDOW)


def _get(props: Mapping[str, str], key: str) -> str:
    return str(props.get(key, MAINTENANCE_DEFAULTS.get(key, ""))).strip()


def _bool(props: Mapping[str, str], key: str) -> bool:
    text = _get(props, key).lower()
    if text not in ("true", "false"):
        raise InvalidField(key, f"{text!r} must be true or false")
    return text == "true"


def _int(props: Mapping[str, str], key: str, minimum: int | None = None) -> int:
    text = _get(props, key)
    try:
        value = int(text)
    except ValueError:
        raise InvalidField(key, f"{text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise InvalidField(key, f"{value} must be >= {minimum}")
    return value


def _choice(props: Mapping[str, str], key: str, choices: Sequence[str]) -> str:
    text = _get(props, key)
    for choice in choices:
        if text.lower() == choice.lower():
            return choice
    raise InvalidField(key, f"{text!r} must be one of {', '.join(choices)}")


def _duration(text: str, key: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise InvalidField(key, str(exc)) from None


def enabled(props: Mapping[str, str], action: Action) -> bool:
    return _bool(props, f"{PREFIX[action]}.enabled")


# Iceberg refuses to delete files of a table whose `gc.enabled` is not "true" (its files may be shared with
# other tables): RemoveSnapshots and DeleteOrphanFilesSparkAction check it before doing anything.
GC_ACTIONS = frozenset({Action.EXPIRE_SNAPSHOTS, Action.CLEAN_ORPHAN_FILES})


def forbidding_setting(props: Mapping[str, str], action: Action) -> str | None:
    """Why the table's own settings forbid the action, or None. Read as Iceberg reads them: Java's
    Boolean.parseBoolean, so any `gc.enabled` other than "true" (in any case) turns garbage collection off."""
    gc = props.get("gc.enabled")
    if action in GC_ACTIONS and gc is not None and str(gc).strip().lower() != "true":
        verb = "expire snapshots" if action is Action.EXPIRE_SNAPSHOTS else "delete orphan files"
        return (
            f"gc.enabled={gc} on the table: Iceberg does not {verb} of a table whose garbage collection is off "
            "(its files may be shared with other tables)"
        )
    return None


FAILURE_BACKOFF_MAX = timedelta(days=1)


def after_failures(interval: timedelta, failures: int, longest: timedelta = FAILURE_BACKOFF_MAX) -> timedelta:
    """How long the trigger waits before trying an action again after `failures` failed processes in a row:
    the interval doubled for each, up to `longest` (never shorter than the interval itself). A failing
    action is not retried every interval (each attempt costs an optimizer's time and a Spark job)."""
    if failures <= 0:
        return interval
    return max(interval, min(interval * (1 << min(failures, 16)), longest))


@dataclass(frozen=True)
class MaintenanceState:
    """Whether an action runs on a table, and if it cannot, why (a forbidding or misconfigured setting)."""

    action: Action
    enabled: bool
    blocked_by: str | None


def maintenance_states(props: Mapping[str, str]) -> list[MaintenanceState]:
    states = []
    for action in MAINTENANCE_ACTIONS:
        try:
            on = enabled(props, action)
        except InvalidField as exc:
            states.append(MaintenanceState(action, False, str(exc)))
            continue
        states.append(MaintenanceState(action, on, forbidding_setting(props, action)))
    return states


def interval_override(props: Mapping[str, str], action: Action) -> timedelta | None:
    """The table's own interval for the action (`<prefix>.interval`), if it sets one."""
    key = f"{PREFIX[action]}.interval"
    text = str(props.get(key, "")).strip()
    return _duration(text, key) if text else None


# ---- snapshot expiry


REF_AGE = "history.expire.max-ref-age-ms"  # Iceberg's default for a branch or tag that sets none


@dataclass(frozen=True)
class ExpireSnapshotsConfig:
    keep_duration: timedelta
    min_count: int
    flink_retention: timedelta = timedelta(days=7)
    wap_retention: timedelta = timedelta(days=7)
    max_ref_age_ms: int = LONG_MAX  # Iceberg's `history.expire.max-ref-age-ms`
    yield_window: timedelta = timedelta(0)

    @classmethod
    def of(cls, props: Mapping[str, str]) -> ExpireSnapshotsConfig:
        flink = "snapshot.keep.flink.checkpoint-retention"  # Amoro's
        wap = "snapshot.keep.wap.staged-retention"  # lakewarden's
        return cls(
            _duration(_get(props, "snapshot.keep.duration"), "snapshot.keep.duration"),
            _int(props, "snapshot.keep.min-count", 1),
            _duration(_get(props, flink), flink),
            _duration(_get(props, wap), wap),
            _int(props, REF_AGE, 0) if str(props.get(REF_AGE, "")).strip() else LONG_MAX,
            yield_window(props),
        )

    def policy(self) -> Policy:
        return Policy(
            keep_ms=_ms(self.keep_duration),
            min_count=self.min_count,
            max_ref_age_ms=self.max_ref_age_ms,
            flink_retention_ms=_ms(self.flink_retention),
            wap_retention_ms=_ms(self.wap_retention),
            yield_window_ms=_ms(self.yield_window),
        )


def _ms(duration: timedelta) -> int:
    return int(duration.total_seconds() * 1000)


# ---- orphan files


@dataclass(frozen=True)
class OrphanFilesConfig:
    min_existing: timedelta

    @classmethod
    def of(cls, props: Mapping[str, str]) -> OrphanFilesConfig:
        return cls(timedelta(minutes=_int(props, "clean-orphan-file.min-existing-time-minutes", 0)))


# ---- dangling delete files


def dangling_delete_files(data: Sequence[DataFile], deletes: Sequence[DeleteFile]) -> list[DeleteFile]:
    """Delete files that can no longer apply to any live data file of their partition.

    Position deletes apply to data files with a sequence number <= theirs, equality deletes to
    those with a smaller one; a partition without data files leaves every delete dangling, and a
    position delete or deletion vector that names a data file no longer live dangles too."""
    oldest: dict[PartitionKey, int] = {}
    for data_file in data:
        oldest[data_file.partition] = min(oldest.get(data_file.partition, data_file.sequence), data_file.sequence)
    live = {d.path for d in data}
    dangling = []
    for delete in deletes:
        first = oldest.get(delete.partition)
        if (
            first is None
            or (delete.referenced_data_file is not None and delete.referenced_data_file not in live)
            or (not delete.equality and first > delete.sequence)
            or (delete.equality and first >= delete.sequence)
        ):
            dangling.append(delete)
    return dangling


# ---- data expiration


@dataclass(frozen=True)
class DataExpireConfig:
    field: str
    retention: timedelta
    level: str  # partition | file
    string_pattern: str
    number_format: str  # TIMESTAMP_MS | TIMESTAMP_S
    base_on_rule: str  # LAST_COMMIT_TIME | CURRENT_TIME

    @classmethod
    def of(cls, props: Mapping[str, str]) -> DataExpireConfig:
        field = _get(props, "data-expire.field")
        if not field:
            raise InvalidField("data-expire.field", "names the column whose age expires data; it is not set")
        retention = _get(props, "data-expire.retention-time")
        if not retention:
            raise InvalidField("data-expire.retention-time", "how long data is kept (e.g. 30d) is not set")
        return cls(
            field=field,
            retention=_duration(retention, "data-expire.retention-time"),
            level=_choice(props, "data-expire.level", ("partition", "file")),
            string_pattern=_pattern(props, "data-expire.datetime-string-pattern"),
            number_format=_choice(props, "data-expire.datetime-number-format", ("TIMESTAMP_MS", "TIMESTAMP_S")),
            base_on_rule=_choice(props, "data-expire.base-on-rule", ("LAST_COMMIT_TIME", "CURRENT_TIME")),
        )


def _pattern(props: Mapping[str, str], key: str) -> str:
    pattern = _get(props, key)
    format_datetime(pattern, datetime(2000, 1, 1, tzinfo=UTC), key)  # a bad pattern fails here
    return pattern


# ---- auto tags


@dataclass(frozen=True)
class AutoTagConfig:
    period: str  # daily | hourly
    offset: timedelta
    max_delay: timedelta
    max_age_ms: int
    tag_format: str

    @classmethod
    def of(cls, props: Mapping[str, str]) -> AutoTagConfig:
        period = _choice(props, "tag.auto-create.trigger.period", ("daily", "hourly"))
        tag_format = _get(props, "tag.auto-create.tag-format") or (
            "'tag-'yyyyMMdd" if period == "daily" else "'tag-'yyyyMMddHH"
        )
        format_datetime(tag_format, datetime(2000, 1, 1, tzinfo=UTC))  # a bad pattern fails here, naming the property
        return cls(
            period=period,
            offset=timedelta(minutes=_int(props, "tag.auto-create.trigger.offset.minutes", 0)),
            max_delay=timedelta(minutes=_int(props, "tag.auto-create.trigger.max-delay.minutes", 0)),
            max_age_ms=_int(props, "tag.auto-create.max-age-ms", -1),
            tag_format=tag_format,
        )

    @property
    def length(self) -> timedelta:
        return timedelta(days=1) if self.period == "daily" else timedelta(hours=1)


_PATTERN_FIELDS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def format_datetime(pattern: str, moment: datetime, key: str = "tag.auto-create.tag-format") -> str:
    """`moment` formatted by a Java DateTimeFormatter-style pattern, in the subset Amoro's tag formats
    and date patterns use: quoted literals and yyyy, yy, MM, dd, HH, mm, ss. `key` names the property."""
    out: list[str] = []
    for literal, letters, _, other in re.findall(r"'([^']*)'|(([A-Za-z])\3*)|([^'A-Za-z]+)", pattern):
        if letters:
            if letters not in _PATTERN_FIELDS:
                raise InvalidField(key, f"{letters!r} is not one of {', '.join(_PATTERN_FIELDS)}")
            out.append(moment.strftime(_PATTERN_FIELDS[letters]))
        else:
            out.append(literal or other)
    if not "".join(out):
        raise InvalidField(key, f"{pattern!r} formats to nothing")
    return "".join(out)


@dataclass(frozen=True)
class TagPlan:
    name: str
    snapshot_id: int
    period_start: datetime
    trigger_at: datetime


def tag_due(
    config: AutoTagConfig,
    snapshots: Sequence[Snapshot],
    main_ancestry: Sequence[int],
    refs: Mapping[str, int],
    now: datetime,
) -> TagPlan | None:
    """The tag of the latest period whose trigger time (period end + offset) has passed, on the main
    snapshot that was current then, unless it exists already or the trigger is older than max-delay."""
    trigger_at = _last_trigger(config, now)
    period_start = trigger_at - config.offset - config.length
    if now - trigger_at > config.max_delay:
        return None
    name = format_datetime(config.tag_format, period_start)
    if name in refs:
        return None
    by_id = {s.snapshot_id: s for s in snapshots}
    trigger_ms = int(trigger_at.timestamp() * 1000)
    for snapshot_id in main_ancestry:  # newest first: the first one at or before the trigger time
        snapshot = by_id.get(snapshot_id)
        if snapshot is not None and snapshot.timestamp_ms <= trigger_ms:
            return TagPlan(name, snapshot_id, period_start, trigger_at)
    return None


def _last_trigger(config: AutoTagConfig, now: datetime) -> datetime:
    """The latest trigger time (a period's end + offset) at or before `now`."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((now - config.offset - epoch) // config.length) * config.length + config.offset


def next_tag_trigger(config: AutoTagConfig, now: datetime) -> datetime:
    """The next trigger time after `now`: when a tag may be due with no change to the table."""
    return _last_trigger(config, now) + config.length


# ---- manifests


@dataclass(frozen=True)
class RewriteManifestsConfig:
    min_count: int

    @classmethod
    def of(cls, props: Mapping[str, str]) -> RewriteManifestsConfig:
        return cls(_int(props, "rewrite-manifests.trigger.manifest-count", 2))
