"""`/api/v1/overview`: the numbers the dashboard's front page shows, in one call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from lakewarden.api.context import ServerContext, server_context
from lakewarden.domain.processes import Action
from lakewarden.domain.tables import TableStatus
from lakewarden.protocol.results import MAINTENANCE_TOTALS
from lakewarden.store import stats

router = APIRouter(tags=["overview"])
Ctx = Annotated[ServerContext, Depends(server_context)]


class Overview(BaseModel):
    tables: dict[str, int] = Field(description="total, and how many in each status")
    catalogs: dict[str, int] = Field(description="total and unhealthy")
    optimizing: dict[str, int] = Field(description="processes running and succeeded; files and bytes in and out")
    maintenance: dict[str, Any] = Field(description="processes per action; files deleted, bytes freed, …")
    optimizers: dict[str, int] = Field(description="optimizers, threads, busy and idle threads, queued tasks")
    usage: dict[str, float] = Field(
        description="What ended processes cost: Spark's figures (spark_cpu_ms, spark_run_ms, …) and `cost`"
    )
    currency: str


@router.get("/overview", response_model=Overview)
def overview(ctx: Ctx) -> Overview:
    with ctx.db.read() as session:
        statuses = stats.table_status_counts(session)
        catalogs = stats.catalog_health(session)
        totals = stats.process_totals(session)
        load = stats.group_load(session)
    tables = {"total": sum(statuses.values())}
    tables |= {TableStatus(code).label: n for code, n in sorted(statuses.items())}
    tables["optimizing"] = sum(n for code, n in statuses.items() if "optimizing" in TableStatus(code).label)
    optimizing = {
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "files_in": 0,
        "files_out": 0,
        "bytes_in": 0,
        "bytes_out": 0,
    }
    maintenance: dict[str, Any] = {"running": 0, "succeeded": 0, "failed": 0, **dict.fromkeys(MAINTENANCE_TOTALS, 0)}
    per_action: dict[str, int] = {}
    for row in totals:
        target = optimizing if row.action == Action.OPTIMIZING else maintenance
        key = {"running": "running", "success": "succeeded", "failed": "failed"}.get(row.status)
        if key:
            target[key] += row.count
        if row.action != Action.OPTIMIZING:
            per_action[row.action] = per_action.get(row.action, 0) + row.count
        if row.status == "success":
            fields = ("files_in", "files_out", "bytes_in", "bytes_out") if target is optimizing else MAINTENANCE_TOTALS
            for field in fields:
                target[field] += int(row.sums.get(field, 0))
    maintenance["by_action"] = per_action
    threads = sum(g.threads for g in load.values())
    busy = sum(g.busy for g in load.values())
    return Overview(
        tables=tables,
        catalogs={"total": len(catalogs), "unhealthy": sum(1 for _, h in catalogs if h == "unhealthy")},
        optimizing=optimizing,
        maintenance=maintenance,
        optimizers={
            "optimizers": sum(g.optimizers for g in load.values()),
            "threads": threads,
            "busy": busy,
            "idle": max(0, threads - busy),
            "queued_tasks": sum(g.queued for g in load.values()),
        },
        usage=stats.usage_of(totals),
        currency=ctx.config.ams.cost.currency,
    )
