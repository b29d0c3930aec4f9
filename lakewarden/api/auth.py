"""Every route checked: who the caller is (401 otherwise) and whether they may (403 otherwise).

`/api/v1` routes need a role (viewer reads; a write needs admin unless marked for operators or optimizers);
`/iceberg/v1` routes need a grant on the catalog object in the path (`read` for GET and HEAD and metric reports,
`write` for the rest). Credentials are a Bearer token or the dashboard's session cookie, whose writes also carry
the CSRF header: a page of another site can send the cookie, not read it. docs/operations.md lists the rules."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute

from lakewarden.domain.errors import Forbidden, NotAuthorized
from lakewarden.domain.security import NOBODY, Principal, Privilege, Role
from lakewarden.services.access.auth import AuthService

ROLE_KEY = "x-lakewarden-role"
OPERATOR: dict[str, Any] = {"openapi_extra": {ROLE_KEY: "operator"}}
OPTIMIZER: dict[str, Any] = {"openapi_extra": {ROLE_KEY: "optimizer"}}
OPEN: dict[str, Any] = {"openapi_extra": {ROLE_KEY: "open"}}
ADMIN_ONLY: dict[str, Any] = {"openapi_extra": {ROLE_KEY: "admin"}}  # reads only admins may make
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_COOKIE = "lakewarden_session"
CSRF_COOKIE = "lakewarden_csrf"
CSRF_HEADER = "X-CSRF-Token"


AUTHORIZATION = b"authorization"  # ASGI hands header names lowercase


def _authorization(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == AUTHORIZATION:
            return value.decode("latin-1")
    return None


def auth_service(request: Request) -> AuthService:
    service: AuthService = request.app.state.context.auth
    return service


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _credential(request: Request) -> tuple[str | None, bool]:
    """The bearer credential, and whether it came from the session cookie. The header is looked up in the
    scope's own list, as Starlette's `Headers` finds it (the first one sent), without building one and lowering
    the name for every request: most of this function's time."""
    header = _authorization(request.scope["headers"])
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise NotAuthorized("the Authorization header must be `Bearer <token>`")
        return value.strip(), False
    cookie = request.cookies.get(SESSION_COOKIE)
    return (cookie, True) if cookie else (None, False)


def caller(request: Request) -> Principal:
    """The authenticated caller of this request (cached on the request, in its scope's state: what
    `request.state.principal` names, without the exception Starlette's State raises for a name not set)."""
    state = request.scope.setdefault("state", {})
    known = state.get("principal")
    if isinstance(known, Principal):
        return known
    service = auth_service(request)
    if not service.enabled:
        principal = NOBODY
    else:
        credential, from_cookie = _credential(request)
        if credential is None:
            raise NotAuthorized(
                "authentication required: send `Authorization: Bearer <token>` (the first start wrote an admin "
                "token to <data-dir>/admin.token)"
            )
        principal = service.authenticate(credential)
        if from_cookie and request.method not in SAFE_METHODS:
            sent = request.headers.get(CSRF_HEADER, "")
            expected = request.cookies.get(CSRF_COOKIE, "")
            if not expected or not hmac.compare_digest(sent, expected):
                raise Forbidden(f"a change from the dashboard needs the {CSRF_HEADER} header (CSRF protection)")
    state["principal"] = principal
    return principal


async def _caller(request: Request) -> Principal:
    """`caller` as a dependency, run on the event loop (api/context.py says why), as the routers' checks run it."""
    return caller(request)


async def _auth_service(request: Request) -> AuthService:
    return auth_service(request)


Caller = Annotated[Principal, Depends(_caller)]
Auth = Annotated[AuthService, Depends(_auth_service)]


def _route_role(request: Request) -> str:
    route = request.scope.get("route")
    extra = route.openapi_extra if isinstance(route, APIRoute) and route.openapi_extra else {}
    marked = extra.get(ROLE_KEY)
    if marked:
        return str(marked)
    return Role.VIEWER if request.method in SAFE_METHODS else Role.ADMIN


async def authorize_api(request: Request) -> None:
    """The `/api/v1` router's check: the route's role (see the module docstring). Async, so the check runs
    on the event loop and not in a worker thread (lookups are cached)."""
    need = _route_role(request)
    if need == "open":
        return
    principal = caller(request)
    if need == "optimizer":
        if principal.optimizer_token is not None or principal.register_group is not None:
            return
        if principal.has_role(Role.OPERATOR):
            return
        raise Forbidden(f"{principal.name} may not speak the optimizer protocol (needs role operator)")
    role = Role(need)
    if principal.optimizer_token is not None or principal.register_group is not None:
        raise Forbidden("an optimizer's token is only for the optimizer protocol")
    if not principal.has_role(role):
        have = principal.role.value if principal.role else "no role"
        raise Forbidden(f"{principal.name} ({have}) may not {request.method} {request.url.path}: needs role {role}")


def namespace_of(path_value: str | None) -> tuple[str, ...] | None:
    return None if path_value is None else tuple(path_value.split("\x1f"))


async def authorize_catalog(request: Request) -> None:
    """The `/iceberg/v1` router's check: a grant on the catalog object the path names."""
    if _route_role(request) == "open":
        return
    principal = caller(request)
    params = request.path_params
    catalog = params.get("prefix")
    if catalog is None:
        return  # GET /config: the warehouse it names is checked by the route
    # a view's grants are a table's: the same object path, catalog.namespace.name
    namespace, table = namespace_of(params.get("namespace")), params.get("table") or params.get("view")
    path = request.scope["path"]  # not request.url: building a URL costs more than the whole check
    # reporting metrics and planning a scan (its submit, its tasks, its cancel) only read the table
    reads = request.method in SAFE_METHODS or path.endswith(("/metrics", "/plan", "/tasks")) or "/plan/" in path
    if table is None and namespace is not None and reads and not path.endswith("/tables"):
        allowed = principal.sees(catalog, namespace)  # a namespace on the way to a grant may be looked at
    elif namespace is None and reads:
        allowed = principal.sees(catalog, None)  # listing: filtered by the route
    elif namespace is None:
        # rename, transactions, creating a namespace: some grant in the catalog here, each object by the route
        allowed = principal.sees(catalog, None)
    else:
        allowed = principal.may(catalog, namespace, table, Privilege.READ if reads else Privilege.WRITE)
        if allowed and principal.task_holder is not None and not (reads and table is None):
            # an optimizer's catalog token: only the tables it holds a task on, while it holds it
            allowed = table is not None and auth_service(request).holds_task(
                principal.task_holder, catalog, namespace, table
            )
    if not allowed:
        target = ".".join((catalog, *(namespace or ()), *((table,) if table else ())))
        need = "read" if reads else "write"
        raise Forbidden(f"{principal.name} has no {need} grant on {target}")


def require_catalog(
    principal: Principal, catalog: str, namespace: tuple[str, ...] | None, table: str | None, need: Privilege
) -> None:
    """A route's own check of one object (rename, transactions, creating a namespace). An optimizer's
    catalog token does none of these."""
    if principal.task_holder is not None or not principal.may(catalog, namespace, table, need):
        target = ".".join((catalog, *(namespace or ()), *((table,) if table else ())))
        raise Forbidden(f"{principal.name} has no {need} grant on {target}")
