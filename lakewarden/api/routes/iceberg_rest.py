"""The Iceberg REST catalog (`/iceberg/v1`, the Iceberg REST OpenAPI spec) for catalogs of type `internal`, and
for the external catalogs it forwards to (services/rest_catalog/federation.py).

A client passes the catalog's name as `warehouse`; `GET /iceberg/v1/config` answers with
that name as the `prefix` and the endpoints served. Namespaces in paths are levels joined by 0x1F.
"""

from __future__ import annotations

import base64
import bisect
import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from pydantic import Field
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate

from lakewarden.api.auth import NOBODY, Caller, caller, require_catalog
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.fast_path.lean_routes import LeanRoute
from lakewarden.api.fast_path.responses import JSONBytes
from lakewarden.api.idempotency import LIFETIME_ISO
from lakewarden.api.schemas import ClientBody
from lakewarden.api.threads import in_thread
from lakewarden.domain.catalogs import REST_ENDPOINT
from lakewarden.domain.errors import (
    Forbidden,
    InvalidField,
    NoSuchTable,
    NoSuchWarehouse,
    Unprocessable,
    Unsupported,
    WouldWait,
)
from lakewarden.domain.reads import commit_report, scan_report
from lakewarden.domain.security import Principal, Privilege
from lakewarden.domain.storage import Access
from lakewarden.metadata.files import identity_fields
from lakewarden.services.rest_catalog.catalog import RestCatalog
from lakewarden.services.rest_catalog.commits import TableChange as Change
from lakewarden.services.rest_catalog.federation import Federation
from lakewarden.services.rest_catalog.loads import Delegation, LoadedTable
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning, parse_affinity, parse_plan_request
from lakewarden.store import rest_catalog as store

router = APIRouter(tags=["iceberg rest catalog"], route_class=LeanRoute)
Ctx = Annotated[ServerContext, Depends(server_context)]
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/transactions/commit",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks",
]

# what a forwarded catalog serves (federation.py): its namespaces and tables, through the catalog of record
FORWARDED_ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
]

# served by api/routes/iceberg_views.py
VIEW_ENDPOINTS = [
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/register-view",
]


async def rest_catalog(ctx: Ctx) -> RestCatalog:
    return ctx.rest_catalog


Catalog = Annotated[RestCatalog, Depends(rest_catalog)]


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


class TableRef(ClientBody):
    namespace: list[str] = Field(min_length=1)
    name: str = Field(min_length=1)


class CommitTable(ClientBody):
    # the Java client sends no identifier: the path names the table
    identifier: TableRef | None = None
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class TableChange(ClientBody):
    identifier: TableRef
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class CommitTransaction(ClientBody):
    table_changes: list[TableChange] = Field(alias="table-changes", min_length=1)


class RegisterTable(ClientBody):
    name: str = Field(min_length=1)
    metadata_location: str = Field(alias="metadata-location", min_length=1)
    overwrite: bool = False  # replace a table of that name (its pointer moves to this metadata)


class RenameTable(ClientBody):
    source: TableRef
    destination: TableRef


def _ns(namespace: str) -> str:
    parts = namespace.split(store.SEP)
    if not all(parts):
        raise InvalidField("namespace", f"{namespace!r} has an empty level")
    return store.key(parts)


def _page(items: list[str], token: str | None, size: int | None) -> tuple[list[str], str | None]:
    """A page of sorted names. The token is a keyset cursor (the last name given, encoded): the next page
    starts after it, so names created or dropped meanwhile neither repeat nor skip the others."""
    start = 0
    if token:
        try:
            after = base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4)).decode()
        except (ValueError, UnicodeError):
            raise InvalidField("pageToken", "is not a token this server issued") from None
        start = bisect.bisect_right(items, after)
    if size is None:
        return items[start:], None
    page = items[start : start + size]
    more = start + size < len(items)
    return page, (base64.urlsafe_b64encode(page[-1].encode()).decode().rstrip("=") if more and page else None)


DELEGATION_HEADER = "x-iceberg-access-delegation"
VENDED_CREDENTIALS = "vended-credentials"


def delegation(request: Request, me: Principal, prefix: str, namespace: str, table: str) -> Delegation | None:
    """The client's ask for vended credentials (a comma-separated list of mechanisms; remote signing is not
    offered), with what the caller may do to the table: read-only credentials for a reader."""
    headers = request.headers
    if DELEGATION_HEADER not in headers:  # (not `get`: Starlette's raises and catches a KeyError for a header not sent)
        return None
    if VENDED_CREDENTIALS not in (m.strip().lower() for m in headers[DELEGATION_HEADER].split(",")):
        return None
    return _delegation_of(me, prefix, namespace, table)


