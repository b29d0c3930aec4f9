"""`/api/v1/tables`: the tables lakewarden manages, with status, group, config and summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from lakewarden.api.auth import OPERATOR
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import ID_MAX, MaintenanceRead, TableBrief, TableRead, _Read
from lakewarden.domain.catalogs import FORMAT_OF_CATALOG, TABLE_FORMATS
from lakewarden.domain.errors import Conflict, InvalidField, NothingToDo
from lakewarden.domain.maintenance import maintenance_states
from lakewarden.domain.processes import Action
from lakewarden.domain.tables import TableHealth, TableIdentifier, TableStatus
from lakewarden.domain.what_if import MAX_POLICIES, POLICY_FORMS, Policy
from lakewarden.metadata.files import snapshot_files
from lakewarden.services.processes.budget import budget_of, deferral_of
from lakewarden.services.tables.catalog_access import catalog_for
from lakewarden.services.tables.what_if import WhatIf, what_if
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as process_store
from lakewarden.store import shapes, stats
from lakewarden.store import tables as store
from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import TableShapeRow
from lakewarden.store.tables import TableRecord

router = APIRouter(prefix="/tables", tags=["tables"])
Ctx = Annotated[ServerContext, Depends(server_context)]


def _brief_fields(rec: TableRecord) -> dict[str, object]:
    summary = rec.runtime.summary or {}
    status = TableStatus(rec.runtime.status_code)
    health = TableHealth.of(rec.runtime.evaluation)
    return {
        "catalog": rec.identifier.catalog_name,
        "database": rec.identifier.db_name,
        "table": rec.identifier.table_name,
        "identifier": str(rec.name),
        "format": rec.identifier.format,
        "status": status.label,
        "status_code": int(status),
        "group": rec.runtime.optimizing_group,
        "data_files": int(summary.get("data-files", 0)),
        "delete_files": int(summary.get("delete-files", 0)),
        "files_size_bytes": int(summary.get("files-size-bytes", 0)),
        "last_refreshed_at": rec.runtime.last_refreshed_at,
        "health": health.label,
        "small_file_ratio": health.small_file_ratio,
        "delete_file_ratio": health.delete_file_ratio,
    }


@router.get("", response_model=list[TableBrief])
def list_tables(
    ctx: Ctx,
    catalog: str | None = None,
    database: str | None = None,
    status: Annotated[str | None, Query(description="idle, pending, … or a status code")] = None,
    group: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=ID_MAX)] = 0,
    name: Annotated[
        str | None,
        Query(max_length=255, description="Only tables whose catalog.database.table contains this (any case)"),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            max_length=1024,
            description="catalog.database.table: the page after that table (the last of the page before); "
            "as quick deep into many tables as at the start, unlike offset",
        ),
    ] = None,
    table_format: Annotated[
        str | None, Query(alias="format", description=f"Only tables of this format: {', '.join(TABLE_FORMATS)}")
    ] = None,
) -> list[TableBrief]:
    """Managed tables in the order of their names, a page at a time."""
    if table_format is not None and table_format not in TABLE_FORMATS:
        raise InvalidField("format", f"{table_format!r} is not a table format; use one of {', '.join(TABLE_FORMATS)}")
    wanted = TableStatus.parse(status) if status is not None else None
    start = None
    if after is not None:
        try:
            start = TableIdentifier.parse(after)
        except InvalidField as exc:
            raise InvalidField("after", exc.problem) from exc
    with ctx.db.read() as session:
        records = store.list_tables(
            session,
            catalog,
            database,
            wanted,
            group,
            limit=limit,
            offset=offset,
            name=name,
            after=start,
            fmt=table_format,
        )
    return [TableBrief(**_brief_fields(rec)) for rec in records]


def _key(rec: TableRecord) -> tuple[str, str, str]:
    return rec.identifier.catalog_name, rec.identifier.db_name, rec.identifier.table_name


BENEFIT_JUDGED = 100  # a table's newest successful optimizing processes its net benefit adds up


def _read(ctx: ServerContext, session: Session, rec: TableRecord) -> TableRead:
    backoff = ctx.trigger.backoff(session, rec)
    looks: dict[str, dict[str, str | None]] = rec.runtime.maintenance or {}
    return TableRead(
        **_brief_fields(rec),
        status_changed_at=rec.runtime.status_changed_at,
        config=rec.runtime.config,
        summary=rec.runtime.summary,
        metadata_location=rec.runtime.metadata_location,
        current_snapshot_id=rec.runtime.current_snapshot_id,
        refresh_error=rec.runtime.refresh_error,
        evaluation=rec.runtime.evaluation,
        evaluated_at=rec.runtime.evaluated_at,
        last_minor_optimizing_at=rec.runtime.last_minor_optimizing_at,
        last_major_optimizing_at=rec.runtime.last_major_optimizing_at,
        last_full_optimizing_at=rec.runtime.last_full_optimizing_at,
        maintenance=[
            MaintenanceRead(
                action=m.action.value,
                enabled=m.enabled,
                blocked_by=m.blocked_by,
                failures=backoff.get(m.action, (0, None))[0],
                retry_after=backoff.get(m.action, (0, None))[1],
                checked_at=looks.get(m.action.value, {}).get("checked"),
                work_expected_at=looks.get(m.action.value, {}).get("next"),
            )
            for m in maintenance_states(rec.runtime.config)
        ],
        usage=stats.usage_of(stats.process_totals(session, table=_key(rec))),
        currency=ctx.config.ams.cost.currency,
        reads=ctx.reads.summary(_key(rec)),
        deferred=deferral_of(session, rec, utcnow()),
        optimizing_benefit=ctx.reads.net(
            session,
            process_store.list_processes(
                session, rec.runtime.table_id, BENEFIT_JUDGED, action="optimizing", status="success"
            ),
        ),
    )


@router.get("/{catalog}/{database}/{table}", response_model=TableRead)
def get_table(catalog: str, database: str, table: str, ctx: Ctx) -> TableRead:
    with ctx.db.read() as session:
        return _read(ctx, session, store.get_table(session, TableIdentifier(catalog, database, table)))


@router.post("/{catalog}/{database}/{table}/evaluate", response_model=TableRead, **OPERATOR)
def evaluate_table(catalog: str, database: str, table: str, ctx: Ctx) -> TableRead:
    """Evaluate the table now (as the evaluator service does on its interval) and return the verdict."""
    name = TableIdentifier(catalog, database, table)
    with ctx.db.read() as session:
        rec = store.get_table(session, name)
        spec = catalog_store.spec_of(catalog_store.get_catalog(session, catalog))
    status = TableStatus(rec.runtime.status_code)
    if status not in (TableStatus.IDLE, TableStatus.PENDING):
        raise Conflict(f"table {name} is {status.label}; it is evaluated again when that ends")
    if spec.type in FORMAT_OF_CATALOG:  # read from its files: no Iceberg catalog to open
        ctx.evaluator.evaluate(None, rec)
    else:
        with catalog_for(spec, ctx.internal) as catalog_handle:
            ctx.evaluator.evaluate(catalog_handle, rec)
    with ctx.db.read() as session:
        return _read(ctx, session, store.get_table(session, name))


class RunAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dry_run: bool = Field(False, description="clean-orphan-files only: list what would be deleted, delete nothing")


class ActionRun(BaseModel):
    created: bool
    process_id: int | None
    reason: str | None = None


@router.post(
    "/{catalog}/{database}/{table}/actions/{action}",
    response_model=ActionRun,
    responses={201: {"model": ActionRun}},
    **OPERATOR,
)
def run_action(
    catalog: str, database: str, table: str, action: str, ctx: Ctx, response: Response, body: RunAction | None = None
) -> ActionRun:
    """Run a maintenance action on the table now (a process on an optimizer of the table's group).

    201 with the process; 200 with `created: false` and the reason when there is nothing to do or a
    table setting forbids the action (e.g. gc.enabled=false); 409 when one of its kind is running on the table."""
    factory = ctx.engine.registry.factory(action)
    if factory.action is Action.OPTIMIZING:
        raise InvalidField("action", "self-optimizing is planned by the evaluator; use .../evaluate to look again")
    options = (body or RunAction()).model_dump()
    if options["dry_run"] and factory.action is not Action.CLEAN_ORPHAN_FILES:
        raise InvalidField("dry_run", f"only {Action.CLEAN_ORPHAN_FILES} has a dry run")
    name = TableIdentifier(catalog, database, table)
    with ctx.db.read() as session:
        rec = store.get_table(session, name)
        spec = catalog_store.spec_of(catalog_store.get_catalog(session, catalog))
    try:
        process_id = ctx.engine.create_process(rec, spec, factory.action, "manual", options)
    except NothingToDo as why:
        return ActionRun(created=False, process_id=None, reason=str(why))
    response.status_code = 201
    return ActionRun(created=True, process_id=process_id)


class SnapshotRead(BaseModel):
    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int | None
    committed_at: datetime
    operation: str | None
    summary: dict[str, str]
    refs: list[str] = Field(description="Branches and tags pointing at this snapshot")


class FileRead(BaseModel):
    path: str
    partition: str
    content: str = Field(description="data, position-deletes or equality-deletes")
    size_bytes: int
    records: int
    sequence_number: int


def _load(ctx: ServerContext, name: TableIdentifier) -> Any:
    with ctx.db.read() as session:
        rec = store.get_table(session, name)  # a table lakewarden manages, or 404
        spec = catalog_store.spec_of(catalog_store.get_catalog(session, name.catalog))
    if rec.identifier.format != "iceberg":
        raise Conflict(
            f"table {name} is a {rec.identifier.format} table: its timeline and files are at "
            f"/api/v1/tables/{name.catalog}/{name.database}/{name.table}/{rec.identifier.format}"
        )
    with catalog_for(spec, ctx.internal) as catalog:
        return catalog.load_table((*name.database.split("."), name.table))


@router.get("/{catalog}/{database}/{table}/snapshots", response_model=list[SnapshotRead])
def table_snapshots(
    catalog: str, database: str, table: str, ctx: Ctx, limit: Annotated[int, Query(ge=1, le=10000)] = 100
) -> list[SnapshotRead]:
    """The table's snapshots, newest first, with the refs that point at them."""
    metadata = _load(ctx, TableIdentifier(catalog, database, table)).metadata
    refs: dict[int, list[str]] = {}
    for ref_name, ref in metadata.refs.items():
        refs.setdefault(ref.snapshot_id, []).append(ref_name)
    snapshots = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0), reverse=True)
    return [_snapshot(s, sorted(refs.get(s.snapshot_id, []))) for s in snapshots[:limit]]


