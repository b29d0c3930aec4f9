"""Routing by prefix first, then by one regular expression.

The server's two APIs, `/api/v1` and `/iceberg/v1`, are each one router at the application's root, and a request
is offered only to the router its path is under: FastAPI would try the management API's routes one by one first.
Within the catalog's router, a `RouteIndex` finds the route with one match of one regular expression per method
(every route's pattern, in order, as alternatives), so it finds the route FastAPI would; what it does not find
goes FastAPI's way."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Match

from lakewarden._compat.fastapi import (
    EFFECTIVE_ROUTE,
    FASTAPI_SCOPE,
    INCLUDED_ROUTER,
    extract_endpoint_context,
    route_selected,
    routes_version,
    update_scope,
)
from lakewarden._compat.starlette import get_route_path

SELECTED = "lakewarden.selected"  # in FastAPI's part of the scope: what a PrefixRouter's index chose, for handle()
_GROUP = re.compile(r"\(\?P<[^>]+>")
# a method's routes as one pattern: the pattern, the routes (effective contexts), each route's parameters (name,
# group in the pattern, convertor)
Compiled = tuple[re.Pattern[str] | None, list[Any], list[list[tuple[str, int, Any]]]]


class PrefixRouter(APIRouter):
    """An `APIRouter` that answers "no match" at once for a path outside its prefix. For routers included
    at the application's root with no further prefix (what the prefix means once included elsewhere is
    the including router's business, so it is not checked there). `indexed`: within the prefix, a route is
    found by the router's `RouteIndex` (the REST catalog); else by FastAPI's own walk (the management API)."""

    def __init__(self, prefix: str, indexed: bool = True, **kwargs: Any) -> None:
        if not prefix:
            raise ValueError("a PrefixRouter needs a prefix")
        super().__init__(prefix=prefix, **kwargs)
        self._under = prefix + "/"
        self.indexed = indexed

        self._indexes: dict[int, RouteIndex] = {}  # by the included router's id (one per inclusion)

    def matches(self, scope: Any) -> tuple[Match, Any]:
        if scope.get("type") in ("http", "websocket"):
            path = get_route_path(scope)
            if path != self.prefix and not path.startswith(self._under):
                return Match.NONE, {}
            fastapi_scope = scope.get(FASTAPI_SCOPE) or {}
            index = self.index_of(fastapi_scope.get(INCLUDED_ROUTER)) if scope["type"] == "http" else None
            found = index.select(scope["method"], path, scope) if index is not None else None
            if found is not None:
                scope.setdefault(FASTAPI_SCOPE, {})[SELECTED] = (self, *found)
                return Match.FULL, {}
        return super().matches(scope)

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        """The route the index chose, handled as FastAPI handles a route it chose (`_handle_selected`)."""
        fastapi_scope = scope.get(FASTAPI_SCOPE) or {}
        selected = fastapi_scope.pop(SELECTED, None)
        if selected is None or selected[0] is not self:
            await super().handle(scope, receive, send)
            return
        _, context, child_scope = selected
        update_scope(scope, child_scope)
        route_selected(scope=scope, path=context.path_format)
        scope[FASTAPI_SCOPE][EFFECTIVE_ROUTE] = context
        scope["route"] = context.original_route
        await context.original_route.handle(scope, receive, send)

    def index_of(self, included: Any) -> RouteIndex | None:
        """The index of this router as `included` (FastAPI's `_IncludedRouter`), built on first use and again
        whenever the router's routes change; None where it cannot stand in for FastAPI's matching."""
        if not self.indexed or included is None or getattr(included, "original_router", None) is not self:
            return None
        index = self._indexes.get(id(included))
        if index is None or not index.current():
            index = RouteIndex.of(included, self)
            self._indexes[id(included)] = index
        return index if index.usable else None


class RouteIndex:
    """One regular expression per method over a router's routes as included (see the module docstring)."""

    def __init__(self, contexts: list[Any], versions: list[tuple[APIRouter, int]], usable: bool) -> None:
        self.contexts = contexts
        self.versions = versions
        self.usable = usable
        self._by_method: dict[str, Compiled] = {}

    @classmethod
    def of(cls, included: Any, router: APIRouter) -> RouteIndex:
        """The index of `router` as `included`. It stands while no router in its tree changes: FastAPI counts a
        router's changes in its `_routes_version` (a route added, a router included), and sums the counts of a
        tree at every request; the index keeps each router's count and compares them."""
        versions = [(r, routes_version(r)) for r in _tree(router, set())]
        contexts = list(included.effective_route_contexts())
        # only FastAPI routes, included with no form limits (handled directly, an inclusion's limits are not
        # applied on the way): anything else leaves the router to FastAPI's own matching
        usable = all(
            isinstance(c.original_route, APIRoute) and c.path_regex is not None for c in contexts
        ) and not _form_limits(included)
        return cls(contexts, versions, usable)

    def current(self) -> bool:
        """Whether no router of the tree changed since the index was built."""
        return all(routes_version(router) == version for router, version in self.versions)

    def select(self, method: str, path: str, scope: Any) -> tuple[Any, dict[str, Any]] | None:
        """The first route (its effective context) whose methods hold `method` and whose pattern matches `path`
        whole, and the scope's part its match sets, as the route's own `matches` sets it (the endpoint; the path
        parameters, the scope's own and the route's, converted); None if no route matches."""
        entry = self._by_method.get(method)
        if entry is None:
            entry = self._by_method[method] = self._compile(method)
        pattern, contexts, readers = entry
        found = pattern.match(path) if pattern is not None else None
        if found is None:
            return None
        chosen = int(str(found.lastgroup)[1:])
        context = contexts[chosen]
        params = dict(scope.get("path_params") or {})
        for name, group, convertor in readers[chosen]:
            params[name] = convertor.convert(found.group(group))
        return context, {"endpoint": context.endpoint, "path_params": params}

    def _compile(self, method: str) -> Compiled:
        contexts = [c for c in self.contexts if not c.methods or method in c.methods]
        if not contexts:
            return None, [], []
        # each route's pattern (anchored ^…$) as one named alternative, whose closing makes it the match's last
        # group; its own groups keep their order, unnamed (a name may appear once in a pattern), so that a
        # parameter's group is the alternative's group plus its group in the route's own pattern
        alternatives, readers = [], []
        group = 0
        for i, context in enumerate(contexts):
            own = context.path_regex
            group += 1
            alternatives.append(f"(?P<r{i}>{_GROUP.sub('(', own.pattern)})")
            readers.append([(n, group + at, context.param_convertors[n]) for n, at in own.groupindex.items()])
            group += own.groups
        return re.compile("|".join(alternatives)), contexts, readers


def _tree(router: APIRouter, seen: set[int]) -> list[APIRouter]:
    """`router` and every router included in it, each once."""
    if id(router) in seen:
        return []
    seen.add(id(router))
    found = [router]
    for route in router.routes:
        included = getattr(route, "original_router", None)
        if isinstance(included, APIRouter):
            found.extend(_tree(included, seen))
    return found


def _form_limits(included: Any) -> bool:
    """Whether this inclusion, or one within it, sets form limits."""
    if getattr(included.include_context, "form_limits", None):
        return True
    return any(_form_limits(c) for c in included.effective_candidates() if hasattr(c, "include_context"))


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
    request, reading and tokenizing its module's source: done here for every endpoint."""
    for route in routes:
        endpoint = getattr(route, "endpoint", None)
        if isinstance(route, APIRoute) and endpoint is not None:
            extract_endpoint_context(endpoint)
        included = getattr(route, "original_router", route)  # FastAPI keeps an included router as such
        _endpoint_contexts(getattr(included, "routes", ()))
