"""The server application: one factory, explicit routers, and a lifespan as the only start/stop hook."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from lakewarden import __version__
from lakewarden.api import errors
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.metrics import DatabaseCollector, LatencyMiddleware, api_latency
from lakewarden.api.routes import catalogs, events, groups, iceberg_rest, optimizer, overview, processes, tables
from lakewarden.api.schemas import Health
from lakewarden.config import Config
from lakewarden.domain.maintenance import Action
from lakewarden.services.bootstrap import ensure_seeds
from lakewarden.services.containers import ResourceMaintainer
from lakewarden.services.evaluation import TableEvaluator
from lakewarden.services.events import EventDispatcher
from lakewarden.services.explorer import TableExplorer
from lakewarden.services.keeper import OptimizerKeeper
from lakewarden.services.maintenance import MaintenanceTrigger, maintenance_factories
from lakewarden.services.metadata_service import MetadataService
from lakewarden.services.processes import ProcessRegistry
from lakewarden.services.scheduler import ProcessScheduler
from lakewarden.services.self_optimizing import SelfOptimizingFactory
from lakewarden.store.database import Database, utcnow

log = logging.getLogger(__name__)
DASHBOARD = Path(__file__).resolve().parent.parent / "dashboard"
health_router = APIRouter(tags=["health"])


@health_router.get("/health", response_model=Health)
def health(ctx: Annotated[ServerContext, Depends(server_context)]) -> Health:
    database = ctx.db.ping()
    return Health(
        status="ok" if database == "ok" else "degraded", version=__version__, database=database, time=utcnow()
    )


def maintenance_schedules(config: Config) -> dict[Action, tuple[bool, timedelta]]:
    ams = config.ams
    schedules = {
        Action.EXPIRE_SNAPSHOTS: ams.expire_snapshots,
        Action.CLEAN_ORPHAN_FILES: ams.clean_orphan_files,
        Action.CLEAN_DANGLING_DELETE_FILES: ams.clean_dangling_delete_files,
        Action.EXPIRE_DATA: ams.data_expiration,
        Action.AUTO_CREATE_TAGS: ams.auto_create_tags,
        Action.REWRITE_MANIFESTS: ams.rewrite_manifests,
    }
    return {action: (schedule.enabled, schedule.interval) for action, schedule in schedules.items()}


def create_app(config: Config, start_services: bool = True) -> FastAPI:
    """Build the server. `start_services=False` leaves background loops stopped (tests drive them)."""
    host = config.ams.server_bind_host
    server_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{config.ams.http_server.bind_port}"

    metrics_registry = CollectorRegistry()  # the server's own metrics, not the process-wide default registry

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(config.database_url)
        db.migrate()
        ensure_seeds(db, config, server_url)
        metadata = MetadataService(db)
        refresh = config.ams.refresh_external_catalogs
        evaluating = config.ams.evaluator
        evaluator = TableEvaluator(
            db,
            evaluating.interval.total_seconds(),
            evaluating.thread_count,
            evaluating.recheck_interval.total_seconds(),
            metadata=metadata,
        )
        explorer = TableExplorer(
            db, refresh.interval.total_seconds(), refresh.thread_count, on_change=evaluator.wake, metadata=metadata
        )
        registry = ProcessRegistry([SelfOptimizingFactory(evaluator.cache), *maintenance_factories(evaluator.cache)])
        timeouts = config.ams.optimizer
        scheduler = ProcessScheduler(
            db, registry, on_table_done=evaluator.wake, metadata=metadata,
            retry_backoff=timeouts.task_retry_backoff, retry_backoff_max=timeouts.task_retry_backoff_max,
        )  # fmt: skip
        trigger = MaintenanceTrigger(db, scheduler, maintenance_schedules(config))
        evaluator.on_pending = scheduler.wake
        keeper = OptimizerKeeper(
            db,
            timeouts.heart_beat_timeout,
            timeouts.task_ack_timeout,
            timeouts.task_execute_timeout,
            on_released=scheduler.wake,
        )
        collector = DatabaseCollector(db)
        metrics_registry.register(collector)
        app.state.context = ServerContext(
            config=config,
            db=db,
            explorer=explorer,
            evaluator=evaluator,
            scheduler=scheduler,
            keeper=keeper,
            metadata=metadata,
            trigger=trigger,
        )
        maintainer = ResourceMaintainer(db, config, server_url)
        app.state.context.maintainer = maintainer
        dispatcher = EventDispatcher(explorer, evaluator)
        metadata.subscribe(dispatcher)
        if start_services:
            dispatcher.start()
        scheduler.recover()
        services = [explorer, evaluator, keeper, maintainer, trigger]
        if start_services:
            for service in services:
                service.start()
        log.info("lakewarden %s serving; system database %s", __version__, db.engine.url.render_as_string())
        try:
            yield
        finally:
            for service in services:
                service.stop()
            if start_services:
                dispatcher.stop()
            metrics_registry.unregister(collector)
            db.dispose()
            log.info("lakewarden stopped")

    app = FastAPI(
        title="lakewarden",
        version=__version__,
        description="Lakehouse table management for Apache Iceberg: self-optimizing, maintenance, REST catalog.",
        lifespan=lifespan,
    )
    errors.install(app)
    api = APIRouter(prefix="/api/v1")
    routers = (health_router, catalogs.router, groups.router, tables.router, optimizer.router, processes.router,
               events.router, overview.router)  # fmt: skip
    for router in routers:
        api.include_router(router)
    app.include_router(api)
    app.include_router(iceberg_rest.router)
    app.add_middleware(LatencyMiddleware, histogram=api_latency(metrics_registry))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus metrics: tables, processes, groups and maintenance from the database; API latency."""
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    app.mount("/dashboard", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    return app
