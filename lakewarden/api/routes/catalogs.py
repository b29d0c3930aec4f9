"""`/api/v1/catalogs`: register, inspect, change, unregister and refresh catalogs."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Response

from lakewarden.api.auth import OPERATOR
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import CatalogCreate, CatalogRead, CatalogUpdate, RefreshRead
from lakewarden.domain.catalogs import CatalogSpec, redact, validate_catalog, with_internal_defaults
from lakewarden.domain.errors import Conflict, InvalidField
from lakewarden.metadata.catalogs import initialize_catalog
from lakewarden.store import catalogs as store
from lakewarden.store import groups as group_store
from lakewarden.store import rest_catalog as rest_store
from lakewarden.store.models import CatalogRow

log = logging.getLogger(__name__)
router = APIRouter(prefix="/catalogs", tags=["catalogs"])
Ctx = Annotated[ServerContext, Depends(server_context)]


def _read(row: CatalogRow, table_count: int) -> CatalogRead:
    return CatalogRead(
        name=row.name,
        type=row.type,
        properties=redact(row.properties),
        health=row.health,
        last_refresh_at=row.last_refresh_at,
        last_error=row.last_error,
        table_count=table_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _check(ctx: ServerContext, spec: CatalogSpec) -> None:
    validate_catalog(spec)
    group = spec.properties.get(group_store.CATALOG_GROUP_DEFAULT)
    if group is not None:
        with ctx.db.read() as session:
            if not group_store.group_exists(session, group):
                raise InvalidField(
                    f"properties.{group_store.CATALOG_GROUP_DEFAULT}", f"resource group {group!r} does not exist"
                )


def _initialize(spec: CatalogSpec) -> None:
    try:
        initialize_catalog(spec)
    except Exception as exc:  # unreachable now is not invalid: the explorer reports it as unhealthy
        log.warning("catalog %s could not be initialised yet: %s", spec.name, exc)


def _with_defaults(ctx: ServerContext, spec: CatalogSpec) -> CatalogSpec:
    host = ctx.config.ams.server_bind_host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{ctx.config.ams.http_server.bind_port}"
    return with_internal_defaults(spec, url, str(ctx.config.data_dir / "warehouse" / spec.name))


@router.post("", status_code=201, response_model=CatalogRead)
def create_catalog(body: CatalogCreate, ctx: Ctx) -> CatalogRead:
    spec = _with_defaults(ctx, CatalogSpec(body.name, body.type, body.properties))
    _check(ctx, spec)
    with ctx.db.write() as session:
        row = store.create_catalog(session, spec)
    _initialize(spec)
    return _read(row, 0)


@router.get("", response_model=list[CatalogRead])
def list_catalogs(ctx: Ctx) -> list[CatalogRead]:
    with ctx.db.read() as session:
        counts = store.table_counts(session)
        return [_read(row, counts.get(row.name, 0)) for row in store.list_catalogs(session)]


@router.get("/{name}", response_model=CatalogRead)
def get_catalog(name: str, ctx: Ctx) -> CatalogRead:
    with ctx.db.read() as session:
        return _read(store.get_catalog(session, name), store.table_counts(session).get(name, 0))


@router.put("/{name}", response_model=CatalogRead)
def update_catalog(name: str, body: CatalogUpdate, ctx: Ctx) -> CatalogRead:
    with ctx.db.read() as session:
        current = store.get_catalog(session, name)
    # A redacted secret sent back unchanged keeps its stored value.
    properties = {k: (current.properties.get(k, v) if v == "****" else v) for k, v in body.properties.items()}
    spec = _with_defaults(ctx, CatalogSpec(name, body.type or current.type, properties))
    _check(ctx, spec)
    with ctx.db.write() as session:
        row = store.update_catalog(session, spec)
        count = store.table_counts(session).get(name, 0)
    ctx.rest_catalog.forget_catalog(name)
    _initialize(spec)
    return _read(row, count)


@router.delete("/{name}", status_code=204)
def delete_catalog(name: str, ctx: Ctx) -> Response:
    with ctx.db.write() as session:
        namespaces = rest_store.namespace_count(session, name)
        if namespaces:  # an internal catalog's pointers live here: removing it would lose its tables
            raise Conflict(f"catalog {name!r} still has {namespaces} namespace(s); drop them first")
        store.delete_catalog(session, name)
    ctx.rest_catalog.forget_catalog(name)
    return Response(status_code=204)


@router.post("/{name}/refresh", response_model=RefreshRead, **OPERATOR)
def refresh_catalog(name: str, ctx: Ctx) -> RefreshRead:
    """Explore the catalog now: add new tables, dispose dropped ones, refresh changed ones."""
    result = ctx.explorer.refresh(name)
    return RefreshRead.model_validate(result, from_attributes=True)
