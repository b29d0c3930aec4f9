"""Store functions for discovered tables and their runtimes. They flush, never commit."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    column,
    delete,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
    tuple_,
    update,
)
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


FEW = 5000  # matches a filter's own index answers at once; more, and a page of them is found walking by name
WALK = 50_000  # tables walked by name for a page of a filter that matches many, before asking its index
MANY = 20_000  # matches a filter's index finds and sorts quicker than walking by name to where they cluster


def _few(session: Session, ids: Select[int] | None) -> list[int] | None:
    """The table ids a filter selects by its own index, when there are at most FEW; None when there are more.

    A filtered page is ordered by name. A rare match is best found by the filter's index and then sorted; a common
    one by walking the tables in name order until a page is full, which, when more than FEW of a million match,
    takes a few thousand rows where sorting all matches would take all of them. Databases without statistics
    (SQLite) cannot tell which case they are in; the capped read tells them."""
    if ids is None:
        return None
    found = list(session.scalars(ids.limit(FEW + 1)))
    return None if len(found) > FEW else found


# the trigram index of table names (migration 0020): an FTS5 table on SQLite, a GIN index on PostgreSQL
TABLE_SEARCH = table("table_search", column("rowid"), column("name"))
TRIGRAM_INDEX = "ix_table_identifier_name_trgm"


def _full_name(session: Session) -> ColumnElement[str]:
    """`catalog.database.table`, with the dots written in the statement (PostgreSQL's index of the expression
    matches it only so), lower-cased on PostgreSQL (SQLite's LIKE ignores ASCII case, and its lower() folds only
    ASCII)."""
    dot: ColumnElement[str] = literal_column("'.'")
    full = TableIdentifierRow.catalog_name.op("||")(dot).op("||")(TableIdentifierRow.db_name)
    full = full.op("||")(dot).op("||")(TableIdentifierRow.table_name)
    return full if session.get_bind().dialect.name == "sqlite" else func.lower(full)


def _named_like(session: Session, name: str) -> ColumnElement[bool]:
    """The tables whose `catalog.database.table` contains `name`, in any case."""
    escaped = name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return _full_name(session).like(f"%{escaped}%", escape="\\")


def _name_candidates(session: Session, name: str, matches: ColumnElement[bool]) -> Select[int] | None:
    """The ids of the tables that may contain `name`, by the trigram index; None without one, or for fewer than
    three characters (a trigram index cannot look those up). On SQLite a superset: FTS5 uses its index only for a
    LIKE without ESCAPE, where `_` and `%` are wildcards."""
    if len(name) < 3:
        return None
    if session.get_bind().dialect.name == "sqlite":
        if session.execute(text("SELECT 1 FROM sqlite_master WHERE name = 'table_search'")).first() is None:
            return None
        return select(TABLE_SEARCH.c.rowid).where(TABLE_SEARCH.c.name.like(f"%{name}%"))
    if session.execute(text(f"SELECT 1 FROM pg_indexes WHERE indexname = '{TRIGRAM_INDEX}'")).first() is None:
        return None
    return select(TableIdentifierRow.table_id).where(matches)  # PostgreSQL chooses its GIN index when it helps


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
    fmt: str | None = None,
) -> list[TableRecord]:
    """Managed tables by catalog, database and table name, filtered; `name`: a part of `catalog.database.table`
    (any case); `after`: the page after that table (keyset paging: as quick at the end of a million tables as at
    the start, where an `offset` walks every row before it)."""
    key = tuple_(TableIdentifierRow.catalog_name, TableIdentifierRow.db_name, TableIdentifierRow.table_name)
    scope: list[ColumnElement[bool]] = []  # on the name index's columns: they bound a walk by name
    if after is not None:
        scope.append(key > tuple_(literal(after.catalog), literal(after.database), literal(after.table)))
    if catalog is not None:
        scope.append(TableIdentifierRow.catalog_name == catalog)
    if database is not None:
        scope.append(TableIdentifierRow.db_name == database)
    plain: list[ColumnElement[bool]] = []
    if statuses is not None:  # by the status index: a few tables of a million
        plain.append(TableRuntimeRow.status_code.in_([int(s) for s in statuses]))
    if group is not None:
        plain.append(TableRuntimeRow.optimizing_group == group)
    if fmt is not None:
        plain.append(TableIdentifierRow.format == fmt)
    # filters with an index of their own: (the ids it may select, the exact condition, the same not by the index)
    indexed: list[tuple[Select[int] | None, ColumnElement[bool], ColumnElement[bool]]] = []
    if name:
        matches = _named_like(session, name)
        indexed.append((_name_candidates(session, name, matches), matches, matches))
    if status is not None:
        by_status = select(TableRuntimeRow.table_id).where(TableRuntimeRow.status_code == int(status))
        # `+ 0`: walking by name, the status is checked on each row, not looked up in its index
        indexed.append(
            (by_status, TableRuntimeRow.status_code == int(status), TableRuntimeRow.status_code + 0 == int(status))
        )

    walk, full = list(plain), list(plain)
    many: list[Select[int]] = []  # the candidates of the filters with an index that match more than FEW
    for candidates, exact, unindexed in indexed:
        few = _few(session, candidates)
        if few is not None:  # a few: by the filter's index, then sorted
            walk.append(TableIdentifierRow.table_id.in_(few))
            full.append(TableIdentifierRow.table_id.in_(few))
        else:
            walk.append(unindexed)
            if candidates is not None:
                many.append(candidates)
                full.append(TableIdentifierRow.table_id.in_(candidates))
        full.append(exact)

    by_runtime = statuses is not None or group is not None or status is not None

    def page(conditions: list[ColumnElement[bool]]) -> list[TableRecord]:
        query = _query().where(*scope, *conditions).order_by(*key.clauses)
        if offset:
            # the rows skipped are walked by the name index alone (a deferred join): an offset of 500,000 used to
            # read each skipped table's runtime row, evaluation and all (0.8 s on SQLite), not its index entry
            ids = select(TableIdentifierRow.table_id)
            if by_runtime:
                ids = ids.join(TableRuntimeRow, TableRuntimeRow.table_id == TableIdentifierRow.table_id)
            ids = ids.where(*scope, *conditions).order_by(*key.clauses).offset(offset)
            query = _query().where(TableIdentifierRow.table_id.in_(ids if limit is None else ids.limit(limit)))
            query = query.order_by(*key.clauses)
        elif limit is not None:
            query = query.limit(limit)
        return [TableRecord(ident, rt) for ident, rt in session.execute(query)]

    if limit is None or not many:
        return page(full)
    # Many match. A page of them usually lies within the next WALK tables by name; if not, they cluster further
    # on: up to MANY of them are taken by the index and sorted, and more are walked to by name.
    bound = session.execute(select(*key.clauses).where(*scope).order_by(*key.clauses).offset(WALK - 1).limit(1)).first()
    if bound is None:
        return page(walk)
    found = page([*walk, key <= tuple_(*(literal(v) for v in bound))])
    if len(found) == limit:
        return found
    if all(_count_upto(session, candidates, MANY) <= MANY for candidates in many):
        return page(full)
    return page(walk)


def _count_upto(session: Session, ids: Select[int], most: int) -> int:
    """How many ids `ids` selects, counting no further than most + 1."""
    return int(session.scalar(select(func.count()).select_from(ids.limit(most + 1).subquery())) or 0)


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
        next_maintenance_at=now,  # and never looked at by the maintenance trigger
    )
    session.add(runtime)
    session.flush()
    return TableRecord(ident, runtime)


def due_for_evaluation(session: Session, now: datetime, since: datetime | None = None) -> list[TableRecord]:
    """IDLE and PENDING tables whose `next_evaluation_at` has come (and, with `since`, came after it). Whatever
    deserves a new verdict sets it: a new table, a new snapshot or configuration (record_table_snapshot), a
    process's end, and each verdict for its time-based triggers. So the pass reads a range of that column's index,
    not every table: a table that does not change is not read until a time-based trigger can fire; `since` narrows
    the range to what changed while a pass ran."""
    runtime = TableRuntimeRow
    query = _query().where(
        runtime.next_evaluation_at <= now,
        *(() if since is None else (runtime.next_evaluation_at > since,)),
        # `+ 0`: not by the status index, which would walk every idle table of a million
        (runtime.status_code + 0).in_([TableStatus.IDLE.value, TableStatus.PENDING.value]),
    )
    return [TableRecord(ident, rt) for ident, rt in session.execute(query)]


def _maintenance_changed(runtime: TableRuntimeRow) -> None:
    """The table changed: each maintenance action that waited for a change is due again once its interval since
    its last look has passed (the trigger adds the interval to `checked`)."""
    runtime.maintenance = _changed_looks(runtime.maintenance or {})
    runtime.next_maintenance_at = utcnow()


def _changed_looks(entries: dict[str, Any]) -> dict[str, Any]:
    """Each action's look, made due again once its interval since the look has passed."""
    return {action: {**entry, "next": entry["checked"]} for action, entry in entries.items()}