def _snapshot(snapshot: Any, refs: list[str]) -> SnapshotRead:
    summary = snapshot.summary
    return SnapshotRead(
        snapshot_id=snapshot.snapshot_id,
        parent_snapshot_id=snapshot.parent_snapshot_id,
        sequence_number=snapshot.sequence_number,
        committed_at=datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC),
        operation=summary.operation.value if summary else None,
        summary=dict(summary.additional_properties) if summary else {},
        refs=refs,
    )


PartitionQuery = Query(description="Only this partition, e.g. cat=a ('' when unpartitioned)")


@router.get("/{catalog}/{database}/{table}/files", response_model=list[FileRead])
def table_files(
    catalog: str,
    database: str,
    table: str,
    ctx: Ctx,
    partition: Annotated[str | None, PartitionQuery] = None,
    limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
) -> list[FileRead]:
    """The live data and delete files of the current snapshot, by partition."""
    files = snapshot_files(_load(ctx, TableIdentifier(catalog, database, table)), ctx.evaluator.cache, None)
    rows = [_file(d, "data") for d in files.data]
    rows += [_file(d, "equality-deletes" if d.equality else "position-deletes") for d in files.deletes]
    if partition is not None:
        rows = [r for r in rows if r.partition == (partition or "(unpartitioned)")]
    return sorted(rows, key=lambda r: (r.partition, r.content, r.path))[:limit]


