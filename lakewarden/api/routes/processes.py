"""`/api/v1/processes`: the processes of every action (self-optimizing and maintenance) with their tasks; the files
an optimizing process changed, a page at a time; cancel a running process."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import Field

from lakewarden.api.auth import OPERATOR
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import ID_MAX, _Read
from lakewarden.domain.benefits import Benefit
from lakewarden.domain.costs import total_usage
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.security import optimizer_id
from lakewarden.domain.states import TASK_ACTIVE, ProcessStatus, TaskStatus
from lakewarden.domain.tables import TableIdentifier
from lakewarden.protocol.messages import FailureKind
from lakewarden.protocol.results import OptimizingResult
from lakewarden.store import process_files as process_file_store
from lakewarden.store import processes as store
from lakewarden.store import tables as table_store
from lakewarden.store.database import as_utc
from lakewarden.store.models import ProcessRow, TaskRow

router = APIRouter(prefix="/processes", tags=["processes"])
Ctx = Annotated[ServerContext, Depends(server_context)]
ProcessId = Annotated[int, Path(ge=1, le=ID_MAX)]


class TaskRead(_Read):
    task_id: int
    status: str
    type: str
    attempt: int
    retry_count: int
    partitions: list[str]
    optimizer: str | None
    scheduled_at: datetime | None
    acked_at: datetime | None
    ended_at: datetime | None
    output: dict[str, Any] | None
    error: str | None
    failure: str | None = Field(
        description="With an error, its kind: conflict (lost a race with a concurrent commit; retried after the "
        "base back-off), transient (retried after a growing back-off) or final (not retried)"
    )
    retryable: bool | None = Field(description="With an error: whether a retry may pass (else not retried)")
    retry_after: datetime | None = Field(description="A retried task waits until then (back-off)")
    usage: dict[str, Any] | None = Field(
        description="What Spark measured of its attempts (failed ones included), added up, and their cost"
    )
    diagnosis: dict[str, Any] | None = Field(
        description="With an error: its class (error_class), its root cause as one line, and a hint for the "
        "common ones (a conflict with a concurrent writer, a missing file, out of memory, …)"
    )


class ProcessRead(_Read):
    process_id: int
    table: str
    group: str
    action: str
    type: str
    status: str
    target_snapshot_id: int | None
    start_time: datetime
    end_time: datetime | None
    duration_ms: int | None
    summary: dict[str, Any]
    fail_reason: str | None
    stage: str = Field(description="Where a running process is: its tasks by state; else its status")
    threads_in_use: int = Field(description="Optimizer threads its tasks hold now")
    input_bytes: int = Field(description="Bytes its tasks read (planned cost)")
    usage: dict[str, Any] = Field(
        description="What Spark measured of its tasks' attempts so far (executor CPU and run time, bytes and "
        "records read and written, peak execution memory, Spark tasks) and their cost at the group's price"
    )
    currency: str = Field(description="What `cost` is counted in (the server's `cost.currency`)")
    scheduling: dict[str, Any] | None = Field(
        description="Self-optimizing: why the group's policy picked this table — the policy's numbers for it and "
        "the runner-up (quota share used, seconds since last optimized) and a sentence — and since when the table "
        "was pending (`pending_since`)"
    )
    diagnosis: dict[str, Any] | None = Field(
        description="A failed process: the diagnosis of the task that failed it (class, root cause, hint)"
    )
    benefit: Benefit | None = Field(
        None,
        description="A successful optimizing process: what it bought — its table's scans in the day before it "
        "against those since (files, delete files and bytes per scan), beside its CPU-seconds, and a sentence; "
        "settled a day after it ended or when the table's next optimizing process started",
    )
    tasks: list[TaskRead]


def _stage(process: ProcessRow, tasks: list[TaskRow]) -> str:
    if process.status != ProcessStatus.RUNNING:
        return process.status
    running = sum(1 for t in tasks if t.status in TASK_ACTIVE)
    planned = sum(1 for t in tasks if t.status in (TaskStatus.PLANNED, TaskStatus.FAILED))
    done = sum(1 for t in tasks if t.status == TaskStatus.SUCCESS)
    parts = [f"{n} {label}" for n, label in ((running, "running"), (planned, "waiting"), (done, "done")) if n]
    return ", ".join(parts) or "settling"


def _read(process: ProcessRow, tasks: list[TaskRow], currency: str, benefit: Benefit | None = None) -> ProcessRead:
    end = process.end_time
    return ProcessRead(
        process_id=process.process_id,
        table=f"{process.catalog_name}.{process.db_name}.{process.table_name}",
        group=process.group_name,
        action=process.action,
        type=process.type,
        status=process.status,
        target_snapshot_id=process.target_snapshot_id,
        start_time=process.plan_time,
        end_time=end,
        duration_ms=None if end is None else int((as_utc(end) - as_utc(process.plan_time)).total_seconds() * 1000),
        summary=process.summary,
        fail_reason=process.fail_reason,
        stage=_stage(process, tasks),
        threads_in_use=sum(1 for t in tasks if t.status in TASK_ACTIVE),
        input_bytes=sum(t.cost_bytes for t in tasks),
        usage=total_usage([t.usage for t in tasks]),
        currency=currency,
        scheduling=(process.summary or {}).get("scheduling"),
        diagnosis=(process.summary or {}).get("failure"),
        benefit=benefit,
        tasks=[
            TaskRead(
                task_id=t.task_id,
                status=t.status,
                type=t.type,
                attempt=t.attempt,
                retry_count=t.retry_count,
                partitions=[p["path"] or "(unpartitioned)" for p in t.partitions],
                optimizer=None if t.optimizer_token is None else optimizer_id(t.optimizer_token),
                scheduled_at=t.scheduled_at,
                acked_at=t.acked_at,
                ended_at=t.ended_at,
                output=t.output,
                error=t.error,
                failure=t.failure,
                retryable=None if t.failure is None else t.failure != FailureKind.FINAL,
                retry_after=t.retry_after,
                usage=t.usage,
                diagnosis=t.diagnosis,
            )
            for t in tasks
        ],
    )


@router.get("", response_model=list[ProcessRead])
def list_processes(
    ctx: Ctx,
    table: str | None = None,
    action: Annotated[str | None, Query(description="optimizing, expire-snapshots, clean-orphan-files, …")] = None,
    status: Annotated[str | None, Query(description="running, success, failed or canceled")] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
) -> list[ProcessRead]:
    """Processes of every action, newest first; `table=catalog.database.table` limits to one table."""
    if action is not None:
        action = ctx.engine.registry.factory(action).action.value  # an unknown action is a 400
    if status is not None and status not in {s.value for s in ProcessStatus}:
        raise InvalidField("status", f"{status!r} is not one of {', '.join(s.value for s in ProcessStatus)}")
    with ctx.db.read() as session:
        table_id = None
        if table is not None:
            table_id = table_store.get_table(session, TableIdentifier.parse(table)).runtime.table_id
        processes = store.list_processes(session, table_id, limit, action=action, status=status)
        tasks = store.tasks_of_each(session, [p.process_id for p in processes])
        currency, reads = ctx.config.ams.cost.currency, ctx.reads
        benefits = reads.benefits(session, processes)
        return [_read(p, tasks[p.process_id], currency, b) for p, b in zip(processes, benefits, strict=True)]


@router.get("/{process_id}", response_model=ProcessRead)
def get_process(process_id: ProcessId, ctx: Ctx) -> ProcessRead:
    with ctx.db.read() as session:
        process, tasks = store.get_process(session, process_id), store.tasks_of(session, process_id)
        benefit = ctx.reads.benefit(session, process)
        return _read(process, tasks, ctx.config.ams.cost.currency, benefit)


class ProcessFile(_Read):
    task_id: int
    kind: str = Field(description=f"One of {', '.join(OptimizingResult.FILES)}")
    path: str


class ProcessFiles(_Read):
    total: int = Field(description="How many files there are in all (of the kind asked for)")
    offset: int
    files: list[ProcessFile] = Field(description="The page, in the order the tasks reported them")


@router.get("/{process_id}/files", response_model=ProcessFiles)
def process_files(
    process_id: ProcessId,
    ctx: Ctx,
    kind: Annotated[str | None, Query(description=f"Only one kind: {', '.join(OptimizingResult.FILES)}")] = None,
    offset: Annotated[int, Query(ge=0, le=ID_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> ProcessFiles:
    """The files an optimizing process changed: data files rewritten and written, delete files removed and
    written (up to 20,000 of each kind a task; the process's summary counts them all)."""
    if kind is not None and kind not in OptimizingResult.FILES:
        raise InvalidField("kind", f"{kind!r} is not one of {', '.join(OptimizingResult.FILES)}")
    with ctx.db.read() as session:
        store.get_process(session, process_id)  # a 404 for a process that does not exist
        rows, total = process_file_store.process_files(session, process_id, kind, offset, limit)
    return ProcessFiles(
        total=total,
        offset=offset,
        files=[ProcessFile(task_id=r.task_id, kind=r.kind, path=r.path) for r in rows],
    )


@router.post("/{process_id}/cancel", response_model=ProcessRead, **OPERATOR)
def cancel_process(process_id: ProcessId, ctx: Ctx) -> ProcessRead:
    ctx.engine.cancel(process_id)
    return get_process(process_id, ctx)
