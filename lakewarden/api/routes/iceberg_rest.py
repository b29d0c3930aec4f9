"""The Iceberg REST catalog (`/iceberg/v1`, the Iceberg REST OpenAPI spec): each route parses its request and
makes one call to the catalog its prefix names (services/rest_catalog/served.py: lakewarden's own catalogs and the
external catalogs it forwards to answer alike).

A client passes the catalog's name as `warehouse`; `GET /iceberg/v1/config` answers with that name as the
`prefix` and the endpoints served. Namespaces in paths are levels joined by 0x1F.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from pydantic import Field
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate

from lakewarden.api.auth import Caller, caller, require_catalog
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.fast_path.lean_routes import LeanRoute
from lakewarden.api.fast_path.responses import JSONBytes
from lakewarden.api.routes.iceberg_common import Served, TableRef, delegation, delegation_of, ns, page
from lakewarden.api.schemas import ClientBody
from lakewarden.api.threads import in_thread
from lakewarden.domain.errors import Forbidden, InvalidField, NoSuchTable, Unsupported, WouldWait
from lakewarden.domain.security import Privilege
from lakewarden.services.rest_catalog.commits import TableChange
from lakewarden.services.rest_catalog.served import MetricsRequest, NewTable
from lakewarden.store import rest_catalog as store

router = APIRouter(tags=["iceberg rest catalog"], route_class=LeanRoute)
Ctx = Annotated[ServerContext, Depends(server_context)]


class CreateNamespace(ClientBody):
    namespace: list[str] = Field(min_length=1)
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespaceProperties(ClientBody):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class CreateTable(ClientBody):
    name: str = Field(min_length=1)
    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(None, alias="partition-spec")
    write_order: SortOrder | None = Field(None, alias="write-order")
    stage_create: bool = Field(False, alias="stage-create")
    properties: dict[str, str] = Field(default_factory=dict)


class CommitTable(ClientBody):
    # the Java client sends no identifier: the path names the table
    identifier: TableRef | None = None
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class CommitTableRequest(ClientBody):
    """One table's part of a multi-table commit."""

    identifier: TableRef
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class CommitTransaction(ClientBody):
    table_changes: list[CommitTableRequest] = Field(alias="table-changes", min_length=1)


class RegisterTable(ClientBody):
    name: str = Field(min_length=1)
    metadata_location: str = Field(alias="metadata-location", min_length=1)
    overwrite: bool = False  # replace a table of that name (its pointer moves to this metadata)


class RenameTable(ClientBody):
    source: TableRef
    destination: TableRef


@router.get("/config")
def get_config(ctx: Ctx, me: Caller, warehouse: str | None = None) -> dict[str, Any]:
    svc = ctx.rest_catalog
    if warehouse is None:
        internal = [name for name in svc.warehouses.names() if me.sees(name, None)]
        if len(internal) != 1:
            raise InvalidField("warehouse", f"name one of the internal catalogs: {', '.join(internal) or 'none'}")
        warehouse = internal[0]
    if not me.sees(warehouse, None):
        raise Forbidden(f"{me.name} has no grant on warehouse {warehouse}")
    return svc.served(warehouse, me).config()


# ---- namespaces


@router.get("/{prefix}/namespaces")
def list_namespaces(
    prefix: str,
    catalog: Served,
    me: Caller,
    parent: str | None = None,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
    page_size: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
) -> dict[str, Any]:
    found = catalog.list_namespaces(ns(parent) if parent else None)
    found = sorted(n for n in found if me.sees(prefix, tuple(store.levels(n))))
    names, token = page(found, page_token, page_size)
    return {"namespaces": [store.levels(n) for n in names], "next-page-token": token}


@router.post("/{prefix}/namespaces")
def create_namespace(prefix: str, body: CreateNamespace, catalog: Served, me: Caller) -> dict[str, Any]:
    require_catalog(me, prefix, tuple(body.namespace[:-1]) or None, None, Privilege.WRITE)
    catalog.create_namespace(ns(store.key(body.namespace)), body.properties)
    return {"namespace": body.namespace, "properties": body.properties}


@router.get("/{prefix}/namespaces/{namespace}")
def load_namespace(prefix: str, namespace: str, catalog: Served) -> dict[str, Any]:
    key = ns(namespace)
    return {"namespace": store.levels(key), "properties": catalog.load_namespace(key)}


@router.head("/{prefix}/namespaces/{namespace}", status_code=204)
def namespace_exists(prefix: str, namespace: str, catalog: Served) -> Response:
    catalog.load_namespace(ns(namespace))
    return Response(status_code=204)


