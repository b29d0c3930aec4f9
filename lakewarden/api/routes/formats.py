"""What Amoro shows of tables of other formats, read from their files now, with what their own services would do
next: `/api/v1/tables/{catalog}/{database}/{table}/hudi` (type, timeline, file groups and slices, partitions,
pending compactions; domain/hudi.py) and `…/paimon` (snapshots, schemas, tags, options, files per partition,
bucket and level; domain/paimon.py)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from lakewarden.api.context import ServerContext, server_context
from lakewarden.domain import paimon as paimon_rules
from lakewarden.domain.errors import Conflict
from lakewarden.domain.hudi import Instant, judge
from lakewarden.domain.tables import TableIdentifier
from lakewarden.metadata import hudi, paimon
from lakewarden.store import tables as store
from lakewarden.store.database import utcnow

router = APIRouter(prefix="/tables", tags=["tables"])
Ctx = Annotated[ServerContext, Depends(server_context)]


class HudiInstant(BaseModel):
    timestamp: str = Field(description="The instant time, yyyyMMddHHmmssSSS")
    action: str = Field(description="commit, deltacommit, replacecommit, compaction, clustering, clean, rollback, …")
    state: str = Field(description="requested, inflight or completed")
    completed_at: str | None = Field(None, description="When it completed (tables of timeline layout 2)")
    time: datetime | None


class HudiLogFile(BaseModel):
    name: str
    size_bytes: int


class HudiSlice(BaseModel):
    base_instant: str = Field(description="The instant its base file was written at (or its log files on)")
    base_file: str | None = Field(description="None: a slice of log files only")
    base_size_bytes: int
    log_files: list[HudiLogFile]
    latest: bool = Field(description="The slice a snapshot query reads now")


class HudiFileGroup(BaseModel):
    partition: str
    file_id: str
    slices: list[HudiSlice] = Field(description="Oldest first")


class HudiPartition(BaseModel):
    partition: str
    file_groups: int
    base_files: int = Field(description="Of the latest slices")
    log_files: int = Field(description="Of the latest slices")
    size_bytes: int = Field(description="Of the latest slices")


class HudiNeed(BaseModel):
    service: str = Field(description="compaction, clustering, clean or archive")
    reason: str
    partition: str | None
    procedure: str = Field(description="The Spark SQL call that runs it where Hudi's Spark bundle is configured")


class HudiView(BaseModel):
    table: str
    table_type: str = Field(description="COPY_ON_WRITE or MERGE_ON_READ")
    table_version: str | None
    location: str
    properties: dict[str, str] = Field(description="hoodie.properties")
    schema_: list[dict[str, str]] = Field(alias="schema", description="Columns as hudi-rs reads them")
    timeline: list[HudiInstant] = Field(description="The active timeline, newest first (at most `limit`)")
    instants: int = Field(description="Instants on the active timeline")
    pending_compactions: list[HudiInstant]
    partitions: list[HudiPartition]
    file_groups: list[HudiFileGroup]
    needs: list[HudiNeed] = Field(description="What Hudi's table services would do now; lakewarden runs none of it")


def _location(ctx: ServerContext, name: TableIdentifier, fmt: str) -> Path:
    """Where the table of that format is, as the explorer last read it: 404 for a table lakewarden does not know,
    409 for one of another format."""
    with ctx.db.read() as session:
        rec = store.get_table(session, name)
    if rec.identifier.format != fmt:
        raise Conflict(f"table {name} is an {rec.identifier.format} table, not a {fmt.capitalize()} table")
    return Path(str((rec.runtime.summary or {}).get("location", "")))


def _instant(i: Instant) -> HudiInstant:
    return HudiInstant(timestamp=i.timestamp, action=i.action, state=i.state, completed_at=i.completed_at, time=i.time)


@router.get("/{catalog}/{database}/{table}/hudi", response_model=HudiView, response_model_by_alias=True)
def hudi_view(
    catalog: str,
    database: str,
    table: str,
    ctx: Ctx,
    limit: Annotated[int, Query(ge=1, le=10000, description="Instants of the timeline shown")] = 200,
) -> HudiView:
    """The Hudi table as Amoro shows one, read from its files now; 409 for a table of another format."""
    name = TableIdentifier(catalog, database, table)
    location = _location(ctx, name, "hudi")
    try:
        state = hudi.read_table(location)
        schema = hudi.schema_of(location)
    except Exception as exc:  # a table half written or gone since the explorer saw it
        raise Conflict(f"cannot read the Hudi table {name} at {location}: {type(exc).__name__}: {exc}") from exc
    latest = state.latest_slices()
    current = {(s.partition, s.file_id, s.base_instant) for s in latest}
    groups: dict[tuple[str, str], list[HudiSlice]] = {}
    for s in sorted(state.slices, key=lambda s: (s.partition, s.file_id, s.base_instant)):
        groups.setdefault((s.partition, s.file_id), []).append(
            HudiSlice(
                base_instant=s.base_instant,
                base_file=s.base_file,
                base_size_bytes=s.base_size,
                log_files=[HudiLogFile(name=n, size_bytes=size) for n, size in s.log_files],
                latest=(s.partition, s.file_id, s.base_instant) in current,
            )
        )
    partitions = []
    for partition in state.partitions:
        mine = [s for s in latest if s.partition == partition]
        partitions.append(
            HudiPartition(
                partition=partition,
                file_groups=len(mine),
                base_files=sum(1 for s in mine if s.base_file is not None),
                log_files=sum(len(s.log_files) for s in mine),
                size_bytes=sum(s.size for s in mine),
            )
        )
    verdict = judge(state, f"{database}.{table}", utcnow())
    return HudiView(
        table=str(name),
        table_type=state.table_type,
        table_version=state.properties.get("hoodie.table.version"),
        location=str(location),
        properties=dict(state.properties),
        schema=schema,
        timeline=[_instant(i) for i in reversed(state.timeline)][:limit],
        instants=len(state.timeline),
        pending_compactions=[_instant(i) for i in state.pending("compaction")],
        partitions=partitions,
        file_groups=[HudiFileGroup(partition=p, file_id=f, slices=s) for (p, f), s in groups.items()],
        needs=[
            HudiNeed(service=n.service, reason=n.reason, partition=n.partition, procedure=n.procedure)
            for n in verdict.needs
        ],
    )


class PaimonSnapshot(BaseModel):
    id: int
    schema_id: int
    commit_kind: str = Field(description="APPEND, COMPACT, OVERWRITE or ANALYZE")
    time: datetime
    total_records: int | None
    delta_records: int | None
    commit_user: str


class PaimonSchema(BaseModel):
    id: int
    fields: list[dict[str, str]] = Field(description="Each column's id, name and type")
    partition_keys: list[str]
    primary_keys: list[str]


class PaimonTag(BaseModel):
    name: str
    snapshot_id: int


class PaimonBucket(BaseModel):
    partition: str
    bucket: int
    files: int
    files_per_level: dict[int, int] = Field(description="Level -> files (level 0: each file its own sorted run)")
    sorted_runs: int
    size_bytes: int
    records: int


class PaimonPartition(BaseModel):
    partition: str
    buckets: int
    files: int
    size_bytes: int
    records: int


class PaimonNeed(BaseModel):
    service: str = Field(description="compaction or expire-snapshots")
    reason: str
    partition: str | None
    bucket: int | None
    procedure: str = Field(description="The call that runs it where Paimon's Spark bundle is configured")


class PaimonView(BaseModel):
    table: str
    location: str
    primary_keys: list[str]
    partition_keys: list[str]
    options: dict[str, str]
    schemas: list[PaimonSchema] = Field(description="Oldest first")
    snapshots: list[PaimonSnapshot] = Field(description="Newest first (at most `limit`)")
    snapshot_count: int
    tags: list[PaimonTag]
    partitions: list[PaimonPartition] = Field(description="Of the latest snapshot")
    buckets: list[PaimonBucket] = Field(description="Of the latest snapshot")
    needs: list[PaimonNeed] = Field(description="What Paimon's compaction and expiry would do; lakewarden runs none")


@router.get("/{catalog}/{database}/{table}/paimon", response_model=PaimonView)
def paimon_view(
    catalog: str,
    database: str,
    table: str,
    ctx: Ctx,
    limit: Annotated[int, Query(ge=1, le=10000, description="Snapshots shown")] = 200,
) -> PaimonView:
    """The Paimon table as Amoro shows one, read from its files now; 409 for a table of another format."""
    name = TableIdentifier(catalog, database, table)
    location = _location(ctx, name, "paimon")
    try:
        state = paimon.read_table(location)
    except Exception as exc:  # a table half written or gone since the explorer saw it
        raise Conflict(f"cannot read the Paimon table {name} at {location}: {type(exc).__name__}: {exc}") from exc
    buckets: dict[tuple[str, int], list[paimon_rules.DataFile]] = {}
    for f in state.files:
        buckets.setdefault((f.partition, f.bucket), []).append(f)
    partitions: dict[str, list[paimon_rules.DataFile]] = {}
    for f in state.files:
        partitions.setdefault(f.partition, []).append(f)
    verdict = paimon_rules.judge(state, f"{database}.{table}", utcnow())
    return PaimonView(
        table=str(name),
        location=str(location),
        primary_keys=state.primary_keys,
        partition_keys=state.partition_keys,
        options=dict(state.options),
        schemas=[
            PaimonSchema(
                id=int(str(s.get("id", 0))),
                fields=[
                    {"id": str(f.get("id")), "name": str(f.get("name")), "type": str(f.get("type"))}
                    for f in s.get("fields", [])
                ],
                partition_keys=[str(k) for k in s.get("partitionKeys", [])],
                primary_keys=[str(k) for k in s.get("primaryKeys", [])],
            )
            for s in state.schemas
        ],
        snapshots=[
            PaimonSnapshot(
                id=s.id,
                schema_id=s.schema_id,
                commit_kind=s.commit_kind,
                time=s.time,
                total_records=s.total_records,
                delta_records=s.delta_records,
                commit_user=s.commit_user,
            )
            for s in reversed(state.snapshots)
        ][:limit],
        snapshot_count=len(state.snapshots),
        tags=[PaimonTag(name=n, snapshot_id=i) for n, i in sorted(state.tags.items())],
        partitions=[
            PaimonPartition(
                partition=p,
                buckets=len({f.bucket for f in files}),
                files=len(files),
                size_bytes=sum(f.size for f in files),
                records=sum(f.rows for f in files),
            )
            for p, files in sorted(partitions.items())
        ],
        buckets=[
            PaimonBucket(
                partition=p,
                bucket=b,
                files=len(files),
                files_per_level=dict(sorted(Counter(f.level for f in files).items())),
                sorted_runs=paimon_rules.sorted_runs([f.level for f in files]),
                size_bytes=sum(f.size for f in files),
                records=sum(f.rows for f in files),
            )
            for (p, b), files in sorted(buckets.items())
        ],
        needs=[
            PaimonNeed(
                service=n.service, reason=n.reason, partition=n.partition, bucket=n.bucket, procedure=n.procedure
            )
            for n in verdict.needs
        ],
    )
