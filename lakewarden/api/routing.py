"""Routing by prefix first: the server's two APIs, `/api/v1` (management) and `/iceberg/v1` (the REST
catalog), are each one router at the application's root, and a request is offered to a router's routes
only when its path is under that router's prefix.

FastAPI tries an application's routes one after the other, and each try costs a few microseconds (a
regular expression and FastAPI's bookkeeping in the scope). With some ninety routes, a catalog request
used to pass the whole management API first: about a third of a cached loadTable's time on this machine
(`bench/rest_catalog.py`). One string comparison per API now stands in for those tries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import fastapi.routing
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette._utils import get_route_path  # what FastAPI and Starlette match routes against
from starlette.routing import Match


class PrefixRouter(APIRouter):
    """An `APIRouter` that answers "no match" at once for a path outside its prefix. For routers included
    at the application's root with no further prefix (what the prefix means once included elsewhere is
    the including router's business, so it is not checked there)."""

    def __init__(self, prefix: str, **kwargs: Any) -> None:
        if not prefix:
            raise ValueError("a PrefixRouter needs a prefix")
        super().__init__(prefix=prefix, **kwargs)
        self._under = prefix + "/"

    def matches(self, scope: Any) -> tuple[Match, Any]:
        if scope.get("type") in ("http", "websocket"):
            path = get_route_path(scope)
            if path != self.prefix and not path.startswith(self._under):
                return Match.NONE, {}
        return super().matches(scope)


def prepare_routes(app: FastAPI, prefixes: Iterable[str]) -> None:
    """FastAPI prepares a router's routes (their parameters' and answers' models) the first time a request is
    matched against them, and the first request under a prefix paid for all of its routes: 0.1-0.5 s for the
    REST catalog's. Matching, once at start, a path under each prefix that no route takes prepares every route
    on the way before the server takes requests."""
    for prefix in prefixes:
        path = f"{prefix}/\x00prepare"  # no route takes a NUL
        scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [], "query_string": b""}
        for route in app.router.routes:
            route.matches(scope)
    _endpoint_contexts(app.routes)


def _endpoint_contexts(routes: Iterable[Any]) -> None:
    """FastAPI also finds an endpoint's source file and line (for its error messages) on the endpoint's first
    request, reading and tokenizing its module's source (fastapi.routing._extract_endpoint_context, pinned with
    fastapi in requirements.lock; skipped should a version drop it): done here for every endpoint."""
    extract = getattr(fastapi.routing, "_extract_endpoint_context", None)
    if extract is None:
        return
    for route in routes:
        endpoint = getattr(route, "endpoint", None)
        if isinstance(route, APIRoute) and endpoint is not None:
            extract(endpoint)
        included = getattr(route, "original_router", route)  # FastAPI keeps an included router as such
        _endpoint_contexts(getattr(included, "routes", ()))
