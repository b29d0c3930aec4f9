"""ORM rows of the system database. The schema changes only through Alembic migrations."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from lakewarden.store.secrets import SealedJSON

# 64-bit ids; SQLite autoincrements only an INTEGER PRIMARY KEY (which is 64-bit there anyway)
ID = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


# made by migration 0020 and read by raw SQL, never mapped: SQLite's FTS5 table of table names (with its shadow
# tables) and PostgreSQL's trigram index of them
UNMAPPED = ("table_search", "ix_table_identifier_name_trgm")


def mapped_name(name: str | None, type_: str, parents: object) -> bool:
    """For Alembic's `include_name`: whether a schema object is one the models describe."""
    return not (name or "").startswith(UNMAPPED)


class CatalogRow(Base):
    __tablename__ = "catalog_meta"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    properties: Mapped[dict[str, Any]] = mapped_column(SealedJSON)  # secret values encrypted (store/secrets.py)
    # unknown until the first refresh; unhealthy while the last listing failed
    health: Mapped[str] = mapped_column(String(16), default="unknown")
    last_refresh_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    # a fingerprint of the table defaults every table was last loaded with (services/tables/explorer.py)
    loaded_defaults: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ResourceGroupRow(Base):
    __tablename__ = "resource_group"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    container: Mapped[str] = mapped_column(String(64))
    properties: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class TableIdentifierRow(Base):
    __tablename__ = "table_identifier"
    __table_args__ = (UniqueConstraint("catalog_name", "db_name", "table_name", name="uq_table_identifier"),)

    table_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    catalog_name: Mapped[str] = mapped_column(String(64), ForeignKey("catalog_meta.name"), index=True)
    db_name: Mapped[str] = mapped_column(String(255))
    table_name: Mapped[str] = mapped_column(String(255))
    format: Mapped[str] = mapped_column(String(32), default="iceberg")
    created_at: Mapped[datetime]


class TableRuntimeRow(Base):
    __tablename__ = "table_runtime"

    table_id: Mapped[int] = mapped_column(ForeignKey("table_identifier.table_id"), primary_key=True)
    status_code: Mapped[int] = mapped_column(Integer, default=700, index=True)
    status_changed_at: Mapped[datetime]
    optimizing_group: Mapped[str] = mapped_column(String(64), index=True)
    # effective configuration: built-in defaults < catalog `table.` defaults < table properties
    config: Mapped[dict[str, Any]]
    # file and snapshot summary of the current snapshot
    summary: Mapped[dict[str, Any]]
    metadata_location: Mapped[str | None] = mapped_column(Text)
    current_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    last_refreshed_at: Mapped[datetime | None]
    refresh_error: Mapped[str | None] = mapped_column(Text)
    # the evaluator's verdict on `evaluated_snapshot_id`: type, reasons, partitions (why pending or idle)
    evaluated_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    evaluated_at: Mapped[datetime | None]
    evaluation: Mapped[dict[str, Any] | None]
    # when the verdict may change with no new snapshot or configuration (a minor or full interval passes, a
    # process ends, a chart's sample is due); None: only a new snapshot or configuration changes it
    next_evaluation_at: Mapped[datetime | None] = mapped_column(index=True)
    # when the maintenance trigger next looks at the table (None: not until it changes), and per action what its
    # last look found: {"checked": when, "next": when work may come without a change, None if only with one}
    next_maintenance_at: Mapped[datetime | None] = mapped_column(index=True)
    maintenance: Mapped[dict[str, Any] | None]
    last_minor_optimizing_at: Mapped[datetime | None]
    last_major_optimizing_at: Mapped[datetime | None]
    last_full_optimizing_at: Mapped[datetime | None]
    last_planned_at: Mapped[datetime | None]
    optimizing_process_id: Mapped[int | None] = mapped_column(BigInteger)
    # per partition ('<spec id>:<path>'), the files a rewrite wrote without reducing their number
    unreduced: Mapped[dict[str, Any] | None]
    # per partition, the files its last clustering rewrite wrote, and by which clustering (domain/clustering.py)
    clustered: Mapped[dict[str, Any] | None]


