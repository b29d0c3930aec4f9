"""`/api/v1/events` and table timelines: what the REST catalog recorded, for listeners that catch up."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import ID_MAX, _Read
from lakewarden.store import rest_catalog as store
from lakewarden.store import views as view_store

router = APIRouter(tags=["events"])
Ctx = Annotated[ServerContext, Depends(server_context)]


class EventRead(_Read):
    event_id: int
    type: str
    catalog: str
    namespace: list[str]
    table: str | None
    payload: dict[str, Any]
    created_at: datetime


class CommitRead(_Read):
    version: int
    operation: str
    snapshot_id: int | None
    parent_snapshot_id: int | None
    summary: dict[str, Any]
    metadata_location: str
    client: str | None
    committed_at: datetime


@router.get("/events", response_model=list[EventRead])
def list_events(
    ctx: Ctx,
    after: Annotated[int, Query(ge=0, le=ID_MAX, description="Return events with a larger id (0: from the start)")] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    catalog: str | None = None,
) -> list[EventRead]:
    """Events in id order; a listener passes the last id it saw to catch up after a gap."""
    with ctx.db.read() as session:
        rows = store.events_after(session, after, limit, catalog)
        return [
            EventRead(
                event_id=r.event_id,
                type=r.type,
                catalog=r.catalog_name,
                namespace=store.levels(r.namespace),
                table=r.table_name,
                payload=r.payload,
                created_at=r.created_at,
            )
            for r in rows
        ]


@router.get("/tables/{catalog}/{database}/{table}/timeline", response_model=list[CommitRead])
def table_timeline(
    catalog: str, database: str, table: str, ctx: Ctx, limit: Annotated[int, Query(ge=1, le=10000)] = 100
) -> list[CommitRead]:
    """The table's (or view's) commits through lakewarden's REST catalog, newest first, with a version per
    commit."""
    namespace = store.key(database.split("."))
    with ctx.db.read() as session:
        if not view_store.view_exists(session, catalog, namespace, table):
            store.get_pointer(session, catalog, namespace, table)
        return [
            CommitRead.model_validate(c, from_attributes=True)
            for c in store.timeline(session, catalog, namespace, table, limit)
        ]
