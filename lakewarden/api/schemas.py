"""Request and read models of the ams API (`/api/v1`). Requests forbid unknown fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from lakewarden.domain.benefits import NetBenefit
from lakewarden.domain.reads import ReadSummary

ID_MAX = 2**63 - 1  # the largest id a database BIGINT holds (a larger one names nothing: 404, never 500)


class ClientBody(BaseModel):
    """A request body that holds pyiceberg's models. Their validators raise TypeError (and the like) on some
    malformed input, which pydantic would let through as a server error: here it is the client's 400."""

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="wrap")
    @classmethod
    def _client_errors(cls, data: Any, handler: Any) -> Any:
        try:
            return handler(data)
        except (TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Read(BaseModel):
    @field_serializer("*", when_used="json")
    def _utc(self, value: Any) -> Any:
        # SQLite hands back naive datetimes; everything lakewarden stores is UTC.
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC).isoformat()
        return value.isoformat() if isinstance(value, datetime) else value


class CatalogCreate(_Request):
    name: str = Field(description="Unique name: a letter, then letters, digits, '_' or '-' (max 64)")
    type: str = Field(description="sql | rest")
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="Connection (uri, warehouse, credential, …), database-filter / table-filter regexes, "
        "and `table.`-prefixed table defaults such as table.self-optimizing.group",
    )


class CatalogUpdate(_Request):
    type: str | None = None
    properties: dict[str, str] = Field(description="Replaces the catalog's properties")


class CatalogRead(_Read):
    name: str
    type: str
    properties: dict[str, str]
    health: str
    last_refresh_at: datetime | None
    last_error: str | None
    table_count: int
    created_at: datetime
    updated_at: datetime


class RefreshRead(_Read):
    catalog: str
    health: str
    error: str | None
    tables: int
    added: list[str]
    updated: list[str]
    disposed: list[str]
    loaded: int = Field(
        description="Tables whose metadata was read: every listed one, or only the new, moved and failing ones where "
        "the catalog lists each table's metadata location (SQL, internal, Hive and filesystem catalogs)"
    )
    duration_ms: int


class GroupCreate(_Request):
    name: str = Field(description="1-64 letters, digits, '_' or '-', starting with a letter or digit")
    container: str = Field(description="A container configured in the server config")
    properties: dict[str, str] = Field(default_factory=dict)


class GroupUpdate(_Request):
    container: str | None = None
    properties: dict[str, str] | None = Field(None, description="Replaces the group's properties")


class AllocationRead(_Read):
    """A group's dynamic allocation as the leader's resource maintainer sees it (dynamic-allocation.*)."""

    threads: int = Field(description="Threads of the group's registered optimizers")
    idle_optimizers: int = Field(description="Registered optimizers holding no task and not draining")
    draining: int = Field(description="Optimizers asked to leave, finishing their tasks")
    scale_ups: int = Field(description="Rounds that started optimizers")
    scale_downs: int = Field(description="Optimizers drained for idleness")
    forced_stops: int = Field(description="Draining optimizers stopped at drain-timeout, their tasks handed out again")
    backlog_seconds: float = Field(description="How long demand has been beyond the group's threads (0: none)")


class GroupRead(_Read):
    name: str
    container: str
    properties: dict[str, str]
    table_count: int
    created_at: datetime
    updated_at: datetime
    container_error: str | None = Field(
        None, description="Why the group's container cannot keep its optimizers running (it retries with back-off)"
    )
    usage: dict[str, float] = Field(
        default_factory=dict,
        description="What its ended processes cost: Spark's figures (spark_cpu_ms, spark_run_ms, "
        "spark_written_bytes, …) added up, and `cost` at the group's price, in `currency`",
    )
    currency: str = ""
    optimizing_benefit: NetBenefit | None = Field(
        None,
        description="What the group's optimizing processes bought, added up (those settled, a day after each "
        "ended, within the process history kept): processes judged, their CPU-seconds, the files their tables' "
        "scans did not open since, per CPU-second",
    )
    allocation: AllocationRead | None = Field(
        None, description="With dynamic-allocation.enabled, on the leader: its optimizers' scaling"
    )


