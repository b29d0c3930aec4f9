"""Store functions for discovered tables and their runtimes. They flush, never commit."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, delete, func, literal, select, tuple_
from sqlalchemy.orm import Session

from lakewarden.domain.errors import NotFound
from lakewarden.domain.tables import TableIdentifier, TableSnapshot, TableStatus
from lakewarden.store.database import utcnow
from lakewarden.store.models import TableIdentifierRow, TableRuntimeRow


@dataclass(frozen=True)
class TableRecord:
    identifier: TableIdentifierRow
    runtime: TableRuntimeRow

    @property
    def name(self) -> TableIdentifier:
        return TableIdentifier(self.identifier.catalog_name, self.identifier.db_name, self.identifier.table_name)


def _query() -> Select[TableIdentifierRow, TableRuntimeRow]:
    return select(TableIdentifierRow, TableRuntimeRow).join(
        TableRuntimeRow, TableRuntimeRow.table_id == TableIdentifierRow.table_id
    )


def list_tables(
    session: Session,
    catalog: str | None = None,
    database: str | None = None,
    status: TableStatus | None = None,
    group: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    name: str | None = None,
    after: TableIdentifier | None = None,
    statuses: Collection[TableStatus] | None = None,
) -> list[TableRecord]:
    """Managed tables by catalog, database and table name, filtered; `name`: a part of `catalog.database.table`
    (any case); `after`: the page after that table (keyset paging: as quick at the end of a million tables as at
    the start, where an `offset` walks every row before it)."""
    query = _query()
    if name:
        pattern = "%" + name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        full = TableIdentifierRow.catalog_name + "." + TableIdentifierRow.db_name + "." + TableIdentifierRow.table_name
        query = query.where(func.lower(full).like(pattern, escape="\\"))
    if after is not None:
        key = tuple_(TableIdentifierRow.catalog_name, TableIdentifierRow.db_name, TableIdentifierRow.table_name)
        query = query.where(key > tuple_(literal(after.catalog), literal(after.database), literal(after.table)))
    if catalog is not None:
        query = query.where(TableIdentifierRow.catalog_name == catalog)
    if database is not None:
        query = query.where(TableIdentifierRow.db_name == database)
    if status is not None:
        query = query.where(TableRuntimeRow.status_code == int(status))
    if statuses is not None:  # by the status index: a few tables of a million
        query = query.where(TableRuntimeRow.status_code.in_([int(s) for s in statuses]))
    if group is not None:
        query = query.where(TableRuntimeRow.optimizing_group == group)
    query = query.order_by(TableIdentifierRow.catalog_name, TableIdentifierRow.db_name, TableIdentifierRow.table_name)
    query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    return [TableRecord(ident, runtime) for ident, runtime in session.execute(query)]


def get_table(session: Session, name: TableIdentifier) -> TableRecord:
    row = session.execute(
        _query().where(
            TableIdentifierRow.catalog_name == name.catalog,
            TableIdentifierRow.db_name == name.database,
            TableIdentifierRow.table_name == name.table,
        )
    ).first()
    if row is None:
        raise NotFound(f"table {name} is not managed by lakewarden")
    return TableRecord(row[0], row[1])


def add_table(
    session: Session, name: TableIdentifier, group: str, config: dict[str, str], fmt: str = "iceberg"
) -> TableRecord:
    now = utcnow()
    ident = TableIdentifierRow(
        catalog_name=name.catalog, db_name=name.database, table_name=name.table, format=fmt, created_at=now
    )
    session.add(ident)
    session.flush()
    runtime = TableRuntimeRow(
        table_id=ident.table_id,
        status_code=int(TableStatus.IDLE),
        status_changed_at=now,
        optimizing_group=group,
        config=config,
        summary={},
        next_evaluation_at=now,  # never evaluated: due at once
    )
    session.add(runtime)
    session.flush()
    return TableRecord(ident, runtime)


def due_for_evaluation(session: Session, now: datetime) -> list[TableRecord]:
    """IDLE and PENDING tables whose `next_evaluation_at` has come. Whatever deserves a new verdict sets it: a new
    table, a new snapshot or configuration (record_table_snapshot), a process's end, and each verdict for its
    time-based triggers. So the pass reads a range of that column's index, not every table: a table that does not
    change is not read until a time-based trigger can fire."""
    runtime = TableRuntimeRow
    query = _query().where(
        runtime.next_evaluation_at <= now,
        # `+ 0`: not by the status index, which would walk every idle table of a million
        (runtime.status_code + 0).in_([TableStatus.IDLE.value, TableStatus.PENDING.value]),
    )
    return [TableRecord(ident, rt) for ident, rt in session.execute(query)]


@dataclass(frozen=True)
class KnownTable:
    table_id: int
    metadata_location: str | None
    failed: bool  # its last refresh failed


def table_locations(
    session: Session, catalog: str, names: set[TableIdentifier] | None = None
) -> dict[TableIdentifier, KnownTable]:
    """The managed tables of the catalog (of `names` only, when given): id, recorded metadata location and
    whether the last refresh failed. Columns only: cheap for a catalog of a million tables."""
    query = (
        select(
            TableIdentifierRow.db_name,
            TableIdentifierRow.table_name,
            TableIdentifierRow.table_id,
            TableRuntimeRow.metadata_location,
            TableRuntimeRow.refresh_error,
        )
        .join(TableRuntimeRow, TableRuntimeRow.table_id == TableIdentifierRow.table_id)
        .where(TableIdentifierRow.catalog_name == catalog)
    )
    found: dict[TableIdentifier, KnownTable] = {}
    chunks = (
        [None] if names is None else [sorted({n.table for n in names})[i : i + 500] for i in range(0, len(names), 500)]
    )
    for chunk in chunks:
        rows = session.execute(query if chunk is None else query.where(TableIdentifierRow.table_name.in_(chunk)))
        for database, name, table_id, location, error in rows:
            key = TableIdentifier(catalog, database, name)
            if names is None or key in names:
                found[key] = KnownTable(table_id, location, error is not None)
    return found


def tables_by_id(session: Session, table_ids: list[int]) -> dict[TableIdentifier, TableRecord]:
    """The managed tables with these ids, by name."""
    found: dict[TableIdentifier, TableRecord] = {}
    for start in range(0, len(table_ids), 500):
        chunk = table_ids[start : start + 500]
        for ident, runtime in session.execute(_query().where(TableIdentifierRow.table_id.in_(chunk))):
            record = TableRecord(ident, runtime)
            found[record.name] = record
    return found


def record_table_snapshot(
    session: Session, runtime: TableRuntimeRow, snapshot: TableSnapshot, group: str, config: dict[str, str]
) -> None:
    if dict(runtime.config or {}) != config:
        runtime.evaluated_at = None  # a new configuration deserves a new verdict
        runtime.next_evaluation_at = utcnow()
    elif runtime.current_snapshot_id != snapshot.current_snapshot_id:  # and so does a new snapshot
        runtime.next_evaluation_at = utcnow()
    runtime.metadata_location = snapshot.metadata_location
    runtime.current_snapshot_id = snapshot.current_snapshot_id
    runtime.summary = snapshot.summary
    runtime.config = config
    runtime.optimizing_group = group
    runtime.last_refreshed_at = utcnow()
    runtime.refresh_error = None
    session.flush()


def record_table_error(session: Session, runtime: TableRuntimeRow, error: str) -> None:
    runtime.refresh_error = error
    runtime.last_refreshed_at = utcnow()
    session.flush()


def dispose_table(session: Session, table_id: int) -> None:
    """Forget a table that no longer exists in its catalog."""
    session.execute(delete(TableRuntimeRow).where(TableRuntimeRow.table_id == table_id))
    session.execute(delete(TableIdentifierRow).where(TableIdentifierRow.table_id == table_id))
    session.flush()


def runtime_of(session: Session, table_id: int) -> TableRuntimeRow | None:
    return session.get(TableRuntimeRow, table_id)


def runtime_config(session: Session, table_id: int) -> dict[str, str]:
    """The table's effective configuration (empty when the table is gone)."""
    runtime = session.get(TableRuntimeRow, table_id)
    return {} if runtime is None else dict(runtime.config)
