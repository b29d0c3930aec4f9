"""Store functions of lakewarden's REST catalog: namespaces, table pointers (CAS), the commit timeline, the outbox.
Views' pointers, which share the compare-and-swap and the names, are in store/views.py.

Namespaces are stored as their levels joined by the unit separator (0x1F), as in REST paths.
Functions flush, never commit: a pointer swap, its timeline entry and its event share one transaction.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar
from typing import cast as typed

from sqlalchemy import (
    CursorResult,
    Table,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from lakewarden.domain.errors import AlreadyExists, NamespaceNotEmpty, NoSuchNamespace, NoSuchTable
from lakewarden.domain.events import CatalogEvent, checked, event_of
from lakewarden.store.database import Database, utcnow
from lakewarden.store.models import CommitRow, EventRow, IcebergTableRow, IcebergViewRow, NamespaceRow

SEP = "\x1f"
Pointer = TypeVar("Pointer", IcebergTableRow, IcebergViewRow)


def key(levels: tuple[str, ...] | list[str]) -> str:
    return SEP.join(levels)


EVENTS_CHANNEL = "lakewarden_events"  # PostgreSQL NOTIFY channel: an event was written (its id)


def levels(namespace_key: str) -> list[str]:
    return namespace_key.split(SEP)


# ---- namespaces


def get_namespace(session: Session, catalog: str, namespace: str) -> NamespaceRow:
    row = session.get(NamespaceRow, (catalog, namespace))
    if row is None:
        raise NoSuchNamespace(f"Namespace does not exist: {'.'.join(levels(namespace))}")
    return row


def namespace_count(session: Session, catalog: str) -> int:
    return int(session.scalar(select(func.count()).where(NamespaceRow.catalog_name == catalog)) or 0)


def create_namespace(session: Session, catalog: str, namespace: str, properties: dict[str, str]) -> NamespaceRow:
    if session.get(NamespaceRow, (catalog, namespace)) is not None:
        raise AlreadyExists(f"Namespace already exists: {'.'.join(levels(namespace))}")
    parts = levels(namespace)
    if len(parts) > 1:
        get_namespace(session, catalog, key(parts[:-1]))  # the parent must exist
    row = NamespaceRow(catalog_name=catalog, namespace=namespace, properties=dict(properties), created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def list_namespaces(session: Session, catalog: str, parent: str | None) -> list[str]:
    """The direct children of `parent` (top-level namespaces when None), in order."""
    query = select(NamespaceRow.namespace).where(NamespaceRow.catalog_name == catalog)
    if parent:
        get_namespace(session, catalog, parent)
        query = query.where(NamespaceRow.namespace.startswith(parent + SEP, autoescape=True))
    depth = len(levels(parent)) + 1 if parent else 1
    return sorted(ns for ns in session.scalars(query) if len(levels(ns)) == depth)


def drop_namespace(session: Session, catalog: str, namespace: str) -> None:
    get_namespace(session, catalog, namespace)
    tables = session.scalar(
        select(func.count()).where(IcebergTableRow.catalog_name == catalog, IcebergTableRow.namespace == namespace)
    )
    tables = (tables or 0) + (
        session.scalar(
            select(func.count()).where(IcebergViewRow.catalog_name == catalog, IcebergViewRow.namespace == namespace)
        )
        or 0
    )
    children = session.scalar(
        select(func.count()).where(
            NamespaceRow.catalog_name == catalog, NamespaceRow.namespace.startswith(namespace + SEP, autoescape=True)
        )
    )
    if tables or children:
        raise NamespaceNotEmpty(
            f"Namespace {'.'.join(levels(namespace))} is not empty: {tables} table(s) or view(s), "
            f"{children} namespace(s)"
        )
    session.execute(
        delete(NamespaceRow).where(NamespaceRow.catalog_name == catalog, NamespaceRow.namespace == namespace)
    )
    session.flush()


def update_namespace_properties(
    session: Session, catalog: str, namespace: str, removals: list[str], updates: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    row = get_namespace(session, catalog, namespace)
    properties = dict(row.properties)
    removed = [k for k in removals if k in properties]
    missing = [k for k in removals if k not in properties]
    for k in removed:
        del properties[k]
    properties.update(updates)
    row.properties = properties
    session.flush()
    return sorted(updates), removed, missing


# ---- table pointers


def get_pointer(session: Session, catalog: str, namespace: str, table: str) -> IcebergTableRow:
    row = session.get(IcebergTableRow, (catalog, namespace, table))
    if row is None:
        raise NoSuchTable(f"Table does not exist: {'.'.join(levels(namespace))}.{table}")
    return row


_HEAD = select(IcebergTableRow.metadata_location, IcebergTableRow.version).where(
    IcebergTableRow.catalog_name == bindparam("catalog"),
    IcebergTableRow.namespace == bindparam("namespace"),
    IcebergTableRow.table_name == bindparam("table"),
)


def pointer_head(db: Database, catalog: str, namespace: str, table: str) -> tuple[str, int]:
    """The table's current metadata location and version, as get_pointer's, by the database's fast
    single-row read (once per loadTable and per commit)."""
    row = db.driver.first_row(_HEAD, {"catalog": catalog, "namespace": namespace, "table": table})
    if row is None:
        raise NoSuchTable(f"Table does not exist: {'.'.join(levels(namespace))}.{table}")
    return str(row[0]), int(row[1])


async def pointer_head_async(db: Database, catalog: str, namespace: str, table: str) -> tuple[str, int]:
    """pointer_head for the event loop (Driver.first_row_async, store/driver.py)."""
    row = await db.driver.first_row_async(_HEAD, {"catalog": catalog, "namespace": namespace, "table": table})
    if row is None:
        raise NoSuchTable(f"Table does not exist: {'.'.join(levels(namespace))}.{table}")
    return str(row[0]), int(row[1])


def pointer_exists(session: Session, catalog: str, namespace: str, table: str) -> bool:
    return session.get(IcebergTableRow, (catalog, namespace, table)) is not None


def list_pointers(session: Session, catalog: str, namespace: str) -> list[str]:
    return list_names(session, IcebergTableRow.table_name, catalog, namespace)


def list_names(session: Session, name: Any, catalog: str, namespace: str) -> list[str]:
    """The names of a namespace's tables or views (`name`: the name column of their pointers' model), sorted."""
    get_namespace(session, catalog, namespace)
    model = name.class_
    query = select(name).where(model.catalog_name == catalog, model.namespace == namespace)
    return sorted(session.scalars(query))


def pointer_locations(session: Session, catalog: str) -> list[tuple[str, str, str]]:
    """Every table of an internal catalog: database (its namespace's levels joined by dots), name, metadata
    location."""
    query = select(IcebergTableRow.namespace, IcebergTableRow.table_name, IcebergTableRow.metadata_location).where(
        IcebergTableRow.catalog_name == catalog
    )
    return [(".".join(levels(namespace)), name, location) for namespace, name, location in session.execute(query)]


def recent_pointers(session: Session, limit: int) -> list[tuple[str, list[str], str, str]]:
    """The internal tables committed most recently: catalog, namespace levels, name, metadata location."""
    query = select(IcebergTableRow).order_by(IcebergTableRow.updated_at.desc()).limit(limit)
    return [
        (row.catalog_name, levels(row.namespace), row.table_name, row.metadata_location)
        for row in session.scalars(query)
    ]


def name_taken(session: Session, catalog: str, namespace: str, name: str) -> None:
    """Tables and views share a namespace's names (as the spec's AlreadyExists says)."""
    if session.get(IcebergTableRow, (catalog, namespace, name)) is not None:
        raise AlreadyExists(f"Table already exists: {'.'.join(levels(namespace))}.{name}")
    if session.get(IcebergViewRow, (catalog, namespace, name)) is not None:
        raise AlreadyExists(f"View with same name already exists: {'.'.join(levels(namespace))}.{name}")


def create_pointer(session: Session, catalog: str, namespace: str, table: str, location: str) -> IcebergTableRow:
    return add_pointer(session, IcebergTableRow, "table_name", (catalog, namespace, table), location)


def add_pointer(
    session: Session, model: type[Pointer], name_field: str, key: tuple[str, str, str], location: str
) -> Pointer:
    """A new pointer (a table's or a view's, `model`) at version 0, under a name no table or view has."""
    catalog, namespace, name = key
    get_namespace(session, catalog, namespace)
    name_taken(session, catalog, namespace, name)
    now = utcnow()
    fields = {"catalog_name": catalog, "namespace": namespace, name_field: name, "metadata_location": location}
    row = model(**fields, version=0, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    return row


def swap_pointer(
    session: Session, catalog: str, namespace: str, table: str, expected: str, version: int, new: str
) -> bool:
    """Compare-and-swap the metadata location (and its version); False when another commit won."""
    return swap_row(
        session, IcebergTableRow, IcebergTableRow.table_name, (catalog, namespace, table), expected, version, new
    )


@functools.cache
def _swap_statement(model: Any, name: Any) -> Any:
    """A pointer's compare-and-swap as one statement of bound parameters, built once: building and keying it
    anew (for SQLAlchemy's compiled cache) cost more than running it, on every commit. A statement on the table,
    not the mapped class: the ORM's bulk update path keyed it anew each time, and nothing of the session's is
    to be synchronised (the swap's rows are never loaded in its transaction)."""
    table = typed(Table, model.__table__)
    return (
        update(table)
        .where(
            table.c.catalog_name == bindparam("w_catalog"),
            table.c.namespace == bindparam("w_namespace"),
            table.c[name.key] == bindparam("w_name"),
            table.c.metadata_location == bindparam("w_expected"),
            table.c.version == bindparam("w_version"),
        )
        .values(metadata_location=bindparam("new"), version=bindparam("new_version"), updated_at=bindparam("now"))
    )


def swap_row(
    session: Session, model: Any, name: Any, key: tuple[str, str, str], expected: str, version: int, new: str
) -> bool:
    """A pointer's compare-and-swap (tables and views alike)."""
    catalog, namespace, item = key
    arguments: dict[str, Any] = {"w_catalog": catalog, "w_namespace": namespace, "w_name": item, "w_expected": expected}
    arguments |= {"w_version": version, "new": new, "new_version": version + 1, "now": utcnow()}
    result = session.execute(_swap_statement(model, name), arguments)
    session.flush()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def drop_pointer(session: Session, catalog: str, namespace: str, table: str) -> IcebergTableRow:
    row = get_pointer(session, catalog, namespace, table)
    session.delete(row)
    session.flush()
    return row


def rename_pointer(session: Session, catalog: str, source: tuple[str, str], target: tuple[str, str]) -> None:
    row = get_pointer(session, catalog, *source)
    rename_row(session, row, IcebergTableRow.table_name, catalog, source, target)


def rename_row(
    session: Session, row: Any, name: Any, catalog: str, source: tuple[str, str], target: tuple[str, str]
) -> None:
    """A pointer moved to another name (tables and views alike), which no table or view may have."""
    model = type(row)
    get_namespace(session, catalog, target[0])
    name_taken(session, catalog, *target)
    session.execute(
        update(model)
        .where(model.catalog_name == catalog, model.namespace == source[0], name == source[1])
        .values({model.namespace: target[0], name: target[1], model.updated_at: utcnow()})
        .execution_options(synchronize_session=False)
    )
    session.expunge(row)
    session.flush()


# ---- timeline and events


_COMMITS = typed(Table, CommitRow.__table__)
_EVENTS = typed(Table, EventRow.__table__)
_INSERT_COMMIT: Insert = insert(_COMMITS)
_INSERT_EVENT: Insert = insert(_EVENTS)


def record_commit(session: Session, catalog: str, namespace: str, table: str, **fields: Any) -> None:
    """A version on the table's timeline. Written as a plain INSERT, not through the session's unit of work
    (a commit's own rows are never read back in its transaction, and this is on every commit's path)."""
    values = {"catalog_name": catalog, "namespace": namespace, "table_name": table, "committed_at": utcnow()}
    session.execute(_INSERT_COMMIT, {**values, **fields})  # the values as parameters: one statement, keyed once


def timeline(session: Session, catalog: str, namespace: str, table: str, limit: int = 100) -> list[CommitRow]:
    query = (
        select(CommitRow)
        .where(CommitRow.catalog_name == catalog, CommitRow.namespace == namespace, CommitRow.table_name == table)
        .order_by(CommitRow.commit_id.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def add_event(
    session: Session, kind: str, catalog: str, namespace: str, table: str | None, payload: dict[str, Any]
) -> CatalogEvent:
    """An event written into the outbox in the session's transaction; the event its subscribers get. An event
    its type does not know is refused before it is written (InvalidEvent)."""
    checked(kind, payload)
    values: dict[str, Any] = {"type": kind, "catalog_name": catalog, "namespace": namespace, "table_name": table}
    values |= {"payload": payload, "created_at": utcnow()}
    # a plain INSERT (as record_commit)
    result = typed(CursorResult[Any], session.execute(_INSERT_EVENT, values))
    (event_id,) = result.inserted_primary_key or (None,)
    if session.get_bind().dialect.name == "postgresql":  # other nodes' outbox tails wake at the commit
        session.execute(text("SELECT pg_notify(:channel, :id)"), {"channel": EVENTS_CHANNEL, "id": str(event_id)})
    return event(typed(int, event_id), kind, catalog, namespace, table, payload)


def event(
    event_id: int, kind: str, catalog: str, namespace: str, table: str | None, payload: dict[str, Any]
) -> CatalogEvent:
    """An event as its subscribers get it (namespace: the stored key)."""
    return event_of(event_id, kind, catalog, tuple(levels(namespace)), table, payload)


def stored_event(row: EventRow) -> CatalogEvent:
    """An outbox row as the event its subscribers get."""
    return event(row.event_id, row.type, row.catalog_name, row.namespace, row.table_name, row.payload)


def events_after(session: Session, after: int, limit: int, catalog: str | None = None) -> list[EventRow]:
    query = select(EventRow).where(EventRow.event_id > after).order_by(EventRow.event_id).limit(limit)
    if catalog is not None:
        query = query.where(or_(EventRow.catalog_name == catalog))
    return list(session.scalars(query))


def last_event_id(session: Session) -> int:
    return int(session.scalar(select(func.max(EventRow.event_id))) or 0)