def _delegation_of(me: Principal, prefix: str, namespace: str, table: str) -> Delegation:
    # an optimizer's catalog token reaches only the tables it holds a task on (the router checked), and writes them
    writes = me.may(prefix, tuple(store.levels(namespace)), table, Privilege.WRITE)
    return Delegation(Access.WRITE if writes else Access.READ, me.name)


def forwarded(svc: RestCatalog, prefix: str, me: Principal) -> Federation | None:
    """The federation when `prefix` names a catalog it forwards to, else None (an internal catalog, or none).
    A catalog not opened to clients (`rest-endpoint.enabled`) is served to lakewarden's optimizers only."""
    found = svc.federation.find(prefix)
    if found is None:
        return None
    if not (found.open_to_clients or me.task_holder is not None or me is NOBODY):
        raise Forbidden(
            f"catalog {prefix} is served to lakewarden's optimizers only: set {REST_ENDPOINT}=true on it to serve "
            "its tables to every client with a grant"
        )
    return svc.federation


def _loaded(
    svc: RestCatalog, prefix: str, namespace: str, name: str, table: LoadedTable, asked: Delegation | None
) -> dict[str, Any]:
    return {
        "metadata-location": table.metadata_location,
        "metadata": table.metadata.model_dump(mode="json", by_alias=True, exclude_none=True),
        **svc.loads.table_access(prefix, namespace, name, table.metadata, asked).fields(),
    }


@router.get("/config")
def get_config(ctx: Ctx, me: Caller, warehouse: str | None = None) -> dict[str, Any]:
    if warehouse is None:
        internal = [c.name for c in _internal_catalogs(ctx) if me.sees(c.name, None)]
        if len(internal) != 1:
            raise InvalidField("warehouse", f"name one of the internal catalogs: {', '.join(internal) or 'none'}")
        warehouse = internal[0]
    if not me.sees(warehouse, None):
        raise Forbidden(f"{me.name} has no grant on warehouse {warehouse}")
    if forwarded(ctx.rest_catalog, warehouse, me) is not None:
        found = ctx.rest_catalog.federation.find(warehouse)
        profile = None if found is None else found.profile
        return {
            "defaults": {} if profile is None else profile.client_config(),
            "overrides": {"prefix": warehouse, "namespace-separator": "%1F"},
            "endpoints": FORWARDED_ENDPOINTS,
        }
    warehouses = ctx.rest_catalog.warehouses
    spec = warehouses.catalog(warehouse)
    # namespaces in paths: levels joined by 0x1F (the spec's default separator, advertised as it says)
    overrides = {"prefix": warehouse, "namespace-separator": "%1F"}
    return {
        "defaults": warehouses.storage(spec).client_config(),  # how to reach the warehouse (no secrets)
        "overrides": overrides,
        "endpoints": [*ENDPOINTS, *VIEW_ENDPOINTS],
        "idempotency-key-lifetime": LIFETIME_ISO,  # api/idempotency.py
    }


def _internal_catalogs(ctx: ServerContext) -> list[Any]:
    from lakewarden.store import catalogs as catalog_store

    with ctx.db.read() as session:
        return [c for c in catalog_store.list_catalogs(session) if c.type == "internal"]


# ---- namespaces


@router.get("/{prefix}/namespaces")
def list_namespaces(
    prefix: str,
    svc: Catalog,
    ctx: Ctx,
    me: Caller,
    parent: str | None = None,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
    page_size: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
) -> dict[str, Any]:
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        levels = tuple(store.levels(_ns(parent))) if parent else None
        found = [store.key(ns) for ns in federation.list_namespaces(prefix, levels)]
    else:
        svc.warehouses.catalog(prefix)
        with ctx.db.read() as session:
            found = store.list_namespaces(session, prefix, _ns(parent) if parent else None)
    found = sorted(ns for ns in found if me.sees(prefix, tuple(store.levels(ns))))
    page, token = _page(found, page_token, page_size)
    return {"namespaces": [store.levels(ns) for ns in page], "next-page-token": token}


@router.post("/{prefix}/namespaces")
def create_namespace(prefix: str, body: CreateNamespace, svc: Catalog, me: Caller) -> dict[str, Any]:
    require_catalog(me, prefix, tuple(body.namespace[:-1]) or None, None, Privilege.WRITE)
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        federation.create_namespace(prefix, tuple(body.namespace), body.properties)
        return {"namespace": body.namespace, "properties": body.properties}
    try:
        svc.tables.create_namespace(prefix, _ns(store.key(body.namespace)), body.properties)
    except NoSuchWarehouse as exc:  # the spec documents no 404 here (every other route has one): a bad request
        raise InvalidField("prefix", str(exc)) from exc
    return {"namespace": body.namespace, "properties": body.properties}