def due_for_maintenance(session: Session, now: datetime, limit: int) -> list[TableRecord]:
    """Up to `limit` tables whose `next_maintenance_at` has come, the longest waiting first: a range of its index.
    A new table, a new snapshot or configuration set it to now; the trigger sets it from what it found."""
    # maintenance is Iceberg's: a table of another format is shown and judged, never maintained (domain/hudi.py)
    query = _query().where(TableRuntimeRow.next_maintenance_at <= now, TableIdentifierRow.format == "iceberg")
    query = query.order_by(TableRuntimeRow.next_maintenance_at).limit(limit)
    return [TableRecord(ident, rt) for ident, rt in session.execute(query)]


def record_maintenance(
    session: Session, looks: list[tuple[TableRuntimeRow, dict[str, dict[str, str | None]], datetime | None]]
) -> None:
    """What the maintenance trigger found on tables: (the runtime as it read it, each action's look, when the
    table is next due). A table that changed while the trigger looked keeps the change: its actions are due again
    as `_maintenance_changed` leaves them. One query and one executemany for the batch."""
    ids = [seen.table_id for seen, _, _ in looks]
    if not ids:
        return
    now_known = {
        table_id: (snapshot_id, config)
        for table_id, snapshot_id, config in session.execute(
            select(TableRuntimeRow.table_id, TableRuntimeRow.current_snapshot_id, TableRuntimeRow.config).where(
                TableRuntimeRow.table_id.in_(ids)
            )
        )
    }
    rows = []
    for seen, entries, next_at in looks:
        known = now_known.get(seen.table_id)
        if known is None:  # disposed meanwhile
            continue
        if known != (seen.current_snapshot_id, dict(seen.config)):
            entries, next_at = _changed_looks(entries), utcnow()
        rows.append({"table_id": seen.table_id, "maintenance": entries, "next_maintenance_at": next_at})
    if rows:
        session.execute(update(TableRuntimeRow), rows)
    session.flush()


