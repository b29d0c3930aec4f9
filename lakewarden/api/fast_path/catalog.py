"""The REST catalog's requests served in one step from the application's root.

A catalog request passes fourteen ASGI layers, which together cost a cached loadTable as much as its own work.
`CatalogFastPath` makes each layer's checks in their order, runs the route's plan and answers errors with the
application's handlers; whatever a layer does more than check (an idempotency key, a chunked body, an audited
change) goes down the chain. It is built from the middleware stack at start, and a stack it does not know
refuses to start (UnknownChain). docs/architecture.md describes it; tests/test_catalog_fast_path.py compares."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response

from lakewarden._compat.fastapi import (
    EFFECTIVE_ROUTE,
    FASTAPI_SCOPE,
    INCLUDED_ROUTER,
    AppBodyLimitMiddleware,
    ExceptionTelemetryMiddleware,
    native_telemetry_on,
)
from lakewarden._compat.starlette import exception_handlers, is_async_callable, lookup_exception_handler
from lakewarden.api.fast_path.lean_routes import LeanRoute, Plan
from lakewarden.api.fast_path.routing import PrefixRouter
from lakewarden.api.forwarding import LeaderForwarding, leaders_request
from lakewarden.api.idempotency import HEADER as IDEMPOTENCY_KEY
from lakewarden.api.idempotency import IdempotencyKeys
from lakewarden.api.metrics import UNMATCHED, LatencyMiddleware
from lakewarden.api.middleware import (
    SAFE_METHODS,
    AuditLog,
    BodyLimit,
    CatalogAtRoot,
    CommitShedding,
    JavaPathDecoding,
    _audited,
    catalog_at_root,
    java_decoded,
)
from lakewarden.api.threads import in_thread

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)

# the chain flattened, from the outside in: Starlette's and FastAPI's layers around and inside the application's
# own (api/app.py adds those). Three do nothing for a request the fast path takes: FastAPI's telemetry and body
# limit (the fast path is off when either is set) and its exit stack (closed files of forms, which a plan has none
# of); the others' checks are made by `serve`, or their work is why a request goes down the chain
CHAIN = (
    ServerErrorMiddleware,
    ExceptionTelemetryMiddleware,
    AppBodyLimitMiddleware,
    CatalogAtRoot,
    JavaPathDecoding,
    LeaderForwarding,
    LatencyMiddleware,
    CommitShedding,
    IdempotencyKeys,
    BodyLimit,
    AuditLog,
    ExceptionMiddleware,
    AsyncExitStackMiddleware,
)
CONTENT_LENGTH = b"content-length"
Taken = tuple[Any, Any, Plan, bytes]


class UnknownChain(RuntimeError):
    """The application's layers or routes are not those the fast path flattens."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what}: the REST catalog's fast path (api/fast_path/catalog.py) flattens the chain of CHAIN exactly; "
            "give it the new layer's checks (and tests/test_catalog_fast_path.py a request that needs them), or "
            "leave the layers as they are"
        )


