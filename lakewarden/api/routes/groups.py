"""`/api/v1/resource-groups`: the groups optimizers run in and tables are scheduled by."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field
from sqlalchemy.orm import Session

from lakewarden.api.auth import OPERATOR
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import AllocationRead, GroupCreate, GroupRead, GroupUpdate, _Read, _Request
from lakewarden.domain.benefits import NetBenefit, benefit_from_json
from lakewarden.domain.errors import Conflict, InvalidField
from lakewarden.domain.groups import validate_group, validate_group_update
from lakewarden.domain.security import optimizer_id
from lakewarden.domain.what_if import SHADOW, SHADOW_SINCE, Policy, stamp_shadow
from lakewarden.services.tables.what_if import Shadow, shadow
from lakewarden.store import groups as store
from lakewarden.store import processes as optimizer_store
from lakewarden.store import reads, shapes, stats
from lakewarden.store import tables as table_store
from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import ResourceGroupRow

router = APIRouter(prefix="/resource-groups", tags=["resource groups"])
Ctx = Annotated[ServerContext, Depends(server_context)]


def _read(
    row: ResourceGroupRow,
    table_count: int,
    ctx: ServerContext,
    usage: dict[str, dict[str, float]] | None = None,
    benefits: dict[str, list[dict[str, Any]]] | None = None,
) -> GroupRead:
    return GroupRead(
        name=row.name,
        container=row.container,
        properties=row.properties,
        table_count=table_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
        container_error=None if ctx.maintainer is None else ctx.maintainer.errors.get(row.name),
        usage=(usage or {}).get(row.name, dict.fromkeys(stats.USAGE, 0)),
        currency=ctx.config.ams.cost.currency,
        allocation=_allocation(row.name, ctx),
        optimizing_benefit=None
        if benefits is None
        else NetBenefit.of([benefit_from_json(b) for b in benefits.get(row.name, [])]),
    )


def _benefits(ctx: ServerContext, session: Session) -> dict[str, list[dict[str, Any]]]:
    return reads.settled_benefits(session, utcnow() - ctx.config.ams.history.processes.keep_time)


def _allocation(group: str, ctx: ServerContext) -> AllocationRead | None:
    state = None if ctx.maintainer is None else ctx.maintainer.allocator.groups.get(group)
    if state is None:
        return None
    return AllocationRead(
        threads=state.threads,
        idle_optimizers=state.idle_optimizers,
        draining=len(state.draining),
        scale_ups=state.scale_ups,
        scale_downs=state.scale_downs,
        forced_stops=state.forced,
        backlog_seconds=round(state.backlog_seconds, 1),
    )


@router.post("", status_code=201, response_model=GroupRead)
def create_group(body: GroupCreate, ctx: Ctx) -> GroupRead:
    validate_group(body.name, body.container, body.properties, ctx.config.container_impls)
    with ctx.db.write() as session:
        properties = stamp_shadow({}, body.properties, utcnow())
        return _read(store.create_group(session, body.name, body.container, properties), 0, ctx)


@router.get("", response_model=list[GroupRead])
def list_groups(ctx: Ctx) -> list[GroupRead]:
    with ctx.db.read() as session:
        counts = store.table_counts(session)
        usage, benefits = stats.group_usage(session), _benefits(ctx, session)
        return [_read(row, counts.get(row.name, 0), ctx, usage, benefits) for row in store.list_groups(session)]


@router.get("/{name}", response_model=GroupRead)
def get_group(name: str, ctx: Ctx) -> GroupRead:
    with ctx.db.read() as session:
        row = store.get_group(session, name)
        counts, usage = store.table_counts(session), stats.group_usage(session)
        return _read(row, counts.get(name, 0), ctx, usage, _benefits(ctx, session))


@router.put("/{name}", response_model=GroupRead)
def update_group(name: str, body: GroupUpdate, ctx: Ctx) -> GroupRead:
    with ctx.db.write() as session:
        current = store.get_group(session, name)
        validate_group_update(
            body.container or current.container,
            body.properties if body.properties is not None else current.properties,
            ctx.config.container_impls,
        )
        properties = None
        if body.properties is not None:
            properties = stamp_shadow(current.properties, body.properties, utcnow())
        row = store.update_group(session, name, body.container, properties)
        return _read(row, store.table_counts(session).get(name, 0), ctx)


class Scale(_Request):
    instances: int = Field(ge=0, le=64, description="Optimizer processes the group's container keeps alive")


class OptimizerRead(_Read):
    optimizer_id: str = Field(description="A digest of the optimizer's token (the token itself is never shown)")
    group: str
    container: str | None
    resource_id: str | None
    threads: int
    host: str | None
    registered_at: datetime
    last_heartbeat_at: datetime
    spark_application_id: str | None = Field(None, description="The optimizer's Spark application")
    spark_master: str | None = None
    spark_ui_url: str | None = Field(None, description="Its Spark UI, when the UI is enabled")


@router.post("/{name}/scale", response_model=GroupRead, **OPERATOR)
def scale_group(name: str, body: Scale, ctx: Ctx) -> GroupRead:
    """Scale out or release: set how many optimizers the group's container keeps alive."""
    with ctx.db.write() as session:
        current = store.get_group(session, name)
        container = ctx.config.container(current.container)
        if container is not None and container.container_impl == "external":
            raise InvalidField(
                "instances",
                f"group {name}'s container {container.name!r} is external: its optimizers are started outside "
                "lakewarden (`lakewarden optimizer --group ...`, or spark-submit), not scaled by the server",
            )
        properties = {**current.properties, "instances": str(body.instances)}
        row = store.update_group(session, name, None, properties)
        read = _read(row, store.table_counts(session).get(name, 0), ctx)
    if ctx.maintainer is not None:
        ctx.maintainer.wake()
    return read