def make_all_maintenance_due(session: Session) -> int:
    """Every table is looked at by the maintenance trigger once (its schedules changed); how many."""
    result = session.execute(update(TableRuntimeRow).values(next_maintenance_at=utcnow()))
    return int(result.rowcount)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class KnownTable:
    table_id: int
    metadata_location: str | None
    failed: bool  # its last refresh failed


def table_locations(session: Session, catalog: str) -> dict[TableIdentifier, KnownTable]:
    """The managed tables of the catalog: id, recorded metadata location and whether the last refresh failed.
    Columns only: cheap for a catalog of a million tables."""
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
    return {
        TableIdentifier(catalog, database, name): KnownTable(table_id, location, error is not None)
        for database, name, table_id, location, error in session.execute(query)
    }


IN_CHUNK = 500  # values in one `IN (...)` list


def _records(session: Session, column: Any, values: list[Any], *where: Any) -> dict[TableIdentifier, TableRecord]:
    """The managed tables whose `column` is one of `values` (and where `where` holds), by name."""
    found: dict[TableIdentifier, TableRecord] = {}
    for start in range(0, len(values), IN_CHUNK):
        query = _query().where(*where, column.in_(values[start : start + IN_CHUNK]))
        for ident, runtime in session.execute(query):
            record = TableRecord(ident, runtime)
            found[record.name] = record
    return found


def tables_by_id(session: Session, table_ids: list[int]) -> dict[TableIdentifier, TableRecord]:
    """The managed tables with these ids, by name."""
    return _records(session, TableIdentifierRow.table_id, table_ids)


def tables_by_name(session: Session, catalog: str, names: set[TableIdentifier]) -> dict[TableIdentifier, TableRecord]:
    """The managed tables of the catalog with these names (the names of other catalogs are ignored): by database,
    each on the whole (catalog, database, table) index."""
    by_database: dict[str, list[str]] = {}
    for name in sorted(n for n in names if n.catalog == catalog):
        by_database.setdefault(name.database, []).append(name.table)
    found: dict[TableIdentifier, TableRecord] = {}
    for database, tables in by_database.items():
        where = (TableIdentifierRow.catalog_name == catalog, TableIdentifierRow.db_name == database)
        found |= _records(session, TableIdentifierRow.table_name, tables, *where)
    return found


def record_table_snapshot(
    session: Session, runtime: TableRuntimeRow, snapshot: TableSnapshot, group: str, config: dict[str, str]
) -> None:
    changed = dict(runtime.config or {}) != config or runtime.current_snapshot_id != snapshot.current_snapshot_id
    # a table without snapshot ids (of another format, or an empty one) changed when its metadata moved
    changed |= snapshot.current_snapshot_id is None and runtime.metadata_location != snapshot.metadata_location
    if dict(runtime.config or {}) != config:
        runtime.evaluated_at = None  # a new configuration deserves a new verdict
    if changed:  # and so does a new snapshot; both may bring maintenance work
        runtime.next_evaluation_at = utcnow()
        _maintenance_changed(runtime)
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