@router.get("/{prefix}/namespaces/{namespace}")
def load_namespace(prefix: str, namespace: str, svc: Catalog, ctx: Ctx, me: Caller) -> dict[str, Any]:
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        levels = store.levels(_ns(namespace))
        return {"namespace": levels, "properties": federation.load_namespace(prefix, tuple(levels))}
    svc.warehouses.catalog(prefix)
    with ctx.db.read() as session:
        row = store.get_namespace(session, prefix, _ns(namespace))
    return {"namespace": store.levels(row.namespace), "properties": row.properties}


@router.head("/{prefix}/namespaces/{namespace}", status_code=204)
def namespace_exists(prefix: str, namespace: str, svc: Catalog, ctx: Ctx, me: Caller) -> Response:
    load_namespace(prefix, namespace, svc, ctx, me)
    return Response(status_code=204)


@router.delete("/{prefix}/namespaces/{namespace}", status_code=204)
def drop_namespace(prefix: str, namespace: str, svc: Catalog) -> Response:
    svc.tables.drop_namespace(prefix, _ns(namespace))
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/properties")
def update_namespace_properties(
    prefix: str, namespace: str, body: UpdateNamespaceProperties, svc: Catalog, ctx: Ctx
) -> dict[str, Any]:
    svc.warehouses.catalog(prefix)
    overlap = set(body.removals) & set(body.updates)
    if overlap:
        raise Unprocessable("removals", f"{sorted(overlap)} are also in updates")
    with ctx.db.write(any_node=True) as session:
        updated, removed, missing = store.update_namespace_properties(
            session, prefix, _ns(namespace), body.removals, body.updates
        )
    return {"updated": updated, "removed": removed, "missing": missing}


# ---- tables


@router.get("/{prefix}/namespaces/{namespace}/tables")
def list_tables(
    prefix: str,
    namespace: str,
    svc: Catalog,
    ctx: Ctx,
    me: Caller,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
    page_size: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
) -> dict[str, Any]:
    ns = _ns(namespace)
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        names = sorted(federation.list_tables(prefix, tuple(store.levels(ns))))
    else:
        svc.warehouses.catalog(prefix)
        with ctx.db.read() as session:
            names = store.list_pointers(session, prefix, ns)
    page, token = _page(names, page_token, page_size)
    return {"identifiers": [{"namespace": store.levels(ns), "name": n} for n in page], "next-page-token": token}


@router.post("/{prefix}/namespaces/{namespace}/tables")
def create_table(
    prefix: str, namespace: str, body: CreateTable, svc: Catalog, request: Request, me: Caller
) -> dict[str, Any]:
    ns = _ns(namespace)
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        if body.stage_create:
            raise Unsupported(f"catalog {prefix} is forwarded: stage its table's creation in the catalog itself")
        created = federation.create_table(
            prefix,
            tuple(store.levels(ns)),
            body.name,
            body.table_schema,
            body.partition_spec,
            body.write_order,
            body.location,
            body.properties,
        )
        asked = delegation(request, me, prefix, ns, body.name)
        return svc.forwarded_answer(prefix, ns, body.name, created, asked)
    loaded = svc.tables.create_table(
        prefix,
        ns,
        body.name,
        body.table_schema,
        body.partition_spec,
        body.write_order,
        body.location,
        body.properties,
        body.stage_create,
    )
    return _loaded(svc, prefix, ns, body.name, loaded, delegation(request, me, prefix, ns, body.name))


