"""Tables as lakewarden manages them: identifiers, status codes and effective configuration."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.maintenance import MAINTENANCE_DEFAULTS


@dataclass(frozen=True, order=True)
class TableIdentifier:
    catalog: str
    database: str  # the namespace, levels joined by '.'
    table: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.database}.{self.table}"

    @classmethod
    def parse(cls, text: str) -> TableIdentifier:
        """`catalog.database.table`; a nested namespace keeps its dots (`cat.a.b.tbl`)."""
        parts = text.split(".")
        if len(parts) < 3 or not all(parts):
            raise InvalidField("table", f"{text!r} must be catalog.database.table")
        return cls(parts[0], ".".join(parts[1:-1]), parts[-1])


class TableStatus(enum.IntEnum):
    """Amoro's optimizing status codes; lower means further along in optimizing."""

    FULL_OPTIMIZING = 100
    MAJOR_OPTIMIZING = 200
    MINOR_OPTIMIZING = 300
    # while the commit task of a process of several tasks commits what they staged (Amoro's server commits in
    # this status; a process of one task commits in that task, and its table does not enter it)
    COMMITTING = 400
    PLANNING = 500
    PENDING = 600
    IDLE = 700

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> TableStatus:
        """A status by name (`pending`, `MINOR_OPTIMIZING`) or code (`600`)."""
        key = text.strip()
        if key.isdigit():
            try:
                return cls(int(key))
            except ValueError:
                pass
        else:
            try:
                return cls[key.upper().replace("-", "_")]
            except KeyError:
                pass
        names = ", ".join(s.label for s in cls)
        raise InvalidField("status", f"{text!r} is not a table status ({names})")


# Amoro's table properties and defaults (docs/self-optimizing.md); values are strings as in Iceberg properties.
TABLE_DEFAULTS: dict[str, str] = {
    "self-optimizing.enabled": "true",
    "self-optimizing.group": "default",
    "self-optimizing.quota": "0.5",
    "self-optimizing.target-size": "134217728",
    "self-optimizing.max-task-size-bytes": "134217728",
    "self-optimizing.fragment-ratio": "8",
    "self-optimizing.min-target-size-ratio": "0.75",
    "self-optimizing.minor.trigger.file-count": "12",
    "self-optimizing.minor.trigger.interval": "3600000",
    "self-optimizing.major.trigger.duplicate-ratio": "0.1",
    "self-optimizing.full.trigger.interval": "-1",
    "self-optimizing.full.rewrite-all-files": "true",
    "self-optimizing.z-order.columns": "",
    "self-optimizing.min-plan-interval": "60000",
    "self-optimizing.execute.num-retries": "5",
    "self-optimizing.allow-partial-commit": "false",
    "self-optimizing.filter": "",
    "self-optimizing.branches": "",
    **MAINTENANCE_DEFAULTS,
}
# Prefixes of the properties lakewarden reads; effective config shows these and nothing else.
MANAGED_PREFIXES = (
    "self-optimizing.",
    "table-expire.",
    "snapshot.keep.",
    "clean-orphan-file.",
    "clean-dangling-delete-files.",
    "data-expire.",
    "tag.auto-create.",
    "rewrite-manifests.",
    "lakewarden.",
    "gc.enabled",
    # a Hudi table's own settings, which its services' rules read (domain/hudi.py), and who runs them
    "hoodie.",
    "hudi.",
)


def effective_config(catalog_defaults: Mapping[str, str], table_properties: Mapping[str, str]) -> dict[str, str]:
    """Built-in defaults, overridden by the catalog's `table.` defaults, overridden by the table's properties."""
    merged = dict(TABLE_DEFAULTS)
    for source in (catalog_defaults, table_properties):
        merged.update({k: v for k, v in source.items() if k.startswith(MANAGED_PREFIXES)})
    return dict(sorted(merged.items()))


def optimizing_group(config: Mapping[str, str]) -> str:
    return config.get("self-optimizing.group") or TABLE_DEFAULTS["self-optimizing.group"]


@dataclass(frozen=True)
class TableSnapshot:
    """What the explorer keeps of a loaded table: where its metadata is and a summary of it."""

    metadata_location: str
    current_snapshot_id: int | None
    properties: dict[str, str]
    summary: dict[str, Any]


@dataclass(frozen=True)
class TableHealth:
    """How healthy a table's layout is, from the evaluator's last verdict: the share of its data files
    that are small (fragments and undersized segments) and its delete files per data file."""

    small_file_ratio: float | None
    delete_file_ratio: float | None

    @property
    def label(self) -> str:
        if self.small_file_ratio is None or self.delete_file_ratio is None:
            return "unknown"
        if self.small_file_ratio <= 0.2 and self.delete_file_ratio <= 0.1:
            return "good"
        if self.small_file_ratio <= 0.5 and self.delete_file_ratio <= 0.3:
            return "fair"
        return "poor"

    @classmethod
    def of(cls, evaluation: Mapping[str, Any] | None) -> TableHealth:
        if not evaluation or "data_files" not in evaluation:
            return cls(None, None)
        data = int(evaluation["data_files"])
        if data == 0:
            return cls(0.0, 0.0)
        return cls(round(int(evaluation["small_files"]) / data, 3), round(int(evaluation["delete_files"]) / data, 3))