class OptimizerRow(Base):
    """A registered optimizer (one PySpark application); lost when its heartbeat stops."""

    __tablename__ = "optimizer"

    token: Mapped[str] = mapped_column(String(64), primary_key=True)
    group_name: Mapped[str] = mapped_column(String(64), index=True)
    container: Mapped[str | None] = mapped_column(String(64))
    resource_id: Mapped[str | None] = mapped_column(String(128))
    parallelism: Mapped[int] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(255))
    properties: Mapped[dict[str, Any]]
    registered_at: Mapped[datetime]
    last_heartbeat_at: Mapped[datetime]


class OptimizerResourceRow(Base):
    """An optimizer a container started (a process, a Spark application), recorded when it is started and
    deleted when it is gone: a new leader adopts what the last one started instead of starting doubles."""

    __tablename__ = "optimizer_resource"

    resource_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    group_name: Mapped[str] = mapped_column(String(64), index=True)
    container: Mapped[str] = mapped_column(String(64))
    threads: Mapped[int] = mapped_column(Integer)
    started_by: Mapped[str] = mapped_column(String(255))  # the node's URL
    started_at: Mapped[datetime]


class ProcessRow(Base):
    """One run of an action on a table: self-optimizing or a maintenance action."""

    __tablename__ = "optimizing_process"

    process_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    table_id: Mapped[int] = mapped_column(Integer, index=True)
    catalog_name: Mapped[str] = mapped_column(String(64))
    db_name: Mapped[str] = mapped_column(String(255))
    table_name: Mapped[str] = mapped_column(String(255))
    group_name: Mapped[str] = mapped_column(String(64), index=True)
    action: Mapped[str] = mapped_column(String(32))
    type: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    target_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    plan_time: Mapped[datetime]
    end_time: Mapped[datetime | None]
    fail_reason: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict[str, Any]]


class ProcessFileRow(Base):
    """A file a task of an optimizing process changed, by kind (the list fields of OptimizingResult): listed a page
    at a time (`GET /processes/{id}/files`), so that a large rewrite does not make a large process row."""

    __tablename__ = "process_file"
    __table_args__ = (Index("ix_process_file_process_kind", "process_id", "kind", "file_id"),)

    file_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    process_id: Mapped[int] = mapped_column(ID, ForeignKey("optimizing_process.process_id"))
    task_id: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)


class TaskRow(Base):
    __tablename__ = "optimizing_task"

    process_id: Mapped[int] = mapped_column(ID, ForeignKey("optimizing_process.process_id"), primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    type: Mapped[str] = mapped_column(String(32))  # the action (maintenance) or the optimizing type
    # bumped each time the task is handed out: an ack or completion naming an older attempt is refused
    attempt: Mapped[int] = mapped_column(Integer)
    retry_count: Mapped[int] = mapped_column(Integer)
    optimizer_token: Mapped[str | None] = mapped_column(String(64), index=True)
    thread_id: Mapped[int | None] = mapped_column(Integer)
    partitions: Mapped[list[Any]] = mapped_column(JSON)
    input: Mapped[dict[str, Any]]
    output: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)
    # with an error, its kind (protocol.FailureKind): conflict and transient are retried, final is not
    failure: Mapped[str | None] = mapped_column(String(16))
    # a retried task is not handed out before this (back-off)
    retry_after: Mapped[datetime | None]
    cost_bytes: Mapped[int] = mapped_column(BigInteger)
    # what Spark measured of its attempts, added up, and their cost (domain/costs.py)
    usage: Mapped[dict[str, Any] | None]
    # with an error: its class, root cause line and a hint (protocol.FailureDiagnosis)
    diagnosis: Mapped[dict[str, Any] | None]
    # handed out only once every task of a lower stage of the process has succeeded
    stage: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    scheduled_at: Mapped[datetime | None]
    acked_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]


