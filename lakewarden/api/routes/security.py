"""`/api/v1/principals`, `/api/v1/tokens`, `/api/v1/audit` and `/api/v1/session`: who may call the server.

Principals, their tokens and grants are the admin's (the router's default for writes); anyone signed in
reads who they are (`GET /session`) and may sign out. The dashboard signs in at `POST /session` with a
token or a name and password and gets an HttpOnly, SameSite=Strict session cookie plus a CSRF cookie
whose value it sends back as `X-CSRF-Token` on every change.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import Field

from lakewarden.api.auth import ADMIN_ONLY, CSRF_COOKIE, OPEN, SESSION_COOKIE, Auth, Caller, client_address
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.schemas import ID_MAX, _Read, _Request
from lakewarden.config import Duration
from lakewarden.domain.errors import Conflict, InvalidField
from lakewarden.domain.security import Grant, PrincipalKind, Role
from lakewarden.services.access.auth import SESSION
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import security as store

router = APIRouter(tags=["security"])
Ctx = Annotated[ServerContext, Depends(server_context)]
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.@-]{0,127}$")


class PrincipalCreate(_Request):
    name: str = Field(description="A letter, then letters, digits, '_', '.', '@' or '-' (max 128)")
    kind: PrincipalKind = PrincipalKind.USER
    role: Role = Role.VIEWER
    password: str | None = Field(None, min_length=8, max_length=1024, description="users only: the dashboard login")


class PrincipalUpdate(_Request):
    role: Role | None = None
    password: str | None = Field(None, min_length=8, max_length=1024)


class GrantBody(_Request):
    target: str = Field(description="`catalog` or `catalog.namespace` (levels joined by '.')")
    privilege: str = Field(description="read | write (write includes read)")


class GrantRead(_Read):
    target: str
    privilege: str


class PrincipalRead(_Read):
    name: str
    kind: str
    role: str
    has_password: bool
    created_at: datetime
    grants: list[GrantRead]


class TokenCreate(_Request):
    name: str = Field("token", min_length=1, max_length=128, description="What the token is for")
    expires_in: Duration | None = Field(None, description="e.g. 30d, 12h; default: until revoked")


class TokenRead(_Read):
    token_id: str
    principal: str
    name: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenRead):
    token: str = Field(description="The token itself: shown this once, never stored")


class SessionCreate(_Request):
    token: str | None = Field(None, max_length=4096)
    name: str | None = Field(None, max_length=128)
    password: str | None = Field(None, max_length=1024)


class SessionRead(_Read):
    name: str
    role: str | None
    kind: str
    csrf_token: str | None = None


class AuditRead(_Read):
    audit_id: int
    at: datetime
    principal: str
    action: str
    target: str
    detail: dict[str, Any]
    client: str | None


def _grant_read(grant: Grant) -> GrantRead:
    return GrantRead(target=".".join((grant.catalog, *grant.namespace)), privilege=grant.privilege.value)


def _principal_read(session: Any, name: str) -> PrincipalRead:
    row = store.get_principal(session, name)
    return PrincipalRead(
        name=row.name,
        kind=row.kind,
        role=row.role,
        has_password=row.password_hash is not None,
        created_at=row.created_at,
        grants=[_grant_read(g) for g in store.grants_of(session, name)],
    )


def _token_read(row: Any, model: type[TokenRead] = TokenRead, **extra: Any) -> Any:
    return model(
        token_id=row.token_id,
        principal=row.principal,
        name=row.name,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        **extra,
    )


def audit(ctx: ServerContext, request: Request, principal: str, action: str, target: str, **detail: Any) -> None:
    """Record who changed what (the audit log, `GET /api/v1/audit`)."""
    with ctx.db.write() as session:
        store.audit(session, principal, action, target, detail, client_address(request))


# ---- principals


@router.post("/principals", status_code=201, response_model=PrincipalRead)
def create_principal(body: PrincipalCreate, ctx: Ctx, auth: Auth, me: Caller, request: Request) -> PrincipalRead:
    if not NAME.match(body.name):
        raise InvalidField("name", f"{body.name!r}: a letter, then letters, digits, '_', '.', '@' or '-' (max 128)")
    if body.password is not None and body.kind is not PrincipalKind.USER:
        raise InvalidField("password", "only users have passwords; services use tokens")
    hashed = None if body.password is None else auth.hash_password(body.password)
    with ctx.db.write() as session:
        store.create_principal(session, body.name, body.kind, body.role, hashed)
        store.audit(session, me.name, "create-principal", body.name, {"role": body.role}, client_address(request))
        return _principal_read(session, body.name)


@router.get("/principals", response_model=list[PrincipalRead], **ADMIN_ONLY)
def list_principals(ctx: Ctx) -> list[PrincipalRead]:
    with ctx.db.read() as session:
        return [_principal_read(session, row.name) for row in store.list_principals(session)]


@router.get("/principals/{name}", response_model=PrincipalRead, **ADMIN_ONLY)
def get_principal(name: str, ctx: Ctx) -> PrincipalRead:
    with ctx.db.read() as session:
        return _principal_read(session, name)


@router.put("/principals/{name}", response_model=PrincipalRead)
def update_principal(
    name: str, body: PrincipalUpdate, ctx: Ctx, auth: Auth, me: Caller, request: Request
) -> PrincipalRead:
    with ctx.db.write() as session:
        row = store.get_principal(session, name)
        if body.role is not None and body.role != row.role:
            if row.role == Role.ADMIN and store.count_admins(session) == 1:
                raise Conflict(f"{name} is the last admin: make another principal admin first")
            row.role = body.role
        if body.password is not None:
            if row.kind != PrincipalKind.USER:
                raise InvalidField("password", "only users have passwords; services use tokens")
            row.password_hash = auth.hash_password(body.password)
        detail = {"role": body.role, "password": "changed" if body.password else None}
        store.audit(session, me.name, "update-principal", name, detail, client_address(request))
        read = _principal_read(session, name)
    auth.forget()
    return read


@router.delete("/principals/{name}", status_code=204)
def delete_principal(name: str, ctx: Ctx, auth: Auth, me: Caller, request: Request) -> Response:
    with ctx.db.write() as session:
        row = store.get_principal(session, name)
        if row.role == Role.ADMIN and store.count_admins(session) == 1:
            raise Conflict(f"{name} is the last admin: make another principal admin first")
        store.delete_principal(session, name)
        store.audit(session, me.name, "delete-principal", name, {}, client_address(request))
    auth.forget()
    return Response(status_code=204)


# ---- grants


@router.post("/principals/{name}/grants", status_code=201, response_model=PrincipalRead)
def add_grant(name: str, body: GrantBody, ctx: Ctx, auth: Auth, me: Caller, request: Request) -> PrincipalRead:
    grant = Grant.parse(body.target, body.privilege)
    with ctx.db.write() as session:
        if not catalog_store.catalog_exists(session, grant.catalog):
            raise InvalidField("target", f"there is no catalog named {grant.catalog!r}")
        store.put_grant(session, name, grant)
        store.audit(session, me.name, "grant", name, {"grant": grant.describe()}, client_address(request))
        read = _principal_read(session, name)
    auth.forget()
    return read


@router.delete("/principals/{name}/grants/{target}", response_model=PrincipalRead)
def remove_grant(name: str, target: str, ctx: Ctx, auth: Auth, me: Caller, request: Request) -> PrincipalRead:
    grant = Grant.parse(target, "read")
    with ctx.db.write() as session:
        store.remove_grant(session, name, grant.catalog, grant.namespace)
        store.audit(session, me.name, "revoke-grant", name, {"target": target}, client_address(request))
        read = _principal_read(session, name)
    auth.forget()
    return read


# ---- tokens


MAX_TOKEN_LIFETIME = timedelta(days=36_525)


@router.post("/principals/{name}/tokens", status_code=201, response_model=TokenCreated)
def create_token(name: str, body: TokenCreate, ctx: Ctx, auth: Auth, me: Caller, request: Request) -> TokenCreated:
    expires = body.expires_in
    if expires is not None and expires.total_seconds() <= 0:
        raise InvalidField("expires_in", "must be positive")
    if expires is not None and expires > MAX_TOKEN_LIFETIME:  # its expiry date must be a date
        raise InvalidField("expires_in", "must be at most 100 years; omit it for a token that lives until revoked")
    token_id, token = auth.create_token(name, body.name, expires)
    with ctx.db.write() as session:
        store.audit(session, me.name, "create-token", name, {"token_id": token_id}, client_address(request))
        read: TokenCreated = _token_read(store.find_token(session, token_id), TokenCreated, token=token)
    return read


@router.get("/tokens", response_model=list[TokenRead], **ADMIN_ONLY)
def list_tokens(ctx: Ctx, principal: Annotated[str | None, Query()] = None) -> list[TokenRead]:
    with ctx.db.read() as session:
        return [_token_read(row) for row in store.list_tokens(session, principal)]


@router.delete("/tokens/{token_id}", response_model=TokenRead)
def revoke_token(token_id: str, ctx: Ctx, auth: Auth, me: Caller, request: Request) -> TokenRead:
    with ctx.db.write() as session:
        row = store.revoke_token(session, token_id)
        store.audit(session, me.name, "revoke-token", row.principal, {"token_id": token_id}, client_address(request))
        read: TokenRead = _token_read(row)
    auth.forget()
    return read


# ---- audit


@router.get("/audit", response_model=list[AuditRead])
def audit_log(
    ctx: Ctx,
    principal: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[int | None, Query(ge=0, le=ID_MAX, description="only entries older than this audit_id")] = None,
) -> list[AuditRead]:
    with ctx.db.read() as session:
        return [
            AuditRead.model_validate(row, from_attributes=True)
            for row in store.audit_entries(session, limit, principal, before)
        ]


# ---- the dashboard's session


@router.post("/session", response_model=SessionRead, **OPEN)
def sign_in(body: SessionCreate, auth: Auth, request: Request, response: Response) -> SessionRead:
    """Sign in with a token, or a user's name and password: sets the session and CSRF cookies."""
    client = client_address(request)
    if body.token:
        principal = auth.login_with_token(body.token, client)
    elif body.name and body.password:
        principal = auth.login(body.name, body.password, client)
    else:
        raise InvalidField("token", "give a token, or a name and a password")
    issued = auth.access_token(principal, SESSION)
    csrf = secrets.token_urlsafe(24)
    secure = request.url.scheme == "https"
    response.set_cookie(
        SESSION_COOKIE, issued.token, max_age=issued.expires_in, httponly=True, samesite="strict", secure=secure
    )
    response.set_cookie(CSRF_COOKIE, csrf, max_age=issued.expires_in, httponly=False, samesite="strict", secure=secure)
    return SessionRead(name=principal.name, role=principal.role, kind=principal.kind, csrf_token=csrf)


@router.get("/session", response_model=SessionRead)
def whoami(me: Caller) -> SessionRead:
    return SessionRead(name=me.name, role=me.role, kind=me.kind)


@router.delete("/session", status_code=204, **OPEN)
def sign_out(response: Response) -> Response:
    """Forget the session cookies (the session token itself expires with its TTL)."""
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE)
    response.delete_cookie(CSRF_COOKIE)
    return response
