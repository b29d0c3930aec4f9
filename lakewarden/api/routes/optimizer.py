"""`/api/v1/optimizer`: the protocol optimizers speak — register, touch, poll, ack, complete.

An optimizer registers and gets a token; it touches (heartbeats) every 10 s, naming the tasks it runs
and hearing which of them to stop; each of its threads long-polls for a task (up to 3 s), acks it, runs
it, asks to commit, and completes it with a result or an error.
An ack or completion that names a superseded attempt is refused with 409. The messages are the
typed models of lakewarden/protocol/, which the optimizer imports too.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response

from lakewarden.api.auth import OPTIMIZER, Caller
from lakewarden.api.context import ServerContext, server_context
from lakewarden.domain.errors import Forbidden, InvalidField
from lakewarden.domain.groups import group_engines
from lakewarden.domain.security import Principal, Role
from lakewarden.protocol.messages import (
    Assignment,
    Completion,
    PollRequest,
    Registered,
    Registration,
    TaskKey,
    TaskRef,
    TokenRef,
    Touch,
    Touched,
)
from lakewarden.store import groups as group_store
from lakewarden.store import processes as store

router = APIRouter(prefix="/optimizer", tags=["optimizer protocol"])
Ctx = Annotated[ServerContext, Depends(server_context)]
HEARTBEAT_SECONDS = 10.0


def _own(principal: Principal, token: str) -> None:
    """An optimizer calls with its own token; an operator may act for any optimizer (tools, tests)."""
    if principal.optimizer_token is not None and principal.optimizer_token == token:
        return
    if principal.optimizer_token is None and principal.has_role(Role.OPERATOR):
        return
    raise Forbidden("the token in the body is not the caller's optimizer token")


@router.post("/register", response_model=Registered, **OPTIMIZER)
def register(body: Registration, ctx: Ctx, principal: Caller) -> Registered:
    """Needs a registration token of the group (what a container gives the optimizers it starts) or an
    operator's token; answers with the optimizer's own token for everything after."""
    if principal.register_group is not None and principal.register_group != body.group:
        raise Forbidden(f"this registration token is for group {principal.register_group!r}, not {body.group!r}")
    if principal.register_group is None and not principal.has_role(Role.OPERATOR):
        raise Forbidden(f"{principal.name} may not register optimizers (needs role operator)")
    with ctx.db.write() as session:
        if not group_store.group_exists(session, body.group):
            raise InvalidField("group", f"resource group {body.group!r} does not exist")
        group = group_store.get_group(session, body.group)
        missing = [e for e in group_engines(group.properties or {}) if e not in body.engines]
        if missing:
            raise InvalidField(
                "engines",
                f"group {body.group!r} runs the table services of {', '.join(missing)} tables: an optimizer of it "
                f"carries {' and '.join(missing)} (lakewarden optimizer {' '.join(f'--engine {e}' for e in missing)})",
            )
        row = store.register_optimizer(
            session, body.group, body.parallelism, body.resource_id, body.host, group.container
        )
        if body.spark is not None:
            row.properties = {
                "spark_application_id": body.spark.application_id,
                "spark_master": body.spark.master,
                "spark_ui_url": body.spark.ui_url,
            }
    # a heartbeat at least three times per heart-beat-timeout, however short an operator sets it
    every = min(HEARTBEAT_SECONDS, ctx.keeper.heartbeat_timeout.total_seconds() / 3)
    return Registered(token=row.token, heartbeat_seconds=every)


@router.post("/touch", response_model=Touched, **OPTIMIZER)
def touch(body: Touch, ctx: Ctx, principal: Caller) -> Touched:
    """A heartbeat; answers which of the tasks the optimizer runs it must stop (canceled, taken back), and
    whether its container asks it to leave."""
    _own(principal, body.token)
    running = [(t.process_id, t.task_id, t.attempt) for t in body.running]
    revoked, leave = ctx.dispatcher.heartbeat(body.token, running)
    return Touched(revoked=[TaskKey(process_id=p, task_id=t, attempt=a) for p, t, a in revoked], leave=leave)


@router.post("/unregister", status_code=204, **OPTIMIZER)
def unregister(body: TokenRef, ctx: Ctx, principal: Caller) -> Response:
    """An optimizer leaving cleanly; whatever it still held goes back to PLANNED at once."""
    _own(principal, body.token)
    with ctx.db.write() as session:
        store.get_optimizer(session, body.token)
    ctx.keeper.release(lost_tokens={body.token})
    return Response(status_code=204)


@router.post(
    "/poll",
    response_model=Assignment,
    responses={
        204: {
            "description": "no task within the timeout; with Retry-After when the node had too many polls waiting "
            "to let this one wait: poll again after that many seconds"
        }
    },
    **OPTIMIZER,
)
def poll(body: PollRequest, ctx: Ctx, principal: Caller) -> Any:
    _own(principal, body.token)
    assignment, retry_after = ctx.dispatcher.poll(body.token, body.thread_id, body.timeout_seconds)
    if assignment is not None:
        return assignment
    return Response(status_code=204, headers={"Retry-After": str(retry_after)} if retry_after else None)


@router.post("/ack", status_code=204, **OPTIMIZER)
def ack(body: TaskRef, ctx: Ctx, principal: Caller) -> Response:
    _own(principal, body.token)
    ctx.dispatcher.ack(body.token, body.process_id, body.task_id, body.attempt)
    return Response(status_code=204)


@router.post("/commit", status_code=204, **OPTIMIZER)
def commit(body: TaskRef, ctx: Ctx, principal: Caller) -> Response:
    """Asked by a task right before it commits: 204 lets it, 409 says its process was canceled or the task
    taken back, and it commits nothing."""
    _own(principal, body.token)
    ctx.dispatcher.grant_commit(body.token, body.process_id, body.task_id, body.attempt)
    return Response(status_code=204)


@router.post("/complete", status_code=204, **OPTIMIZER)
def complete(body: Completion, ctx: Ctx, principal: Caller) -> Response:
    _own(principal, body.token)
    if (body.output is None) == (body.error is None):
        raise InvalidField("output", "give exactly one of output and error")
    ctx.dispatcher.complete(body)
    return Response(status_code=204)