def _file(entry: Any, content: str) -> FileRead:
    return FileRead(
        path=entry.path,
        partition=str(entry.partition),
        content=content,
        size_bytes=entry.size,
        records=entry.records,
        sequence_number=entry.sequence,
    )


class ShapeRead(_Read):
    sampled_at: datetime
    snapshot_id: int | None
    data_files: int
    delete_files: int
    small_files: int = Field(description="Data files the evaluator counted small (fragments and undersized)")
    total_bytes: int
    average_file_bytes: int = Field(description="Bytes per live file, data and delete files together")
    small_file_ratio: float | None
    delete_file_ratio: float | None
    health: str


class ProcessMark(_Read):
    process_id: int
    action: str
    type: str
    status: str
    start_time: datetime
    end_time: datetime | None


class TableHistory(_Read):
    samples: list[ShapeRead] = Field(description="The table's shape over time, oldest first")
    processes: list[ProcessMark] = Field(description="Its processes since the oldest sample, oldest first")


DEFAULT_POLICIES = ("amoro", "scheduled:30", "none")
POLICIES_HELP = f"Repeat for several: {POLICY_FORMS}. By default Amoro's triggers, a rewrite every 30 min, the "
POLICIES_HELP += "group's budget (or one of 60 CPU-s an hour) and nothing"