@router.get("/{prefix}/namespaces/{namespace}/tables/{table}")
async def load_table(
    prefix: str,
    namespace: str,
    table: str,
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
    svc: RestCatalog = request.app.state.context.rest_catalog
    ns = _ns(namespace)
    me = caller(request)
    asked = delegation(request, me, prefix, ns, table)
    if svc.federation.known(prefix) is not False and await in_thread(forwarded, svc, prefix, me) is not None:
        answer: tuple[str, bytes | None] | None = await in_thread(
            svc.forwarded_load, prefix, ns, table, if_none_match, asked
        )
    else:
        answer = await svc.loads.cached_load(prefix, ns, table, snapshots, if_none_match, asked)
    if answer is None:
        answer = await in_thread(svc.loads.load_table_body, prefix, ns, table, snapshots, if_none_match, asked)
    etag, body = answer
    if body is None:
        return Response(status_code=304, headers={"ETag": etag})
    return JSONBytes(body, etag)


@router.head("/{prefix}/namespaces/{namespace}/tables/{table}", status_code=204)
def table_exists(prefix: str, namespace: str, table: str, svc: Catalog, me: Caller) -> Response:
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        if not federation.table_exists(prefix, tuple(store.levels(_ns(namespace))), table):
            raise NoSuchTable(f"Table does not exist: {namespace}.{table}")
        return Response(status_code=204)
    if not svc.loads.table_exists(prefix, _ns(namespace), table):
        raise NoSuchTable(f"Table does not exist: {namespace}.{table}")
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}")
async def commit_table(
    prefix: str,
    namespace: str,
    table: str,
    body: CommitTable,
    svc: Catalog,
    request: Request,
    user_agent: Annotated[str | None, Header()] = None,
) -> Response:
    """The table's turn is taken on the event loop (services/rest_catalog/commit_queue.py), then the commit is
    made there if nothing in it can wait (TableCommits.commit_table), else on a worker thread."""
    client = request.headers.get("x-client-version") or user_agent
    ns = _ns(namespace)
    forwarding = svc.federation.known(prefix) is not False
    if forwarding and await in_thread(forwarded, svc, prefix, caller(request)) is not None:
        committed = await in_thread(
            svc.federation.commit_table, prefix, tuple(store.levels(ns)), table, body.requirements, body.updates
        )
        return JSONBytes(json.dumps(svc.forwarded_answer(prefix, ns, table, committed, None)).encode())
    async with svc.queue.turn((prefix, *store.levels(ns), table)):
        try:
            answer = _commit(svc, prefix, ns, table, body, client, wait=False)
        except WouldWait:
            answer = await in_thread(_commit, svc, prefix, ns, table, body, client)
    return JSONBytes(answer)


def _commit(
    svc: RestCatalog, prefix: str, ns: str, table: str, body: CommitTable, client: str | None, wait: bool = True
) -> bytes:
    loaded = svc.commits.commit_table(prefix, ns, table, body.requirements, body.updates, client, wait)
    return svc.loads.response_body(loaded)


@router.delete("/{prefix}/namespaces/{namespace}/tables/{table}", status_code=204)
def drop_table(
    prefix: str,
    namespace: str,
    table: str,
    svc: Catalog,
    me: Caller,
    purge: Annotated[bool, Query(alias="purgeRequested")] = False,
) -> Response:
    federation = forwarded(svc, prefix, me)
    if federation is not None:
        federation.drop_table(prefix, tuple(store.levels(_ns(namespace))), table, purge)
        return Response(status_code=204)
    svc.tables.drop_table(prefix, _ns(namespace), table, purge)
    return Response(status_code=204)


@router.post("/{prefix}/tables/rename", status_code=204)
def rename_table(prefix: str, body: RenameTable, svc: Catalog, me: Caller) -> Response:
    require_catalog(me, prefix, tuple(body.source.namespace), body.source.name, Privilege.WRITE)
    require_catalog(me, prefix, tuple(body.destination.namespace), body.destination.name, Privilege.WRITE)
    source = (store.key(body.source.namespace), body.source.name)
    target = (store.key(body.destination.namespace), body.destination.name)
    svc.tables.rename_table(prefix, source, target)
    return Response(status_code=204)


@router.post("/{prefix}/transactions/commit", status_code=204)
async def commit_transaction(
    prefix: str, body: CommitTransaction, svc: Catalog, request: Request, me: Caller
) -> Response:
    """Several tables, atomically: all their pointers swap in one database transaction, or none does."""
    for change in body.table_changes:
        require_catalog(me, prefix, tuple(change.identifier.namespace), change.identifier.name, Privilege.WRITE)
    names = [(store.key(c.identifier.namespace), c.identifier.name) for c in body.table_changes]
    if len(set(names)) != len(names):
        raise InvalidField("table-changes", "name each table once")
    changes = [Change(ns, n, c.requirements, c.updates) for (ns, n), c in zip(names, body.table_changes, strict=True)]
    client = request.headers.get("x-client-version") or request.headers.get("user-agent")
    async with svc.queue.turns([(prefix, *store.levels(ns), n) for ns, n in names]):
        await in_thread(svc.commits.commit_transaction, prefix, changes, client)
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/register")
def register_table(
    prefix: str, namespace: str, body: RegisterTable, svc: Catalog, request: Request, me: Caller
) -> dict[str, Any]:
    ns = _ns(namespace)
    loaded = svc.tables.register_table(prefix, ns, body.name, body.metadata_location, body.overwrite)
    return _loaded(svc, prefix, ns, body.name, loaded, delegation(request, me, prefix, ns, body.name))


