"""`/api/v1/tables`: the tables lakewarden manages, with status, group, config and summary."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import TableBrief, TableRead
from lakewarden.domain.errors import Conflict, InvalidField
from lakewarden.domain.maintenance import Action
from lakewarden.domain.processes import NothingToDo
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.services.metadata_service import catalog_for
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import tables as store
from lakewarden.store.tables import TableRecord

router = APIRouter(prefix="/tables", tags=["tables"])
Ctx = Annotated[ServerContext, Depends(server_context)]


def _brief_fields(rec: TableRecord) -> dict[str, object]:
    summary = rec.runtime.summary or {}
    status = TableStatus(rec.runtime.status_code)
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
    }


@router.get("", response_model=list[TableBrief])
def list_tables(
    ctx: Ctx,
    catalog: str | None = None,
    database: str | None = None,
    status: Annotated[str | None, Query(description="idle, pending, … or a status code")] = None,
    group: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> list[TableBrief]:
    wanted = TableStatus.parse(status) if status is not None else None
    with ctx.db.read() as session:
        records = store.list_tables(session, catalog, database, wanted, group, limit=limit, offset=offset)
    return [TableBrief(**_brief_fields(rec)) for rec in records]


def _read(rec: TableRecord) -> TableRead:
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
    )


@router.get("/{catalog}/{database}/{table}", response_model=TableRead)
def get_table(catalog: str, database: str, table: str, ctx: Ctx) -> TableRead:
    with ctx.db.read() as session:
        return _read(store.get_table(session, TableIdentifier(catalog, database, table)))


@router.post("/{catalog}/{database}/{table}/evaluate", response_model=TableRead)
def evaluate_table(catalog: str, database: str, table: str, ctx: Ctx) -> TableRead:
    """Evaluate the table now (as the evaluator service does on its interval) and return the verdict."""
    name = TableIdentifier(catalog, database, table)
    with ctx.db.read() as session:
        rec = store.get_table(session, name)
        spec = catalog_store.spec_of(catalog_store.get_catalog(session, catalog))
    status = TableStatus(rec.runtime.status_code)
    if status not in (TableStatus.IDLE, TableStatus.PENDING):
        raise Conflict(f"table {name} is {status.label}; it is evaluated again when that ends")
    with catalog_for(spec, ctx.metadata) as catalog_handle:
        ctx.evaluator.evaluate(catalog_handle, rec)
    with ctx.db.read() as session:
        return _read(store.get_table(session, name))


class RunAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dry_run: bool = Field(False, description="clean-orphan-files only: list what would be deleted, delete nothing")


class ActionRun(BaseModel):
    created: bool
    process_id: int | None
    reason: str | None = None


@router.post("/{catalog}/{database}/{table}/actions/{action}", response_model=ActionRun,
             responses={201: {"model": ActionRun}})  # fmt: skip
def run_action(
    catalog: str, database: str, table: str, action: str, ctx: Ctx, response: Response, body: RunAction | None = None
) -> ActionRun:
    """Run a maintenance action on the table now (a process on an optimizer of the table's group).

    201 with the process; 200 with `created: false` and the reason when there is nothing to do;
    409 when one of its kind is running on the table."""
    factory = ctx.scheduler.registry.factory(action)
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
        process_id = ctx.scheduler.create_process(rec, spec, factory.action, "manual", options)
    except NothingToDo as why:
        return ActionRun(created=False, process_id=None, reason=str(why))
    response.status_code = 201
    return ActionRun(created=True, process_id=process_id)