class TableBrief(_Read):
    catalog: str
    database: str
    table: str
    identifier: str
    format: str
    status: str
    status_code: int
    group: str
    data_files: int
    delete_files: int
    files_size_bytes: int
    last_refreshed_at: datetime | None
    health: str = Field(description="good, fair, poor or unknown, from the two ratios below")
    small_file_ratio: float | None = Field(description="Small data files (fragments, undersized) per data file")
    delete_file_ratio: float | None = Field(description="Delete files per data file")


class MaintenanceRead(_Read):
    action: str
    enabled: bool = Field(description="Whether the action's <prefix>.enabled is on for the table")
    blocked_by: str | None = Field(
        description="Why no process is created for it even when enabled or run by hand: a table setting that "
        "forbids it (e.g. gc.enabled=false) or a misconfigured property"
    )
    failures: int = Field(0, description="Its newest processes that failed in a row (scheduled runs back off)")
    retry_after: datetime | None = Field(
        None, description="While failing: when the trigger tries it again (the interval doubled per failure, <= 1d)"
    )
    checked_at: datetime | None = Field(None, description="When the scheduled trigger last looked at the table for it")
    work_expected_at: datetime | None = Field(
        None,
        description="What that look found: from when work may come with no change to the table (e.g. the oldest "
        "snapshot ages past the keep duration; the trigger looks again at the later of this and its last look plus "
        "the interval); null: only a new snapshot or configuration can bring work",
    )


class TableRead(TableBrief):
    status_changed_at: datetime
    config: dict[str, str] = Field(description="Effective configuration: defaults < catalog table.* < table properties")
    summary: dict[str, Any] = Field(description="File and snapshot summary of the current snapshot")
    metadata_location: str | None
    current_snapshot_id: int | None
    refresh_error: str | None
    evaluation: dict[str, Any] | None = Field(
        description="The evaluator's verdict on evaluation.snapshot_id: type, reasons, and per partition "
        "its file classes, type and reasons (why the table is pending or idle)"
    )
    evaluated_at: datetime | None
    last_minor_optimizing_at: datetime | None
    last_major_optimizing_at: datetime | None
    last_full_optimizing_at: datetime | None
    maintenance: list[MaintenanceRead] = Field(description="Each maintenance action: enabled, and what blocks it")
    usage: dict[str, float] = Field(
        default_factory=dict,
        description="What its ended processes cost: Spark's figures (spark_cpu_ms, spark_run_ms, "
        "spark_written_bytes, …) added up, and `cost` at the group's price, in `currency`",
    )
    currency: str = ""
    deferred: str | None = Field(
        None,
        description="A pending table of a group with an optimizing budget that is not next: why it waits "
        "(its rank by value or the budget spent, its reads, its small files) and when it is looked at next",
    )
    optimizing_benefit: NetBenefit | None = Field(
        None,
        description="What the table's successful optimizing processes bought, added up: the processes with scans "
        "before and after them, their CPU-seconds, the files the scans since did not open, per CPU-second",
    )
    reads: ReadSummary | None = Field(
        None,
        description="How the table is read, from the scans and commits reported to lakewarden's REST catalog "
        "and the scans it planned: scans per hour, day and week, files, delete files and bytes per scan (p50, "
        "p95), planning time, engines, principals, the partitions read most, and the last day hour by hour",
    )


class Health(_Read):
    status: str
    version: str
    database: str
    time: datetime
    role: str = Field(description="leader, or follower (high availability: another node leads)")
    node: str = Field(description="This node's URL")
    leader: str | None = Field(description="The leader's URL; null while an election is under way")
    epoch: int | None = Field(description="The leader's fencing token, when this node leads")


class NodeRead(_Read):
    node_id: str
    url: str
    leader: bool
    started_at: datetime
    last_seen_at: datetime
