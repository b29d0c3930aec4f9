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
from lakewarden.services.scheduler import ProcessScheduler
from lakewarden.store.database import Database

if TYPE_CHECKING:
    from lakewarden.services.containers import ResourceMaintainer
    from lakewarden.services.maintenance import MaintenanceTrigger


@dataclass
class ServerContext:
    config: Config
    db: Database
    explorer: TableExplorer
    evaluator: TableEvaluator
    scheduler: ProcessScheduler
    keeper: OptimizerKeeper
    metadata: MetadataService
    trigger: MaintenanceTrigger | None = None
    maintainer: ResourceMaintainer | None = None


def server_context(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.context
    return ctx
