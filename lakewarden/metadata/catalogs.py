"""Opening registered catalogs with pyiceberg, listing their tables and summarising them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden._compat.pyiceberg import views_filter
from lakewarden.domain.catalogs import CatalogSpec, TableFilter
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.tables import TableSnapshot

MAX_NAMESPACE_DEPTH = 8


class TableSource(Protocol):
    """What lakewarden's services read a catalog through: a pyiceberg Catalog has it, and so have the readers of
    catalogs pyiceberg lacks or cannot share between threads (metadata/hive.py, metadata/filesystem.py)."""

    name: str

    def list_namespaces(self, namespace: tuple[str, ...] = ()) -> list[tuple[str, ...]]: ...

    def list_tables(self, namespace: tuple[str, ...]) -> list[tuple[str, ...]]: ...

    def load_table(self, identifier: tuple[str, ...]) -> Table: ...


def _sql_uri(uri: str, must_exist: bool) -> str:
    """For exploring, open SQLite read-write without creating it: a vanished file is an error, not an empty catalog."""
    if must_exist and uri.startswith("sqlite:////") and "?" not in uri:
        return f"sqlite:///file:{uri[len('sqlite:///') :]}?mode=rw&uri=true"
    return uri


def _load_sql(spec: CatalogSpec, initialize: bool) -> Catalog:
    from pyiceberg.catalog.sql import SqlCatalog

    props = spec.connection_properties
    props["uri"] = _sql_uri(props["uri"], must_exist=not initialize)
    props["init_catalog_tables"] = "true" if initialize else "false"
    return SqlCatalog(spec.name, **props)


def _load_rest(spec: CatalogSpec, initialize: bool) -> Catalog:
    from lakewarden.metadata.rest_tables import RestTables

    return RestTables(spec.name, **spec.connection_properties)


def _load_internal(spec: CatalogSpec, initialize: bool) -> Catalog:
    """lakewarden's own REST catalog, through its REST API like any client (the name is the warehouse)."""
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(spec.name, uri=spec.properties["uri"], warehouse=spec.name)


def _load_hive(spec: CatalogSpec, initialize: bool) -> TableSource:
    from lakewarden.metadata.hive import HiveTables

    return HiveTables(spec.name, spec.connection_properties)


def _load_filesystem(spec: CatalogSpec, initialize: bool) -> TableSource:
    from lakewarden.metadata.filesystem import FilesystemTables

    return FilesystemTables(spec.name, spec.connection_properties)


def _load_glue(spec: CatalogSpec, initialize: bool) -> Catalog:
    from lakewarden.metadata.glue import GlueTables

    return GlueTables(spec.name, **spec.connection_properties)


# Lazy loaders by catalog type, as pyiceberg's AVAILABLE_CATALOGS: importing one costs nothing until used.
CATALOG_LOADERS: dict[str, Callable[[CatalogSpec, bool], Catalog | TableSource]] = {
    "sql": _load_sql,
    "rest": _load_rest,
    "internal": _load_internal,
    "hive": _load_hive,
    "filesystem": _load_filesystem,
    "glue": _load_glue,
}


def open_catalog(spec: CatalogSpec, initialize: bool = False) -> Any:
    """A pyiceberg catalog for a registration. `initialize` creates an SQL catalog's tables when absent."""
    loader = CATALOG_LOADERS.get(spec.type)
    if loader is None:
        raise InvalidField("type", f"{spec.type!r} catalogs cannot be opened")
    return loader(spec, initialize)


@contextmanager
def opened_catalog(spec: CatalogSpec) -> Iterator[Catalog]:
    """A catalog for the duration of a block, its connections released afterwards."""
    catalog = open_catalog(spec)
    try:
        yield catalog
    finally:
        close = getattr(catalog, "close", None)
        if callable(close):
            close()


