"""`/api/v1/optimizer`: the protocol optimizers speak — register, touch, poll, ack, complete.

An optimizer registers and gets a token; it touches (heartbeats) every 10 s; each of its threads
long-polls for a task (up to 3 s), acks it, runs it and completes it with a result or an error.
An ack or completion that names a superseded attempt is refused with 409.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from lakewarden.api.context import ServerContext, server_context
from lakewarden.domain.errors import InvalidField
from lakewarden.store import groups as group_store
from lakewarden.store import optimizing as store

router = APIRouter(prefix="/optimizer", tags=["optimizer protocol"])
Ctx = Annotated[ServerContext, Depends(server_context)]
MAX_POLL_SECONDS = 3.0


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Register(_Body):
    group: str
    parallelism: int = Field(ge=1, le=1024)
    resource_id: str | None = Field(None, description="Set by a container that started this optimizer")
    host: str | None = None


class Registered(BaseModel):
    token: str
    heartbeat_seconds: float


class Token(_Body):
    token: str


class Poll(Token):
    thread_id: int = Field(ge=0)
    timeout_seconds: float = Field(MAX_POLL_SECONDS, ge=0, le=MAX_POLL_SECONDS)


class TaskRef(Token):
    process_id: int
    task_id: int
    attempt: int


class Complete(TaskRef):
    output: dict[str, Any] | None = Field(None, description="files_in, bytes_in, files_out, bytes_out, …")
    error: str | None = None
    retryable: bool = Field(
        True,
        description="With an error: whether running the task again may pass (a conflict, I/O) or it "
        "fails the same way every time (an invalid argument, a forbidden setting): then the process fails at once",
    )


class Assigned(BaseModel):
    process_id: int
    task_id: int
    attempt: int
    type: str
    input: dict[str, Any]
    catalog: dict[str, Any] = Field(description="name, type and connection properties of the table's catalog")


@router.post("/register", response_model=Registered)
def register(body: Register, ctx: Ctx) -> Registered:
    with ctx.db.write() as session:
        if not group_store.group_exists(session, body.group):
            raise InvalidField("group", f"resource group {body.group!r} does not exist")
        group = group_store.get_group(session, body.group)
        row = store.register_optimizer(
            session, body.group, body.parallelism, body.resource_id, body.host, group.container
        )
    return Registered(token=row.token, heartbeat_seconds=10.0)


@router.post("/touch", status_code=204)
def touch(body: Token, ctx: Ctx) -> Response:
    with ctx.db.write() as session:
        store.touch_optimizer(session, body.token)
    return Response(status_code=204)


@router.post("/unregister", status_code=204)
def unregister(body: Token, ctx: Ctx) -> Response:
    """An optimizer leaving cleanly; whatever it still held goes back to PLANNED at once."""
    with ctx.db.write() as session:
        store.get_optimizer(session, body.token)
    ctx.keeper.release(lost_tokens={body.token})
    return Response(status_code=204)


@router.post("/poll", response_model=Assigned, responses={204: {"description": "no task within the timeout"}})
def poll(body: Poll, ctx: Ctx) -> Any:
    assignment = ctx.scheduler.poll(body.token, body.thread_id, body.timeout_seconds)
    if assignment is None:
        return Response(status_code=204)
    return Assigned(
        process_id=assignment.process_id,
        task_id=assignment.task_id,
        attempt=assignment.attempt,
        type=assignment.type,
        input=assignment.input,
        catalog={
            "name": assignment.catalog.name,
            "type": assignment.catalog.type,
            "properties": dict(assignment.catalog.properties),
        },
    )


@router.post("/ack", status_code=204)
def ack(body: TaskRef, ctx: Ctx) -> Response:
    ctx.scheduler.ack(body.token, body.process_id, body.task_id, body.attempt)
    return Response(status_code=204)


@router.post("/complete", status_code=204)
def complete(body: Complete, ctx: Ctx) -> Response:
    if (body.output is None) == (body.error is None):
        raise InvalidField("output", "give exactly one of output and error")
    ctx.scheduler.complete(
        body.token, body.process_id, body.task_id, body.attempt, body.output, body.error, body.retryable
    )
    return Response(status_code=204)