class ProcessTotalsRow(Base):
    """What ended processes counted, per table, action, type, status and the group that ran them: added to as each
    process ends (store/processes.transition_process), so that the overview, the metrics and the cost figures
    read these rows and the running processes only, whatever history is kept, and never go down when history
    is pruned (store/history.py)."""

    __tablename__ = "process_totals"

    catalog_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    db_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    table_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    action: Mapped[str] = mapped_column(String(32), primary_key=True)
    type: Mapped[str] = mapped_column(String(16), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    group_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    sums: Mapped[dict[str, Any]]  # stats.RESULT_FIELDS summed


class ProcessStreakRow(Base):
    """How a table's newest ended processes of an action went: how many failed in a row (0 once one did not
    fail) and when the newest was planned. Kept as processes end (store/stats.count_ended), so that the
    maintenance back-off and the failure alerts read one row per table and action, whatever history is kept."""

    __tablename__ = "process_streak"

    table_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    action: Mapped[str] = mapped_column(String(32), primary_key=True)
    failed_in_a_row: Mapped[int] = mapped_column(Integer)
    newest_planned_at: Mapped[datetime]


class TableShapeRow(Base):
    """A table's shape when it was sampled (store/shapes.py): on a change, at most every `history.table-shapes`
    interval, so its health can be plotted over time."""

    __tablename__ = "table_shape"
    __table_args__ = (Index("ix_table_shape_table", "table_id", "sample_id"),)

    sample_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    table_id: Mapped[int] = mapped_column(Integer)
    sampled_at: Mapped[datetime]
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    data_files: Mapped[int] = mapped_column(BigInteger)
    delete_files: Mapped[int] = mapped_column(BigInteger)
    small_files: Mapped[int] = mapped_column(BigInteger)
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    health: Mapped[str] = mapped_column(String(16))


class GroupLoadRow(Base):
    """A resource group's load when it was sampled (every `history.group-load` interval, by the leader)."""

    __tablename__ = "group_load"
    __table_args__ = (Index("ix_group_load_group", "group_name", "sample_id"),)

    sample_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    group_name: Mapped[str] = mapped_column(String(64))
    sampled_at: Mapped[datetime]
    optimizers: Mapped[int] = mapped_column(Integer)
    threads: Mapped[int] = mapped_column(Integer)
    busy: Mapped[int] = mapped_column(Integer)
    queued: Mapped[int] = mapped_column(Integer)
    pending_tables: Mapped[int] = mapped_column(Integer)


class NamespaceRow(Base):
    """A namespace of an internal catalog; levels joined by the unit separator (as in REST paths)."""

    __tablename__ = "iceberg_namespace"

    catalog_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(1024), primary_key=True)
    properties: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class IcebergTableRow(Base):
    """The pointer to an internal table's current metadata file; moved only by compare-and-swap."""

    __tablename__ = "iceberg_table"

    catalog_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(1024), primary_key=True)
    table_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    metadata_location: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class IcebergViewRow(Base):
    """The pointer to an internal view's current metadata file; moved only by compare-and-swap. Views and
    tables share their namespace's names."""

    __tablename__ = "iceberg_view"

    catalog_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(1024), primary_key=True)
    view_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    metadata_location: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class CommitRow(Base):
    __tablename__ = "commit_timeline"
    __table_args__ = (Index("ix_commit_timeline_table", "catalog_name", "namespace", "table_name"),)

    commit_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    catalog_name: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(1024))
    table_name: Mapped[str] = mapped_column(String(255))
    version: Mapped[int] = mapped_column(Integer)
    operation: Mapped[str] = mapped_column(String(64))
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    parent_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    summary: Mapped[dict[str, Any]]
    metadata_location: Mapped[str] = mapped_column(Text)
    client: Mapped[str | None] = mapped_column(String(255))
    committed_at: Mapped[datetime]