def initialize_catalog(spec: CatalogSpec) -> None:
    """Create what a new catalog needs before Spark uses it (an SQL catalog's two tables).

    Spark's JdbcCatalog must not create them itself on SQLite (it keeps a read lock open that
    blocks every other writer), so lakewarden creates them with pyiceberg, in the layout Java expects.
    """
    if spec.type == "sql":
        catalog = open_catalog(spec, initialize=True)
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()


def list_tables(catalog: Catalog, table_filter: TableFilter) -> Iterator[tuple[str, str]]:
    """(database, table) of every table the filters accept; namespaces are walked to any depth.

    Errors propagate: a listing that fails part-way must not look like a catalog that lost tables.
    """
    pending: list[tuple[str, ...]] = [()]
    seen: set[tuple[str, ...]] = set()
    while pending:
        parent = pending.pop()
        children = catalog.list_namespaces(parent) if parent else catalog.list_namespaces()
        for namespace in children:
            namespace = tuple(namespace)
            if namespace in seen or namespace == parent or len(namespace) > MAX_NAMESPACE_DEPTH:
                continue
            seen.add(namespace)
            pending.append(namespace)
            database = ".".join(namespace)
            if not table_filter.accepts_database(database):
                continue
            for identifier in catalog.list_tables(namespace):
                name = identifier[-1]
                if table_filter.accepts_table(database, name):
                    yield database, name


def table_locations(catalog: Any, table_filter: TableFilter) -> dict[tuple[str, str], str] | None:
    """(database, table) -> current metadata location of every table the filters accept, in one read, where the
    catalog keeps them together: Iceberg's SQL (JDBC) catalog, in its `iceberg_tables` table, and lakewarden's
    internal catalog; and where they are read cheaply a batch at a time: a Hive Metastore's table objects, Glue's
    pages of tables, a filesystem catalog's version hints, a REST catalog's conditional loads (304 for a table
    unchanged). With them a refresh loads only the tables whose location moved. None when the catalog cannot tell:
    each table is then loaded to learn its location."""
    if isinstance(catalog, SqlCatalog):
        query = select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == catalog.name
        )
        views = views_filter(catalog)  # views share the table
        if views is not None:
            query = query.where(views)
        with Session(catalog.engine) as session:
            rows = session.execute(query).all()
    elif hasattr(catalog, "table_locations"):
        rows = catalog.table_locations()
    else:
        return None
    return {
        (database, name): location
        for database, name, location in rows
        if location and table_filter.accepts_database(database) and table_filter.accepts_table(database, name)
    }


def _int(summary: dict[str, str], key: str) -> int:
    try:
        return int(summary.get(key, 0))
    except (TypeError, ValueError):
        return 0


def snapshot_of(table: Table) -> TableSnapshot:
    return snapshot_of_metadata(table.metadata, table.metadata_location)


def snapshot_of_metadata(metadata: TableMetadata, metadata_location: str) -> TableSnapshot:
    """The summary the explorer keeps, from parsed metadata (no catalog round trip needed)."""
    current = metadata.current_snapshot_id
    snapshot = metadata.snapshot_by_id(current) if current is not None else None
    totals = dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}
    spec = metadata.spec()
    summary: dict[str, Any] = {
        "format-version": metadata.format_version,
        "location": metadata.location,
        "partition-spec": [f"{f.transform}({metadata.schema().find_column_name(f.source_id)})" for f in spec.fields],
        "snapshot-count": len(metadata.snapshots),
        "last-updated-ms": metadata.last_updated_ms,
        "operation": snapshot.summary.operation.value if snapshot and snapshot.summary else None,
        "data-files": _int(totals, "total-data-files"),
        "delete-files": _int(totals, "total-delete-files"),
        "position-deletes": _int(totals, "total-position-deletes"),
        "equality-deletes": _int(totals, "total-equality-deletes"),
        "records": _int(totals, "total-records"),
        "files-size-bytes": _int(totals, "total-files-size"),
    }
    return TableSnapshot(
        metadata_location=metadata_location,
        current_snapshot_id=snapshot.snapshot_id if snapshot else None,
        properties=dict(metadata.properties),
        summary=summary,
    )