class CatalogFastPath:
    def __init__(self, app: FastAPI, layers: dict[type, Any], catalog: PrefixRouter, included: Any):
        self.app = app
        self.catalog = catalog
        self.included = included  # the catalog router as the application includes it (FastAPI's _IncludedRouter)
        self.under = catalog.prefix + "/"
        self.latency: LatencyMiddleware = layers[LatencyMiddleware]
        self.shedding: CommitShedding = layers[CommitShedding]
        self.body_limit: BodyLimit = layers[BodyLimit]
        self.server_errors: ServerErrorMiddleware = layers[ServerErrorMiddleware]  # the handler of Exception
        errors: ExceptionMiddleware = layers[ExceptionMiddleware]
        self.exception_handlers, self.status_handlers = exception_handlers(errors)

    @classmethod
    def of(cls, app: FastAPI, catalog: PrefixRouter) -> CatalogFastPath | None:
        """The fast path of `app`'s middleware stack (built if it is not yet); None (every request down the chain)
        when a setting asks for what it does not do: debug answers, a root path, FastAPI's telemetry. A chain it
        does not know (a layer added, removed or moved; the catalog's router not where it is looked for) is a
        mistake in the code, not a setting: UnknownChain, so that every test of a server fails on it."""
        if app.middleware_stack is None:
            app.middleware_stack = app.build_middleware_stack()
        layers: dict[type, Any] = {}
        layer: Any = app.middleware_stack
        while layer is not app.router:
            if type(layer) in layers or len(layers) == len(CHAIN) or type(layer) is not CHAIN[len(layers)]:
                raise UnknownChain(f"the middleware stack holds {type(layer).__name__} where the fast path has none")
            layers[type(layer)] = layer
            layer = layer.app
        if len(layers) != len(CHAIN):
            raise UnknownChain(f"the middleware stack lacks {CHAIN[len(layers)].__name__}")
        routes = app.router.routes
        position = next((i for i, r in enumerate(routes) if getattr(r, "original_router", None) is catalog), None)
        if position is None:
            raise UnknownChain("the catalog's router is not included at the application's root")
        for before in routes[:position]:  # a route tried first must not take a catalog path
            if not _apart(before, catalog.prefix + "/"):
                raise UnknownChain(f"a route before the catalog's may take its paths: {before!r}")
        if app.debug or app.root_path or native_telemetry_on(app):
            log.warning("the REST catalog's requests go through every layer: debug, a root path or telemetry is set")
            return None
        return cls(app, layers, catalog, routes[position])

    def take(self, scope: Any) -> Taken | None:
        """The request's scope as its route will see it, its route's effective context and plan, and its
        Content-Length (a change's); None when the request goes down the chain. Nothing is changed in `scope`
        unless the request is taken."""
        path: str = scope["path"]
        if path.startswith("/v1/"):
            scope = catalog_at_root(scope)
        elif not path.startswith(self.under):
            return None
        scope = java_decoded(scope)
        method: str = scope["method"]
        if scope.get("root_path") or leaders_request(method, scope["path"]):
            return None
        length = b""
        if method not in SAFE_METHODS:
            for name, value in scope["headers"]:
                if name == CONTENT_LENGTH:
                    length = value
                elif name == IDEMPOTENCY_KEY and method in ("POST", "DELETE"):
                    return None
            if not length:
                return None
        index = self.catalog.index_of(self.included)
        found = index.select(method, scope["path"], scope) if index is not None else None
        if found is None:
            return None
        context, child_scope = found
        planned = LeanRoute.planned(context)
        if planned is None:
            return None
        route, plan = planned
        if getattr(route.dependency_overrides_provider, "dependency_overrides", None):
            return None
        if method not in SAFE_METHODS and _audited(method, context.path_format):
            return None
        scope["app"] = self.app
        scope.setdefault("router", self.app.router)
        scope["starlette.exception_handlers"] = (self.exception_handlers, self.status_handlers)
        scope.update(child_scope)
        scope[FASTAPI_SCOPE] = {INCLUDED_ROUTER: self.included, EFFECTIVE_ROUTE: context}
        scope["route"] = context.original_route
        return scope, context, plan, length

    async def serve(self, taken: Taken, receive: Any, send: Any) -> None:
        """The request `take` took, answered as the chain answers it. An exception while the answer is sent
        (the client gone) is raised to the server, as the chain's layers raise it once an answer started."""
        scope, context, plan, length = taken
        method = scope["method"]
        started = time.perf_counter()
        status = 500  # as LatencyMiddleware records a request that sent nothing
        template = context.path_format
        try:
            refused = self.shedding.refusal(scope) if method == "POST" else None
            if refused is None and method not in SAFE_METHODS and self.body_limit.too_large(length):
                refused = self.body_limit.refusal()
            if refused is not None:  # answered before the router in the chain: no route recorded
                status, template = refused.status_code, UNMATCHED
                await refused(scope, receive, send)
                return
            request = Request(scope, receive, send)
            try:
                response = await plan.handle(request)
            except Exception as exc:
                response = await self._handled(request, exc, send)
            status = response.status_code
            await response(scope, receive, send)
        finally:
            self.latency.observe(method, template, status, time.perf_counter() - started)

    async def _handled(self, request: Request, exc: Exception, send: Any) -> Response:
        """The answer to `exc` from the application's handlers, looked up as ExceptionMiddleware looks them up;
        an exception no handler takes is answered by the handler of `Exception` and raised again, as
        ServerErrorMiddleware does (the server logs it)."""
        handler = self.status_handlers.get(exc.status_code) if isinstance(exc, HTTPException) else None
        if handler is None:
            handler = lookup_exception_handler(self.exception_handlers, exc)
        if handler is None:
            last = self.server_errors.handler
            if last is None:
                response = self.server_errors.error_response(request, exc)
            else:
                response = await _call(last, request, exc)
            await response(request.scope, request.receive, send)
            raise exc
        response = await _call(handler, request, exc)
        exc.__traceback__ = None  # as Starlette: a handled exception kept by its raiser keeps no frames
        return response


def _apart(route: Any, under: str) -> bool:
    """Whether `route` takes no path under `under` (a prefix ending with "/"): a router by prefix under another
    prefix (neither within the other), or a route of one fixed path (FastAPI's /openapi.json, /docs)."""
    other = getattr(route, "original_router", None)
    if isinstance(other, PrefixRouter):
        theirs = other.prefix + "/"
        return not theirs.startswith(under) and not under.startswith(theirs)
    path = getattr(route, "path", None)
    if not isinstance(path, str) or getattr(route, "param_convertors", True) or not path.startswith("/"):
        return False
    return not (path + "/").startswith(under)


async def _call(handler: Any, request: Request, exc: Exception) -> Response:
    if is_async_callable(handler):
        response: Response = await handler(request, exc)
    else:
        response = await in_thread(handler, request, exc)
    return response