@router.delete("/{prefix}/namespaces/{namespace}", status_code=204)
def drop_namespace(prefix: str, namespace: str, catalog: Served) -> Response:
    catalog.drop_namespace(ns(namespace))
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/properties")
def update_namespace_properties(
    prefix: str, namespace: str, body: UpdateNamespaceProperties, catalog: Served
) -> dict[str, Any]:
    done = catalog.update_namespace_properties(ns(namespace), body.removals, body.updates)
    return {"updated": done.updated, "removed": done.removed, "missing": done.missing}


# ---- tables


@router.get("/{prefix}/namespaces/{namespace}/tables")
def list_tables(
    prefix: str,
    namespace: str,
    catalog: Served,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
    page_size: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
) -> dict[str, Any]:
    key = ns(namespace)
    names, token = page(catalog.list_tables(key), page_token, page_size)
    return {"identifiers": [{"namespace": store.levels(key), "name": n} for n in names], "next-page-token": token}


@router.post("/{prefix}/namespaces/{namespace}/tables")
def create_table(
    prefix: str, namespace: str, body: CreateTable, catalog: Served, request: Request, me: Caller
) -> dict[str, Any]:
    key = ns(namespace)
    table = NewTable(
        body.name,
        body.table_schema,
        body.partition_spec,
        body.write_order,
        body.location,
        body.properties,
        body.stage_create,
    )
    return catalog.create_table(key, table, delegation(request, me, prefix, key, body.name))


@router.get("/{prefix}/namespaces/{namespace}/tables/{table}")
async def load_table(
    prefix: str,
    namespace: str,
    table: str,
    catalog: Served,
    request: Request,
    snapshots: str = "all",
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """The hottest call of a catalog. A cached body is answered on the event loop (an indexed read and a
    dictionary lookup, with no hop to the thread pool; the router's grant check is async too); a metadata
    file to read is read in a thread, never on the loop. `ETag` names the answer; `If-None-Match` with it
    gets a 304. `snapshots=refs`: only the snapshots that branches and tags name."""
    if snapshots not in ("all", "refs"):
        raise InvalidField("snapshots", f"{snapshots!r} is neither all nor refs")
    key = ns(namespace)
    asked = delegation(request, caller(request), prefix, key, table)  # (the caller: known, cached on the request)
    cached = catalog.cached_load(key, table, snapshots, if_none_match, asked)
    answer = None if cached is None else await cached
    if answer is None:
        answer = await in_thread(catalog.load_table, key, table, snapshots, if_none_match, asked)
    etag, body = answer
    if body is None:
        return Response(status_code=304, headers={"ETag": etag})
    return JSONBytes(body, etag)


@router.head("/{prefix}/namespaces/{namespace}/tables/{table}", status_code=204)
def table_exists(prefix: str, namespace: str, table: str, catalog: Served) -> Response:
    if not catalog.table_exists(ns(namespace), table):
        raise NoSuchTable(f"Table does not exist: {namespace}.{table}")
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}")
async def commit_table(
    prefix: str,
    namespace: str,
    table: str,
    body: CommitTable,
    catalog: Served,
    request: Request,
    user_agent: Annotated[str | None, Header()] = None,
) -> Response:
    """The table's turn is taken on the event loop (services/rest_catalog/commit_queue.py), then the commit is
    made there if nothing in it can wait, else on a worker thread."""
    client = request.headers.get("x-client-version") or user_agent
    key = ns(namespace)
    await catalog.after_writes(key, table, body.updates)
    async with catalog.commit_turn([(key, table)]):
        try:
            answer = catalog.commit_table(key, table, body.requirements, body.updates, client, False)
        except WouldWait:
            answer = await in_thread(catalog.commit_table, key, table, body.requirements, body.updates, client, True)
    return JSONBytes(answer)


@router.delete("/{prefix}/namespaces/{namespace}/tables/{table}", status_code=204)
def drop_table(
    prefix: str,
    namespace: str,
    table: str,
    catalog: Served,
    purge: Annotated[bool, Query(alias="purgeRequested")] = False,
) -> Response:
    catalog.drop_table(ns(namespace), table, purge)
    return Response(status_code=204)


@router.post("/{prefix}/tables/rename", status_code=204)
def rename_table(prefix: str, body: RenameTable, catalog: Served, me: Caller) -> Response:
    require_catalog(me, prefix, tuple(body.source.namespace), body.source.name, Privilege.WRITE)
    require_catalog(me, prefix, tuple(body.destination.namespace), body.destination.name, Privilege.WRITE)
    catalog.rename_table(body.source.key, body.destination.key)
    return Response(status_code=204)


