"""The self-optimizing configuration of one table, parsed from its effective properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lakewarden.domain.clustering import parse_columns
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.file_groups import OPEN_FILE_COST, OPEN_FILE_COST_PROPERTY
from lakewarden.domain.tables import TABLE_DEFAULTS

P = "self-optimizing."


def _get(props: Mapping[str, str], key: str) -> str:
    return str(props.get(P + key, TABLE_DEFAULTS[P + key])).strip()


def _int(props: Mapping[str, str], key: str, minimum: int | None = None) -> int:
    text = _get(props, key)
    try:
        value = int(text)
    except ValueError:
        raise InvalidField(P + key, f"{text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise InvalidField(P + key, f"{value} must be >= {minimum}")
    return value


def _float(props: Mapping[str, str], key: str, low: float, high: float) -> float:
    text = _get(props, key)
    try:
        value = float(text)
    except ValueError:
        raise InvalidField(P + key, f"{text!r} is not a number") from None
    if not low <= value <= high:
        raise InvalidField(P + key, f"{value} must be between {low} and {high}")
    return value


def _bool(props: Mapping[str, str], key: str) -> bool:
    text = _get(props, key).lower()
    if text not in ("true", "false"):
        raise InvalidField(P + key, f"{text!r} must be true or false")
    return text == "true"


TURNED_OFF = "self-optimizing was turned off"  # why a process closes when its table's self-optimizing goes off


@dataclass(frozen=True)
class OptimizingConfig:
    enabled: bool
    group: str
    quota: float
    target_size: int
    max_task_size: int
    fragment_ratio: int
    min_target_size_ratio: float
    minor_trigger_file_count: int
    minor_trigger_interval_ms: int
    major_duplicate_ratio: float
    full_trigger_interval_ms: int
    full_rewrite_all_files: bool
    z_order_columns: tuple[str, ...]
    min_plan_interval_ms: int
    execute_num_retries: int
    # a task out of retries (or a cancel) commits what the process's other tasks staged (Amoro's, off by default)
    allow_partial_commit: bool
    filter: str | None
    branches: tuple[str, ...] = ()  # branches optimized besides main, each on its own head
    # what opening a file weighs in a plan's cost (Amoro reads Iceberg's read.split.open-file-cost, 4 MB)
    open_file_cost: int = OPEN_FILE_COST

    @property
    def fragment_threshold(self) -> int:
        """A data file of at most this many bytes is a fragment."""
        return self.target_size // self.fragment_ratio

    @property
    def undersized_threshold(self) -> int:
        """A data file above the fragment threshold and at most this many bytes is an undersized segment."""
        return int(self.target_size * self.min_target_size_ratio)

    @staticmethod
    def enabled_in(props: Mapping[str, str] | None) -> bool | None:
        """Whether a table's configuration enables self-optimizing; None when the configuration does not parse."""
        try:
            return OptimizingConfig.of(props or {}).enabled
        except InvalidField:
            return None

    @classmethod
    def or_defaults(cls, props: Mapping[str, str] | None) -> OptimizingConfig:
        """Parsed, or the defaults when a value does not parse: for the bookkeeping of work already under way (a
        process settling, a quota counted) when a table's property turned invalid in a catalog lakewarden does
        not guard; no new process is planned from such a configuration (the evaluator says why)."""
        try:
            return cls.of(props or {})
        except InvalidField:  # said once, in the table's evaluation; this runs on every poll and scaling tick
            return cls.of({})

    @classmethod
    def of(cls, props: Mapping[str, str]) -> OptimizingConfig:
        """Parse; a bad value raises InvalidField naming the property."""
        return cls(
            enabled=_bool(props, "enabled"),
            group=_get(props, "group") or "default",
            quota=_float(props, "quota", 0.0, 1024.0),
            target_size=_int(props, "target-size", 1),
            max_task_size=_int(props, "max-task-size-bytes", 1),
            fragment_ratio=_int(props, "fragment-ratio", 1),
            min_target_size_ratio=_float(props, "min-target-size-ratio", 0.0, 1.0),
            minor_trigger_file_count=_int(props, "minor.trigger.file-count", 1),
            minor_trigger_interval_ms=_int(props, "minor.trigger.interval"),
            major_duplicate_ratio=_float(props, "major.trigger.duplicate-ratio", 0.0, 1.0),
            full_trigger_interval_ms=_int(props, "full.trigger.interval"),
            full_rewrite_all_files=_bool(props, "full.rewrite-all-files"),
            z_order_columns=parse_columns(_get(props, "z-order.columns")),
            min_plan_interval_ms=_int(props, "min-plan-interval", 0),
            execute_num_retries=_int(props, "execute.num-retries", 0),
            allow_partial_commit=_bool(props, "allow-partial-commit"),
            filter=_get(props, "filter") or None,
            branches=_branches(_get(props, "branches")),
            open_file_cost=_open_file_cost(props),
        )


def optimizing_property(key: str) -> bool:
    """Whether a table property is one OptimizingConfig reads."""
    return key.startswith(P) or key == OPEN_FILE_COST_PROPERTY


def _open_file_cost(props: Mapping[str, str]) -> int:
    text = str(props.get(OPEN_FILE_COST_PROPERTY, OPEN_FILE_COST)).strip()
    if not text.isdigit():
        raise InvalidField(OPEN_FILE_COST_PROPERTY, f"{text!r} must be a number of bytes >= 0")
    return int(text)


def _branches(text: str) -> tuple[str, ...]:
    """`self-optimizing.branches`: branch names, comma-separated; main is always optimized and need not be named."""
    names = [name.strip() for name in text.split(",")] if text else []
    if any(not name for name in names):
        raise InvalidField(P + "branches", f"{text!r}: an empty branch name")
    return tuple(dict.fromkeys(name for name in names if name != "main"))