class TableReadRow(Base):
    """A scan or commit of a table, as its client reported it to the REST catalog or the server planned it
    (domain/reads.py); pruned by age and by count per table like the timeline."""

    __tablename__ = "table_read"
    __table_args__ = (Index("ix_table_read_table", "catalog_name", "namespace", "table_name", "reported_at"),)

    read_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    catalog_name: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(1024))
    table_name: Mapped[str] = mapped_column(String(255))
    reported_at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(16))  # scan, commit
    source: Mapped[str] = mapped_column(String(16))  # client, server
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    data_files: Mapped[int] = mapped_column(BigInteger)
    delete_files: Mapped[int] = mapped_column(BigInteger)
    data_bytes: Mapped[int] = mapped_column(BigInteger)
    delete_bytes: Mapped[int] = mapped_column(BigInteger)
    manifests: Mapped[int] = mapped_column(Integer)
    planning_ms: Mapped[float] = mapped_column(Float)
    partition: Mapped[str | None] = mapped_column(String(1024))
    filter: Mapped[str | None] = mapped_column(Text)
    engine: Mapped[str | None] = mapped_column(String(64))
    principal: Mapped[str | None] = mapped_column(String(255))
    operation: Mapped[str | None] = mapped_column(String(64))


class EventRow(Base):
    """The durable outbox: events with increasing ids, written with the change they announce."""

    __tablename__ = "event_outbox"

    event_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(32))
    catalog_name: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(1024))
    table_name: Mapped[str | None] = mapped_column(String(255))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class PrincipalRow(Base):
    """A user or a service that may call the server (domain/security.py)."""

    __tablename__ = "principal"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str | None] = mapped_column(Text)  # Argon2, users only
    created_at: Mapped[datetime]


class ApiTokenRow(Base):
    """An API token: `lw_<token_id>_<secret>`; only the secret's SHA-256 is kept (it is random, 256 bits)."""

    __tablename__ = "api_token"

    token_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    principal: Mapped[str] = mapped_column(String(128), ForeignKey("principal.name", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class GrantRow(Base):
    """`privilege` on an internal catalog, or on a namespace of it (levels joined by 0x1F; '' = the catalog)."""

    __tablename__ = "catalog_grant"

    principal: Mapped[str] = mapped_column(
        String(128), ForeignKey("principal.name", ondelete="CASCADE"), primary_key=True
    )
    catalog_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(1024), primary_key=True)
    privilege: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime]


class AuditRow(Base):
    """Who changed what: one row per change a caller made (catalogs, groups, principals, grants, actions)."""

    __tablename__ = "audit_log"

    audit_id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(index=True)
    principal: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(255))  # the method and the route template
    target: Mapped[str] = mapped_column(String(1024))
    detail: Mapped[dict[str, Any]]
    client: Mapped[str | None] = mapped_column(String(255))


class LeaseRow(Base):
    """High availability: who leads, until when (the database's clock), and the fencing token (`epoch`, one
    more at every change of hands) that every leader's state change is checked against."""

    __tablename__ = "ha_lease"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    epoch: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[datetime]
    acquired_at: Mapped[datetime]


class NodeRow(Base):
    """A server process of a highly available installation, as it last announced itself."""

    __tablename__ = "ha_node"

    node_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(String(1024))
    started_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]


class ServiceStateRow(Base):
    """What a service remembers across restarts (e.g. the maintenance schedules its due times were computed with)."""

    __tablename__ = "service_state"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime]


class IdempotencyRow(Base):
    """A REST catalog request made with an `Idempotency-Key`, and its final answer (None while it runs)."""

    __tablename__ = "idempotency_key"

    key: Mapped[str] = mapped_column(String(36), primary_key=True)
    principal: Mapped[str] = mapped_column(String(255))
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(Text)
    status: Mapped[int | None] = mapped_column(Integer)
    content_type: Mapped[str | None] = mapped_column(String(255))
    body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(index=True)
