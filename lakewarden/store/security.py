"""Store functions for principals, API tokens, grants and the audit log. They flush, never commit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from lakewarden.domain.errors import AlreadyExists, NotFound
from lakewarden.domain.security import Grant, Privilege
from lakewarden.store.database import utcnow
from lakewarden.store.models import ApiTokenRow, AuditRow, GrantRow, PrincipalRow
from lakewarden.store.rest_catalog import SEP


def create_principal(
    session: Session, name: str, kind: str, role: str, password_hash: str | None = None
) -> PrincipalRow:
    if session.get(PrincipalRow, name) is not None:
        raise AlreadyExists(f"principal {name!r} already exists")
    row = PrincipalRow(name=name, kind=kind, role=role, password_hash=password_hash, created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def get_principal(session: Session, name: str) -> PrincipalRow:
    row = session.get(PrincipalRow, name)
    if row is None:
        raise NotFound(f"principal {name!r} does not exist")
    return row


def find_principal(session: Session, name: str) -> PrincipalRow | None:
    return session.get(PrincipalRow, name)


def list_principals(session: Session) -> list[PrincipalRow]:
    return list(session.scalars(select(PrincipalRow).order_by(PrincipalRow.name)))


def count_principals(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(PrincipalRow)) or 0)


def delete_principal(session: Session, name: str) -> None:
    get_principal(session, name)
    session.execute(delete(ApiTokenRow).where(ApiTokenRow.principal == name))
    session.execute(delete(GrantRow).where(GrantRow.principal == name))
    session.execute(delete(PrincipalRow).where(PrincipalRow.name == name))
    session.flush()


def count_admins(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(PrincipalRow).where(PrincipalRow.role == "admin")) or 0)


# ---- tokens


def add_token(
    session: Session, token_id: str, principal: str, name: str, secret_sha256: str, expires_at: datetime | None
) -> ApiTokenRow:
    get_principal(session, principal)
    row = ApiTokenRow(
        token_id=token_id,
        principal=principal,
        name=name,
        secret_sha256=secret_sha256,
        created_at=utcnow(),
        expires_at=expires_at,
        revoked_at=None,
    )
    session.add(row)
    session.flush()
    return row


def find_token(session: Session, token_id: str) -> ApiTokenRow | None:
    return session.get(ApiTokenRow, token_id)


def list_tokens(session: Session, principal: str | None = None) -> list[ApiTokenRow]:
    query = select(ApiTokenRow).order_by(ApiTokenRow.created_at)
    if principal is not None:
        query = query.where(ApiTokenRow.principal == principal)
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: str) -> ApiTokenRow:
    row = session.get(ApiTokenRow, token_id)
    if row is None:
        raise NotFound(f"token {token_id!r} does not exist")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row


# ---- grants


def _namespace_key(grant: Grant) -> str:
    return SEP.join(grant.namespace)


def put_grant(session: Session, principal: str, grant: Grant) -> GrantRow:
    """Grant (or change the privilege of an existing grant on the same target)."""
    get_principal(session, principal)
    row = session.get(GrantRow, (principal, grant.catalog, _namespace_key(grant)))
    if row is None:
        row = GrantRow(
            principal=principal,
            catalog_name=grant.catalog,
            namespace=_namespace_key(grant),
            privilege=grant.privilege.value,
            created_at=utcnow(),
        )
        session.add(row)
    else:
        row.privilege = grant.privilege.value
    session.flush()
    return row


def remove_grant(session: Session, principal: str, catalog: str, namespace: tuple[str, ...]) -> None:
    row = session.get(GrantRow, (principal, catalog, SEP.join(namespace)))
    if row is None:
        target = ".".join((catalog, *namespace))
        raise NotFound(f"principal {principal!r} has no grant on {target}")
    session.delete(row)
    session.flush()


def grants_of(session: Session, principal: str) -> list[Grant]:
    rows = session.scalars(
        select(GrantRow).where(GrantRow.principal == principal).order_by(GrantRow.catalog_name, GrantRow.namespace)
    )
    return [
        Grant(r.catalog_name, Privilege(r.privilege), tuple(r.namespace.split(SEP)) if r.namespace else ())
        for r in rows
    ]


# ---- audit


def audit(
    session: Session, principal: str, action: str, target: str, detail: dict[str, Any], client: str | None
) -> None:
    session.add(AuditRow(at=utcnow(), principal=principal, action=action, target=target, detail=detail, client=client))
    session.flush()


def audit_entries(
    session: Session, limit: int, principal: str | None = None, before_id: int | None = None
) -> list[AuditRow]:
    query = select(AuditRow).order_by(AuditRow.audit_id.desc()).limit(limit)
    if principal is not None:
        query = query.where(AuditRow.principal == principal)
    if before_id is not None:
        query = query.where(AuditRow.audit_id < before_id)
    return list(session.scalars(query))
