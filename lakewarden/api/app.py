"""The server application: one factory, explicit routers, and a lifespan as the only start/stop hook."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from lakewarden import __version__
from lakewarden.api import errors
from lakewarden.api.auth import OPEN, authorize_api, authorize_catalog, caller
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.fast_path.catalog import CatalogFastPath
from lakewarden.api.fast_path.routing import PrefixRouter, prepare_routes
from lakewarden.api.forwarding import LeaderForwarding
from lakewarden.api.idempotency import IdempotencyKeys
from lakewarden.api.metrics import DatabaseCollector, LatencyMiddleware, api_latency
from lakewarden.api.middleware import AuditLog, BodyLimit, CatalogAtRoot, CommitShedding, JavaPathDecoding
from lakewarden.api.node_metrics import (
    AllocationCollector,
    CommitQueueCollector,
    HeapCollector,
    HistoryCollector,
    LongPollCollector,
    MetadataCacheCollector,
    NodeCollector,
    ScanPlanningCollector,
    ServiceCpuCollector,
)
from lakewarden.api.routes import (
    catalogs,
    events,
    formats,
    groups,
    iceberg_oauth,
    iceberg_rest,
    iceberg_views,
    optimizer,
    overview,
    processes,
    security,
    tables,
)
from lakewarden.api.schemas import Health, NodeRead
from lakewarden.config import Config
from lakewarden.domain.errors import Forbidden
from lakewarden.services.composition import ServerRuntime
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.store.database import utcnow

log = logging.getLogger(__name__)
DASHBOARD = Path(__file__).resolve().parent.parent / "dashboard"
health_router = APIRouter(tags=["health"])


@health_router.get("/health", response_model=Health, **OPEN)
def health(ctx: Annotated[ServerContext, Depends(server_context)]) -> Health:
    database = ctx.db.ping()
    leadership = ctx.leadership
    return Health(
        status="ok" if database == "ok" else "degraded",
        version=__version__,
        database=database,
        time=utcnow(),
        role="leader" if leadership.is_leader else "follower",
        node=leadership.url,
        leader=leadership.leader_url() if database == "ok" else None,
        epoch=leadership.epoch if leadership.enabled else None,
    )


@health_router.get("/nodes", response_model=list[NodeRead])
def nodes(ctx: Annotated[ServerContext, Depends(server_context)]) -> list[NodeRead]:
    """The server processes (high availability: those seen within three leases), and which one leads."""
    return [NodeRead.model_validate(n, from_attributes=True) for n in ctx.leadership.nodes()]


class ServerApp(FastAPI):
    """FastAPI, with the REST catalog's requests served from the root in one step (api/fast_path/catalog.py) where
    they need nothing of the layers between but their checks. `fast_path` is built when the server starts;
    `use_fast_path = False` sends every request through every layer (tests compare the two)."""

    catalog_router: PrefixRouter | None = None
    fast_path: CatalogFastPath | None = None
    use_fast_path = True

    def start_fast_path(self) -> None:
        """Built from the middleware stack as it stands when the server starts (Starlette takes no middleware after
        that); a stack it does not know refuses to start (CatalogFastPath.of)."""
        self.fast_path = None if self.catalog_router is None else CatalogFastPath.of(self, self.catalog_router)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        fast_path = self.fast_path
        if fast_path is not None and scope["type"] == "http" and self.use_fast_path:
            taken = fast_path.take(scope)
            if taken is not None:
                await fast_path.serve(taken, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(config: Config, start_services: bool = True, on_started: Callable[[], None] | None = None) -> ServerApp:
    """Build the server. `start_services=False` leaves background loops stopped (tests drive them);
    `on_started` runs once everything is built, right before the first request is taken."""
    host = config.ams.server_bind_host
    scheme = "https" if config.ams.http_server.ssl is not None else "http"
    server_url = f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{config.ams.http_server.bind_port}"

    metrics_registry = CollectorRegistry()  # the server's own metrics, not the process-wide default registry

    @asynccontextmanager
    async def lifespan(app: ServerApp) -> AsyncIterator[None]:
        runtime = ServerRuntime.build(config, server_url)  # every service, wired (services/composition.py)
        collectors = [
            DatabaseCollector(runtime.db),
            NodeCollector(runtime.leadership),
            AllocationCollector(runtime.maintainer.allocator),
            HistoryCollector(runtime.history),
            MetadataCacheCollector(runtime.rest_catalog.files),
            CommitQueueCollector(runtime.rest_catalog.queue),
            LongPollCollector(runtime.dispatcher),
            ScanPlanningCollector(runtime.rest_catalog.scans, runtime.rest_catalog.read_ahead),
            ServiceCpuCollector(runtime.loops),
            HeapCollector(),
        ]
        for collector in collectors:
            metrics_registry.register(collector)
        app.state.context = runtime
        runtime.start(background=start_services)
        prepare_routes(app, (api.prefix, catalog.prefix))
        app.start_fast_path()
        if on_started is not None:
            on_started()
        log.info("lakewarden %s serving; system database %s", __version__, runtime.db.engine.url.render_as_string())
        try:
            yield
        finally:
            runtime.stop()
            for collector in collectors:
                metrics_registry.unregister(collector)
            log.info("lakewarden stopped")

    app = ServerApp(
        title="lakewarden",
        version=__version__,
        description="Lakehouse table management for Apache Iceberg: self-optimizing, maintenance, REST catalog.",
        lifespan=lifespan,
        # lakewarden's metrics are Prometheus's (api/metrics.py): FastAPI's OpenTelemetry bridge would look up
        # the global providers on every request to find them unconfigured
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    errors.install(app)
    # every route is checked (api/auth.py): a role for /api/v1, a grant for /iceberg/v1
    # the management API: FastAPI's own routing and handling within its prefix (the fast path is the catalog's)
    api = PrefixRouter(prefix="/api/v1", indexed=False, dependencies=[Depends(authorize_api)])
    routers = (
        health_router,
        catalogs.router,
        groups.router,
        tables.router,
        formats.router,
        optimizer.router,
        processes.router,
        events.router,
        overview.router,
        security.router,
    )
    for router in routers:
        api.include_router(router)
    app.include_router(api, responses=errors.ERROR_RESPONSES)
    catalog = PrefixRouter(prefix="/iceberg/v1")  # the Iceberg REST catalog (api/fast_path/routing.py: why by prefix)
    catalog.include_router(iceberg_oauth.router)
    # views first: the tables' router ends with the catch-all that answers 406 for routes not served
    for router in (iceberg_views.router, iceberg_rest.router):
        catalog.include_router(router, dependencies=[Depends(authorize_catalog)], responses=errors.ERROR_RESPONSES)
    app.include_router(catalog)
    app.catalog_router = catalog
    app.add_middleware(AuditLog, db_of=lambda: app.state.context.db)
    app.add_middleware(BodyLimit, max_bytes=config.ams.http_server.max_body_size)
    app.add_middleware(IdempotencyKeys)  # inside JavaPathDecoding: it keys on the decoded path
    # outside IdempotencyKeys: a commit shed for a full line is never remembered as its key's answer
    app.add_middleware(CommitShedding, queue_of=lambda: _commit_queue(app))
    app.add_middleware(LatencyMiddleware, histogram=api_latency(metrics_registry))
    ssl = config.ams.http_server.ssl
    app.add_middleware(
        LeaderForwarding,
        leadership_of=lambda: getattr(getattr(app.state, "context", None), "leadership", None),
        verify=True if ssl is None else str(ssl.certfile.expanduser()),
    )
    # outside LatencyMiddleware: the scope it decodes is a copy, and the route is found in that copy, where the
    # latency's route is read
    app.add_middleware(JavaPathDecoding)
    app.add_middleware(CatalogAtRoot)  # outermost: /v1/… is /iceberg/v1/… for everything inside

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        """Prometheus metrics: tables, processes, groups and maintenance from the database; API latency.
        Open, or for any signed-in caller with a role (`ams.auth.metrics`)."""
        if config.ams.auth.metrics == "token":
            principal = caller(request)
            if principal.role is None:
                raise Forbidden(f"{principal.name} may not read metrics (needs role viewer)")
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    app.mount("/dashboard", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    return app


def _commit_queue(app: FastAPI) -> CommitQueue | None:
    """The running server's commit queue (None before the server is built)."""
    context = getattr(app.state, "context", None)
    return None if context is None else context.rest_catalog.queue