@router.get("/{catalog}/{database}/{table}/what-if", response_model=WhatIf)
def table_what_if(
    catalog: str,
    database: str,
    table: str,
    ctx: Ctx,
    policy: Annotated[list[str] | None, Query(description=POLICIES_HELP, max_length=MAX_POLICIES)] = None,
    hours: Annotated[float, Query(gt=0, le=24 * 7, description="The window replayed, up to now")] = 24,
) -> WhatIf:
    """What other optimizing policies would have done to the table over the last `hours`, beside what its own
    did: its writers' commits and its scans replayed (docs/reads.md) — processes, CPU-seconds, bytes rewritten,
    files and delete files per scan."""
    now = utcnow()
    with ctx.db.read() as session:
        rec = store.get_table(session, TableIdentifier(catalog, database, table))
        if policy:
            chosen = [Policy.parse(p) for p in policy]
        else:
            budget = budget_of(session, rec.runtime.optimizing_group)
            spend = budget.cpu_seconds_per_hour if budget is not None else 60.0
            chosen = [Policy.parse(p) for p in DEFAULT_POLICIES[:2]] + [Policy("budget", budget=spend), Policy("none")]
        return what_if(session, rec, chosen, now - timedelta(hours=hours), now)


@router.get("/{catalog}/{database}/{table}/history", response_model=TableHistory)
def table_history(
    catalog: str, database: str, table: str, ctx: Ctx, limit: Annotated[int, Query(ge=1, le=10000)] = 500
) -> TableHistory:
    """The table's shape as sampled over time (on a change, at most every `history.table-shapes` interval) and the
    processes that ran meanwhile: what optimizing and maintenance did to it, at a glance."""
    with ctx.db.read() as session:
        rec = store.get_table(session, TableIdentifier(catalog, database, table))
        samples = shapes.table_shapes(session, rec.runtime.table_id, limit)
        since = as_utc(samples[0].sampled_at) if samples else None
        processes = [
            p
            for p in process_store.list_processes(session, rec.runtime.table_id, limit=1000)
            if since is None or as_utc(p.end_time or p.plan_time) >= since
        ]
    return TableHistory(
        samples=[_shape(s) for s in samples],
        processes=[
            ProcessMark(
                process_id=p.process_id,
                action=p.action,
                type=p.type,
                status=p.status,
                start_time=p.plan_time,
                end_time=p.end_time,
            )
            for p in reversed(processes)
        ],
    )


def _shape(s: TableShapeRow) -> ShapeRead:
    files = s.data_files + s.delete_files
    health = TableHealth.of({"data_files": s.data_files, "small_files": s.small_files, "delete_files": s.delete_files})
    return ShapeRead(
        sampled_at=s.sampled_at,
        snapshot_id=s.snapshot_id,
        data_files=s.data_files,
        delete_files=s.delete_files,
        small_files=s.small_files,
        total_bytes=s.total_bytes,
        average_file_bytes=s.total_bytes // files if files else 0,
        small_file_ratio=health.small_file_ratio,
        delete_file_ratio=health.delete_file_ratio,
        health=s.health,
    )
