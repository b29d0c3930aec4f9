"""How lakewarden's own services (the explorer, evaluator and planner) reach a catalog's tables: internal catalogs
straight from the REST catalog's store and loads, in process (no HTTP round trip to ourselves); every other
catalog opened as usual."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from lakewarden.domain.catalogs import FORMAT_OF_CATALOG, CatalogSpec
from lakewarden.domain.errors import NotFound
from lakewarden.metadata.catalogs import opened_catalog
from lakewarden.services.rest_catalog.loads import TableLoads
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InternalTables:
    """What reading internal catalogs in process takes: the system database (their listings) and the REST
    catalog's reads of a table."""

    db: Database
    loads: TableLoads


class InProcessCatalog:
    """An internal catalog as lakewarden's own services read it. Read-only."""

    def __init__(self, internal: InternalTables, name: str) -> None:
        self.internal = internal
        self.name = name

    def list_namespaces(self, namespace: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        with self.internal.db.read() as session:
            found = store.list_namespaces(session, self.name, store.key(namespace) if namespace else None)
        return [tuple(store.levels(ns)) for ns in found]

    def list_tables(self, namespace: tuple[str, ...]) -> list[tuple[str, ...]]:
        with self.internal.db.read() as session:
            return [(*namespace, t) for t in store.list_pointers(session, self.name, store.key(namespace))]

    def table_locations(self) -> list[tuple[str, str, str]]:
        """Every table's database, name and metadata location (metadata/catalogs.py `table_locations`)."""
        with self.internal.db.read() as session:
            return store.pointer_locations(session, self.name)

    def load_table(self, identifier: tuple[str, ...]) -> Table:
        try:
            return self.internal.loads.table(self.name, store.key(identifier[:-1]), identifier[-1])
        except NotFound as exc:
            raise NoSuchTableError(str(exc)) from exc


def catalog_for(spec: CatalogSpec, internal: InternalTables | None) -> AbstractContextManager[Any]:
    """The catalog to read `spec`'s tables through: in process for internal catalogs, else opened as usual."""
    if spec.type == "internal" and internal is not None:
        return nullcontext(InProcessCatalog(internal, spec.name))
    return opened_catalog(spec)


FORMAT_ONLY = object()  # a catalog of Hudi or Paimon tables: judged from what the explorer recorded, never opened


class PassCatalogs:
    """The catalogs a pass reads, each opened when its first table comes and closed with the pass; a catalog that
    cannot be opened is skipped for the pass (its tables stay due)."""

    def __init__(self, specs: dict[str, CatalogSpec], internal: InternalTables | None) -> None:
        self.specs = specs
        self.internal = internal
        self._open: dict[str, Any] = {}
        self._stack = ExitStack()

    def of(self, name: str) -> Any:
        """The catalog to read a table of catalog `name` through, FORMAT_ONLY, or None (gone, or failed)."""
        if name in self._open:
            return self._open[name]
        spec = self.specs.get(name)
        catalog: Any = None
        if spec is not None and spec.type in FORMAT_OF_CATALOG:
            catalog = FORMAT_ONLY
        elif spec is not None:
            try:
                catalog = self._stack.enter_context(catalog_for(spec, self.internal))
            except Exception as exc:
                log.warning("cannot evaluate the tables of catalog %s: %s", name, exc)
        self._open[name] = catalog
        return catalog

    def __enter__(self) -> PassCatalogs:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
