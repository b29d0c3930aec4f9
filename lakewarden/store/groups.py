"""Store functions for resource groups. They flush, never commit: the caller owns the transaction."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.domain.errors import AlreadyExists, Conflict, NotFound
from lakewarden.store.database import utcnow
from lakewarden.store.models import CatalogRow, ResourceGroupRow, TableRuntimeRow

CATALOG_GROUP_DEFAULT = "table.self-optimizing.group"


def create_group(session: Session, name: str, container: str, properties: dict[str, str]) -> ResourceGroupRow:
    if session.get(ResourceGroupRow, name) is not None:
        raise AlreadyExists(f"resource group {name!r} already exists")
    now = utcnow()
    row = ResourceGroupRow(name=name, container=container, properties=dict(properties), created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    return row


def get_group(session: Session, name: str) -> ResourceGroupRow:
    row = session.get(ResourceGroupRow, name)
    if row is None:
        raise NotFound(f"resource group {name!r} does not exist")
    return row


def group_properties(session: Session, name: str) -> dict[str, str]:
    """The group's properties; none for a group that is gone."""
    row = session.get(ResourceGroupRow, name)
    return dict(row.properties) if row is not None else {}


def group_exists(session: Session, name: str) -> bool:
    return session.get(ResourceGroupRow, name) is not None


def list_groups(session: Session) -> list[ResourceGroupRow]:
    return list(session.scalars(select(ResourceGroupRow).order_by(ResourceGroupRow.name)))


def table_counts(session: Session) -> dict[str, int]:
    rows = session.execute(
        select(TableRuntimeRow.optimizing_group, func.count()).group_by(TableRuntimeRow.optimizing_group)
    )
    return {name: count for name, count in rows}


def update_group(
    session: Session, name: str, container: str | None, properties: dict[str, str] | None
) -> ResourceGroupRow:
    row = get_group(session, name)
    if container is not None:
        row.container = container
    if properties is not None:
        row.properties = dict(properties)
    row.updated_at = utcnow()
    session.flush()
    return row


def delete_group(session: Session, name: str) -> None:
    """Delete a group no table and no catalog default uses."""
    row = get_group(session, name)
    tables = session.scalar(select(func.count()).where(TableRuntimeRow.optimizing_group == name)) or 0
    if tables:
        raise Conflict(f"resource group {name!r} is used by {tables} table(s); move them to another group first")
    catalogs = [c.name for c in session.scalars(select(CatalogRow)) if c.properties.get(CATALOG_GROUP_DEFAULT) == name]
    if catalogs:
        raise Conflict(f"resource group {name!r} is the default group of catalog(s) {', '.join(catalogs)}")
    session.delete(row)
    session.flush()
