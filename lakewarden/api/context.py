"""What the routes need from the running server, handed over through `app.state`."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from lakewarden.config import Config
from lakewarden.services.evaluation import TableEvaluator
from lakewarden.services.explorer import TableExplorer
from lakewarden.services.keeper import OptimizerKeeper
from lakewarden.services.scheduler import OptimizingScheduler
from lakewarden.store.database import Database


@dataclass
class ServerContext:
    config: Config
    db: Database
    explorer: TableExplorer
    evaluator: TableEvaluator
    scheduler: OptimizingScheduler
    keeper: OptimizerKeeper


def server_context(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.context
    return ctx