@router.get("/{name}/optimizers", response_model=list[OptimizerRead])
def group_optimizers(name: str, ctx: Ctx) -> list[OptimizerRead]:
    """The optimizers registered in the group, with their threads and last heartbeat."""
    with ctx.db.read() as session:
        store.get_group(session, name)
        return [
            OptimizerRead(
                optimizer_id=optimizer_id(o.token),
                group=o.group_name,
                container=o.container,
                resource_id=o.resource_id,
                threads=o.parallelism,
                host=o.host,
                registered_at=o.registered_at,
                last_heartbeat_at=o.last_heartbeat_at,
                spark_application_id=(o.properties or {}).get("spark_application_id"),
                spark_master=(o.properties or {}).get("spark_master"),
                spark_ui_url=(o.properties or {}).get("spark_ui_url"),
            )
            for o in optimizer_store.list_optimizers(session, name)
        ]


class GroupLoadRead(_Read):
    sampled_at: datetime
    optimizers: int
    threads: int
    busy: int = Field(description="Threads running a task")
    queued: int = Field(description="Planned tasks waiting for a thread")
    pending_tables: int


@router.get("/{name}/history", response_model=list[GroupLoadRead])
def group_history(name: str, ctx: Ctx, limit: Annotated[int, Query(ge=1, le=20000)] = 1440) -> list[GroupLoadRead]:
    """The group's load as sampled over time (every `history.group-load` interval), oldest first."""
    with ctx.db.read() as session:
        store.get_group(session, name)  # 404 for an unknown group
        return [
            GroupLoadRead(
                sampled_at=s.sampled_at,
                optimizers=s.optimizers,
                threads=s.threads,
                busy=s.busy,
                queued=s.queued,
                pending_tables=s.pending_tables,
            )
            for s in shapes.group_loads(session, name, limit)
        ]


@router.delete("/{name}", status_code=204)
def delete_group(name: str, ctx: Ctx) -> Response:
    with ctx.db.write() as session:
        store.delete_group(session, name)
    return Response(status_code=204)


@router.get("/{name}/shadow", response_model=Shadow)
def group_shadow(
    name: str,
    ctx: Ctx,
    hours: Annotated[
        float | None, Query(gt=0, le=24 * 7, description="The window, up to now (default: since it was set)")
    ] = None,
) -> Shadow:
    """What the group's shadow policy (`optimizing.shadow-policy`) would have done since it was set (at most a
    week), beside what the group's own policy did: its tables' commits and scans replayed (docs/reads.md)."""
    now = utcnow()
    with ctx.db.read() as session:
        row = store.get_group(session, name)
        text = row.properties.get(SHADOW)
        if text is None:
            raise Conflict(f"group {name} runs no policy in shadow: set {SHADOW} on it (docs/reads.md)")
        since = now - timedelta(days=7)
        if hours is not None:
            since = now - timedelta(hours=hours)
        elif SHADOW_SINCE in row.properties:
            since = max(since, as_utc(datetime.fromisoformat(row.properties[SHADOW_SINCE])))
        tables = table_store.list_tables(session, group=name)
        return shadow(session, name, Policy.parse(text), tables, since, now)
