"""How lakewarden's own services reach a catalog's tables: internal catalogs straight from the
metadata service, in-process (no HTTP round trip to ourselves); every other catalog opened as usual."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import NotFound
from lakewarden.metadata.catalogs import opened_catalog
from lakewarden.services.metadata_service import MetadataService
from lakewarden.store import metadata as store


class InProcessCatalog:
    """An internal catalog as lakewarden's own services read it (the explorer, evaluator and planner):
    straight from the metadata service, with no HTTP round trip to ourselves. Read-only."""

    def __init__(self, service: MetadataService, name: str) -> None:
        self.service = service
        self.name = name

    def list_namespaces(self, namespace: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        with self.service.db.read() as session:
            found = store.list_namespaces(session, self.name, store.key(namespace) if namespace else None)
        return [tuple(store.levels(ns)) for ns in found]

    def list_tables(self, namespace: tuple[str, ...]) -> list[tuple[str, ...]]:
        with self.service.db.read() as session:
            return [(*namespace, t) for t in store.list_pointers(session, self.name, store.key(namespace))]

    def table_locations(self) -> list[tuple[str, str, str]]:
        """Every table's database, name and metadata location (metadata/catalogs.py `table_locations`)."""
        with self.service.db.read() as session:
            return store.pointer_locations(session, self.name)

    def load_table(self, identifier: tuple[str, ...]) -> Table:
        try:
            return self.service.table(self.name, store.key(identifier[:-1]), identifier[-1])
        except NotFound as exc:
            raise NoSuchTableError(str(exc)) from exc


def catalog_for(spec: CatalogSpec, service: MetadataService | None) -> AbstractContextManager[Any]:
    """The catalog to read `spec`'s tables through: in-process for internal catalogs, else opened as usual."""
    if spec.type == "internal" and service is not None:
        return nullcontext(InProcessCatalog(service, spec.name))
    return opened_catalog(spec)
