"""ASGI middleware of the server: request bodies bounded, every change recorded in the audit log, the REST
catalog's paths decoded as Java clients encode them, and commits shed cheaply when their table's line is full."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_plus

from starlette.requests import Request
from starlette.responses import Response

from lakewarden.api.auth import caller
from lakewarden.api.errors import error_response
from lakewarden.api.metrics import StatusOf, _template
from lakewarden.api.threads import in_thread
from lakewarden.domain.errors import LakewardenError
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.store import security as store
from lakewarden.store.database import Database
from lakewarden.store.rest_catalog import SEP

log = logging.getLogger(__name__)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CatalogAtRoot:
    """The REST catalog also answers at `/v1/…`, for clients configured with the server's root as their
    catalog URI (as Iceberg's reference server serves it, and as pyiceberg's own integration tests assume).
    The request continues as the `/iceberg/v1/…` one: the same routes, checks, forwarding and audit."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            scope = catalog_at_root(scope)
        await self.app(scope, receive, send)


def catalog_at_root(scope: Any) -> Any:
    """The scope of a `/v1/…` request as the `/iceberg/v1/…` one."""
    raw = scope.get("raw_path")
    return {**scope, "path": "/iceberg" + scope["path"], "raw_path": b"/iceberg" + raw if raw else raw}


class JavaPathDecoding:
    """Iceberg's Java REST client (Spark, Trino, Flink) encodes path segments with `URLEncoder`, which writes a
    space as `+`; Iceberg's own server decodes them with `URLDecoder`. So are `/iceberg/v1` paths here: from
    the raw path, `+` is a space and `%2B` a plus (pyiceberg encodes both as `%20` and `%2B`: the same)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(java_decoded(scope) if scope["type"] == "http" else scope, receive, send)


def java_decoded(scope: Any) -> Any:
    """The scope of an HTTP request with its `/iceberg/v1` path decoded as Java encodes it (itself if unchanged)."""
    raw = scope.get("raw_path")
    if raw and b"+" in raw and scope["path"].startswith("/iceberg/v1/"):
        segments = raw.decode("latin-1").split("/")
        return {**scope, "path": "/".join(unquote_plus(segment, encoding="utf-8") for segment in segments)}
    return scope


class BodyLimit:
    """Refuses a request whose body is larger than `max_bytes` with 413: by its Content-Length before reading
    it, or, for a body sent in chunks, as soon as what arrived passes the limit (nothing more is read)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if self.too_large(declared):
                await self.refusal()(scope, receive, send)
                return
            await self.app(scope, receive, send)  # the server stops at the declared length
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self.refusal()(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def too_large(self, declared: bytes) -> bool:
        """Whether a body of this Content-Length is refused."""
        return declared.isdigit() and int(declared) > self.max_bytes

    def refusal(self) -> Response:
        message = f"request body larger than {self.max_bytes} bytes (ams.http-server.max-body-size)"
        return error_response(413, message, "RequestEntityTooLargeException")


# recorded by their routes with richer details, or not changes of the system (the optimizer protocol,
# signing in and out); commits to tables are on the commit timeline, not here
_NOT_AUDITED = ("/api/v1/principals", "/api/v1/tokens", "/api/v1/optimizer/", "/api/v1/session", "/iceberg/v1/oauth/")


def _audited(method: str, template: str) -> bool:
    if method in SAFE_METHODS or template.startswith(_NOT_AUDITED):
        return False
    if template.startswith("/iceberg/v1/"):
        # namespaces and tables created, dropped, renamed, registered; not commits nor metric reports; nor scan
        # planning, which reads (a plan, its tasks fetched, a plan cancelled: a row each would be a write per read)
        if template.endswith(("/tables/{table}/plan", "/plan/{plan_id}", "/tables/{table}/tasks")):
            return False
        return not (
            template.endswith(("/tables/{table}", "/metrics", "/transactions/commit", "/properties"))
            and method == "POST"
        )
    return template.startswith("/api/v1/")


class AuditLog:
    """After a change succeeded (status < 400), records who made it: the route, its path parameters, the
    caller and their address (`GET /api/v1/audit`). The answer has gone out by then: a row that cannot be
    written (the database away) is logged as an error naming the change."""

    def __init__(self, app: Any, db_of: Any) -> None:
        self.app = app
        self.db_of = db_of  # () -> Database: the running server's, once its lifespan started

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        sending = StatusOf(send)
        await self.app(scope, receive, sending)
        status = sending.status
        template = _template(scope)
        if status >= 400 or not _audited(scope["method"], template):
            return
        principal = getattr((scope.get("state") or {}).get("principal"), "name", "anonymous")
        params = {k: str(v).replace("\x1f", ".") for k, v in (scope.get("path_params") or {}).items()}
        target = "/".join(params.values()) or template
        client = scope.get("client")
        address = client[0] if client else None
        db: Database = self.db_of()
        action = f"{scope['method']} {template}"

        def record() -> None:
            with db.write(any_node=True) as session:
                store.audit(session, principal, action, target, {"status": status, **params}, address)

        try:
            await in_thread(record)
        except Exception as exc:  # the change was made and answered: what failed is its record, said so
            log.error(
                "%s (%s, by %s) was made, but its audit row could not be written: %s", action, target, principal, exc
            )


# a commit to one table (POST .../namespaces/{namespace}/tables/{table}), once JavaPathDecoding decoded the path
_COMMIT = re.compile(r"^/iceberg/v1/(?P<prefix>[^/]+)/namespaces/(?P<namespace>[^/]+)/tables/(?P<table>[^/]+)$")


class CommitShedding:
    """A commit that would find its table's line full (services/rest_catalog/commit_queue.py) is refused here,
    before its body is read and parsed and before it reaches a route: under a burst the refusals stay cheap, and
    the commits in line keep the server's time. Only a caller the server authenticates is refused this way (an
    unknown one goes on, to be refused as such); the line is checked again at the route, which refuses what this
    let through."""

    def __init__(self, app: Any, queue_of: Callable[[], CommitQueue | None]) -> None:
        self.app = app
        self.queue_of = queue_of

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        refused = self.refusal(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Any) -> Response | None:
        """The 503 for a POST that is a commit to a table whose line is full; None for any other request."""
        found = _COMMIT.match(scope["path"])
        queue = self.queue_of() if found else None
        if not found or queue is None:
            return None
        key = (found["prefix"], *found["namespace"].split(SEP), found["table"])
        if not queue.full(key) or not _authenticated(Request(scope)):
            return None
        retry_after = queue.refuse(key)
        response = error_response(
            503, f"too many commits are waiting for {'.'.join(key)}: try again shortly", "ServiceUnavailableException"
        )
        response.headers["Retry-After"] = str(retry_after)
        return response


def _authenticated(request: Request) -> bool:
    try:
        caller(request)
    except LakewardenError:
        return False
    return True
