"""Store functions for registered catalogs. They flush, never commit: the caller owns the transaction."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import AlreadyExists, NotFound
from lakewarden.store.database import utcnow
from lakewarden.store.models import CatalogRow, TableIdentifierRow, TableRuntimeRow


def spec_of(row: CatalogRow) -> CatalogSpec:
    return CatalogSpec(row.name, row.type, dict(row.properties))


def create_catalog(session: Session, spec: CatalogSpec) -> CatalogRow:
    if catalog_exists(session, spec.name):
        raise AlreadyExists(f"catalog {spec.name!r} already exists")
    now = utcnow()
    row = CatalogRow(
        name=spec.name,
        type=spec.type,
        properties=dict(spec.properties),
        health="unknown",
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_catalog(session: Session, name: str) -> CatalogRow:
    row = session.get(CatalogRow, name)
    if row is None:
        raise NotFound(f"catalog {name!r} does not exist")
    return row


def catalog_exists(session: Session, name: str) -> bool:
    return session.get(CatalogRow, name) is not None


def list_catalogs(session: Session) -> list[CatalogRow]:
    return list(session.scalars(select(CatalogRow).order_by(CatalogRow.name)))


def table_counts(session: Session) -> dict[str, int]:
    rows = session.execute(
        select(TableIdentifierRow.catalog_name, func.count()).group_by(TableIdentifierRow.catalog_name)
    )
    return {name: count for name, count in rows}


def seal_secrets(session: Session) -> int:
    """Rewrite catalogs whose secrets a version before encryption stored in the clear; returns how many."""
    from sqlalchemy import JSON, column, table
    from sqlalchemy.orm.attributes import flag_modified

    from lakewarden.domain.catalogs import SECRET_PROPERTIES
    from lakewarden.store.secrets import PREFIX

    stored = table("catalog_meta", column("name"), column("properties", JSON))  # as stored: not decrypted
    plain = [
        name
        for name, props in session.execute(select(stored.c.name, stored.c.properties))
        if any(k in SECRET_PROPERTIES and not str(v).startswith(PREFIX) for k, v in (props or {}).items())
    ]
    for name in plain:
        flag_modified(get_catalog(session, name), "properties")
    session.flush()
    return len(plain)


def update_catalog(session: Session, spec: CatalogSpec) -> CatalogRow:
    row = get_catalog(session, spec.name)
    row.type = spec.type
    row.properties = dict(spec.properties)
    row.updated_at = utcnow()
    session.flush()
    return row


def delete_catalog(session: Session, name: str) -> None:
    """Unregister a catalog and forget its tables (the tables themselves are untouched)."""
    get_catalog(session, name)
    table_ids = select(TableIdentifierRow.table_id).where(TableIdentifierRow.catalog_name == name)
    session.execute(delete(TableRuntimeRow).where(TableRuntimeRow.table_id.in_(table_ids)))
    session.execute(delete(TableIdentifierRow).where(TableIdentifierRow.catalog_name == name))
    session.execute(delete(CatalogRow).where(CatalogRow.name == name))
    session.flush()


def record_refresh(session: Session, name: str, error: str | None, loaded_defaults: str | None = None) -> CatalogRow:
    """The outcome of a listing; `loaded_defaults`: the fingerprint of the table defaults it loaded every table
    with (kept until the next such refresh)."""
    row = get_catalog(session, name)
    if loaded_defaults is not None:
        row.loaded_defaults = loaded_defaults
    row.health = "unhealthy" if error else "healthy"
    row.last_error = error
    row.last_refresh_at = utcnow()
    session.flush()
    return row