@router.post("/{prefix}/transactions/commit", status_code=204)
async def commit_transaction(
    prefix: str, body: CommitTransaction, catalog: Served, request: Request, me: Caller
) -> Response:
    """Several tables, atomically: all their pointers swap in one database transaction, or none does."""
    for change in body.table_changes:
        require_catalog(me, prefix, tuple(change.identifier.namespace), change.identifier.name, Privilege.WRITE)
    names = [c.identifier.key for c in body.table_changes]
    if len(set(names)) != len(names):
        raise InvalidField("table-changes", "name each table once")
    changes = [
        TableChange(n, t, c.requirements, c.updates) for (n, t), c in zip(names, body.table_changes, strict=True)
    ]
    client = request.headers.get("x-client-version") or request.headers.get("user-agent")
    async with catalog.commit_turn(names):
        await in_thread(catalog.commit_transaction, changes, client)
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/register")
def register_table(
    prefix: str, namespace: str, body: RegisterTable, catalog: Served, request: Request, me: Caller
) -> dict[str, Any]:
    key = ns(namespace)
    asked = delegation(request, me, prefix, key, body.name)
    return catalog.register_table(key, body.name, body.metadata_location, body.overwrite, asked)


@router.get("/{prefix}/namespaces/{namespace}/tables/{table}/credentials")
def load_credentials(prefix: str, namespace: str, table: str, catalog: Served, me: Caller) -> dict[str, Any]:
    """The table's vended credentials alone (clients refresh them here before they expire); asking is
    implied. An empty list for a local warehouse, or for a reader of a catalog that vends static keys."""
    key = ns(namespace)
    return {"storage-credentials": catalog.load_credentials(key, table, delegation_of(me, prefix, key, table))}


class MetricsReport(ClientBody):
    """A ReportMetricsRequest: a ScanReport or a CommitReport (Iceberg's ReportMetricsRequestParser)."""

    report_type: str = Field(alias="report-type", min_length=1)
    table_name: str | None = Field(None, alias="table-name")
    snapshot_id: int | None = Field(None, alias="snapshot-id")
    filter: Any = None
    operation: str | None = Field(None, max_length=64)
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    projected_field_ids: list[int] = Field(default_factory=list, alias="projected-field-ids", max_length=100_000)


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}/metrics", status_code=204)
def report_metrics(
    prefix: str, namespace: str, table: str, body: MetricsReport, catalog: Served, me: Caller
) -> Response:
    """Scan and commit reports are kept per table (services/tables/reads.py). The scan of a row-level write
    may have lakewarden's work yield to it first (services/rest_catalog/own.py)."""
    request = MetricsRequest(
        body.report_type,
        body.snapshot_id,
        body.filter,
        body.operation,
        body.metrics,
        body.metadata,
        tuple(body.projected_field_ids),
        by_lakewarden=me.task_holder is not None,
    )
    catalog.report_metrics(ns(namespace), table, request, me.name)
    return Response(status_code=204)


# ---- server-side scan planning (services/rest_catalog/scan_planning.py)


class FetchScanTasks(ClientBody):
    plan_task: str = Field(alias="plan-task", min_length=1)


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}/plan")
def plan_table_scan(
    prefix: str,
    namespace: str,
    table: str,
    body: Annotated[dict[str, Any], Body()],
    catalog: Served,
    request: Request,
    me: Caller,
) -> Response:
    key = ns(namespace)
    return _json(catalog.plan_scan(key, table, body, delegation(request, me, prefix, key, table), me.name))


@router.get("/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}")
def fetch_planning_result(
    prefix: str, namespace: str, table: str, plan_id: str, catalog: Served, request: Request, me: Caller
) -> Response:
    key = ns(namespace)
    return _json(catalog.plan_result(key, table, plan_id, delegation(request, me, prefix, key, table)))


@router.delete("/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}", status_code=204)
def cancel_planning(prefix: str, namespace: str, table: str, plan_id: str, catalog: Served) -> Response:
    catalog.cancel_plan(ns(namespace), table, plan_id)
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}/tasks")
def fetch_scan_tasks(prefix: str, namespace: str, table: str, body: FetchScanTasks, catalog: Served) -> Response:
    return _json(catalog.plan_tasks(ns(namespace), table, body.plan_task))


def _json(body: dict[str, Any]) -> Response:
    """Plans of many files are large: serialised with json.dumps at once, not walked by FastAPI's encoder
    (the bodies hold only JSON types already)."""
    return Response(json.dumps(body, separators=(",", ":")).encode(), media_type="application/json")


@router.api_route(
    "/{prefix}/{operation:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE"], include_in_schema=False
)
def unsupported(prefix: str, operation: str, request: Request) -> Response:
    """Any other route of the spec: the spec's 406, not a 404."""
    raise Unsupported(
        f"{request.method} /v1/{prefix}/{operation} is not supported by this server (GET /v1/config lists its "
        "endpoints)"
    )