@router.get("/{prefix}/namespaces/{namespace}/tables/{table}/credentials")
def load_credentials(prefix: str, namespace: str, table: str, svc: Catalog, me: Caller) -> dict[str, Any]:
    """The table's vended credentials alone (clients refresh them here before they expire); asking is
    implied. An empty list for a local warehouse, or for a reader of a catalog that vends static keys."""
    ns = _ns(namespace)
    return {"storage-credentials": svc.loads.load_credentials(prefix, ns, table, _delegation_of(me, prefix, ns, table))}


class MetricsReport(ClientBody):
    """A ReportMetricsRequest: a ScanReport or a CommitReport (Iceberg's ReportMetricsRequestParser)."""

    report_type: str = Field(alias="report-type", min_length=1)
    table_name: str | None = Field(None, alias="table-name")
    snapshot_id: int | None = Field(None, alias="snapshot-id")
    filter: Any = None
    operation: str | None = Field(None, max_length=64)
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)


SCAN_REPORT, COMMIT_REPORT = "scan-report", "commit-report"


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}/metrics", status_code=204)
def report_metrics(prefix: str, namespace: str, table: str, body: MetricsReport, svc: Catalog, me: Caller) -> Response:
    """Scan and commit reports are kept per table (services/tables/reads.py); a report of another type is
    accepted and dropped, as Iceberg's own parser makes it an unknown report."""
    ns = _ns(namespace)
    federation = forwarded(svc, prefix, me)
    exists = (
        federation.table_exists(prefix, tuple(store.levels(ns)), table)
        if federation is not None
        else svc.loads.table_exists(prefix, ns, table)
    )
    if not exists:
        raise NoSuchTable(f"Table does not exist: {namespace}.{table}")
    if body.report_type == SCAN_REPORT:
        fields = [] if federation is not None else _identity_fields(svc, prefix, ns, table)
        report = scan_report(body.metrics, body.snapshot_id, body.filter, body.metadata, me.name, fields)
    elif body.report_type == COMMIT_REPORT:
        if body.operation is None:
            raise InvalidField("operation", "is required in a commit report")
        report = commit_report(body.metrics, body.snapshot_id, body.operation, body.metadata, me.name)
    else:
        return Response(status_code=204)
    svc.reads.record((prefix, ns, table), report)
    return Response(status_code=204)


def _identity_fields(svc: RestCatalog, prefix: str, ns: str, table: str) -> list[tuple[str, str]]:
    metadata = svc.loads.load_table(prefix, ns, table).metadata
    return identity_fields(metadata.spec(), metadata.schema())


# ---- server-side scan planning (services/rest_catalog/scan_planning.py)


class FetchScanTasks(ClientBody):
    plan_task: str = Field(alias="plan-task", min_length=1)


async def scans(ctx: Ctx) -> ScanPlanning:
    return ctx.rest_catalog.scans


Scans = Annotated[ScanPlanning, Depends(scans)]


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}/plan")
def plan_table_scan(
    prefix: str,
    namespace: str,
    table: str,
    body: Annotated[dict[str, Any], Body()],
    planner: Scans,
    request: Request,
    me: Caller,
) -> Response:
    ns = _ns(namespace)
    scan, affinity = parse_plan_request(body), parse_affinity(body)
    asked = delegation(request, me, prefix, ns, table)
    return _json(planner.submit(prefix, ns, table, scan, asked, affinity, body.get("filter"), me.name))


@router.get("/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}")
def fetch_planning_result(
    prefix: str, namespace: str, table: str, plan_id: str, planner: Scans, request: Request, me: Caller
) -> Response:
    ns = _ns(namespace)
    return _json(planner.result(prefix, ns, table, plan_id, delegation(request, me, prefix, ns, table)))


@router.delete("/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}", status_code=204)
def cancel_planning(prefix: str, namespace: str, table: str, plan_id: str, planner: Scans) -> Response:
    planner.cancel(prefix, _ns(namespace), table, plan_id)
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/tables/{table}/tasks")
def fetch_scan_tasks(prefix: str, namespace: str, table: str, body: FetchScanTasks, planner: Scans) -> Response:
    return _json(planner.tasks(prefix, _ns(namespace), table, body.plan_task))


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
