"""What the routes need from the running server, handed over through `app.state`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from lakewarden.config import Config
from lakewarden.services.evaluation import TableEvaluator
from lakewarden.services.explorer import TableExplorer
from lakewarden.services.keeper import OptimizerKeeper
from lakewarden.services.metadata_service import MetadataService
from lakewarden.services.scheduler import OptimizingScheduler
from lakewarden.store.database import Database

if TYPE_CHECKING:
    from lakewarden.services.containers import ResourceMaintainer


@dataclass
class ServerContext:
    config: Config
    db: Database
    explorer: TableExplorer
    evaluator: TableEvaluator
    scheduler: OptimizingScheduler
    keeper: OptimizerKeeper
    metadata: MetadataService
    maintainer: ResourceMaintainer | None = None


def server_context(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.context
    return ctx
