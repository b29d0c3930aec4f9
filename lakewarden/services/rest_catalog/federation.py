"""Talks to the catalogs of record of the external catalogs lakewarden's REST endpoint forwards to (`sql`,
`hive`, `glue`, `rest`), through pyiceberg.

A load reads the table from that catalog and a commit is that catalog's own commit, so a concurrent writer makes it
fail, never lost; lakewarden keeps no copy of the pointer. Each change is written to the outbox like an internal
catalog's. Forwarded: catalogs with `rest-endpoint.enabled=true`, and for lakewarden's optimizers only the ones they
cannot open themselves (Glue)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate

from lakewarden.domain.catalogs import THROUGH_LAKEWARDEN, CatalogSpec, serves_rest_endpoint
from lakewarden.domain.errors import (
    AlreadyExists,
    CommitFailed,
    InvalidField,
    NoSuchNamespace,
    NoSuchTable,
    NoSuchWarehouse,
    NotFound,
    Unsupported,
)
from lakewarden.domain.events import EventType
from lakewarden.domain.storage import StorageProfile
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.services.rest_catalog.loads import LoadedTable
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database


@dataclass(frozen=True)
class Forwarded:
    """A catalog served by forwarding: its registration, pyiceberg's client of it, its storage profile (None
    when its properties describe none), and whether clients other than lakewarden's optimizers may use it."""

    spec: CatalogSpec
    catalog: Any
    profile: StorageProfile | None
    open_to_clients: bool


class Federation:
    def __init__(self, db: Database, outbox: Outbox) -> None:
        self.db = db
        self.outbox = outbox
        self._lock = threading.Lock()
        self._known: dict[str, Forwarded | None] = {}  # by catalog name; None: not forwarded

    def forget(self, name: str) -> None:
        """A catalog was changed or removed: look it up afresh next time."""
        with self._lock:
            self._known.pop(name, None)

    def find(self, name: str) -> Forwarded | None:
        """The forwarded catalog of that name, or None when the name is no such catalog (an internal catalog, an
        unknown name, an external catalog not served)."""
        with self._lock:
            if name in self._known:
                return self._known[name]
        forwarded: Forwarded | None = None
        with self.db.read() as session:
            try:
                spec = catalog_store.spec_of(catalog_store.get_catalog(session, name))
            except NotFound:
                spec = None
        if (
            spec is not None
            and (serves_rest_endpoint(spec) or spec.type in THROUGH_LAKEWARDEN)
            and spec.type != "internal"
        ):
            try:
                profile: StorageProfile | None = (
                    StorageProfile.of(spec.properties) if spec.properties.get("warehouse") else None
                )
            except InvalidField:
                profile = None
            forwarded = Forwarded(spec, open_catalog(spec), profile, serves_rest_endpoint(spec))
        with self._lock:
            self._known[name] = forwarded
        return forwarded

    def serves(self, name: str) -> bool:
        return self.find(name) is not None

    def known_as(self, name: str) -> tuple[bool, Forwarded | None]:
        """Without any I/O: whether the name was looked up yet, and the forwarded catalog it was found to be."""
        with self._lock:
            return name in self._known, self._known.get(name)

    def known(self, name: str) -> bool | None:
        """Without any I/O: whether the name is a forwarded catalog, as last looked up; None when not looked up
        yet (the hot path of an internal catalog's loads asks this on the event loop)."""
        with self._lock:
            if name not in self._known:
                return None
            return self._known[name] is not None

    def _get(self, name: str) -> Forwarded:
        found = self.find(name)
        if found is None:
            raise NoSuchWarehouse(f"warehouse {name!r} is not a catalog this lakewarden serves")
        return found

    # ---- namespaces and tables

    def list_namespaces(self, name: str, parent: tuple[str, ...] | None) -> list[tuple[str, ...]]:
        with _translated():
            return [tuple(ns) for ns in self._get(name).catalog.list_namespaces(parent or ())]

    def load_namespace(self, name: str, namespace: tuple[str, ...]) -> dict[str, str]:
        with _translated():
            return dict(self._get(name).catalog.load_namespace_properties(namespace))

    def create_namespace(self, name: str, namespace: tuple[str, ...], properties: dict[str, str]) -> None:
        with _translated():
            self._get(name).catalog.create_namespace(namespace, properties)

    def list_tables(self, name: str, namespace: tuple[str, ...]) -> list[str]:
        with _translated():
            return [identifier[-1] for identifier in self._get(name).catalog.list_tables(namespace)]

    def load_table(self, name: str, namespace: tuple[str, ...], table: str) -> LoadedTable:
        with _translated():
            loaded = self._get(name).catalog.load_table((*namespace, table))
        return LoadedTable(loaded.metadata_location, loaded.metadata)

    def table_exists(self, name: str, namespace: tuple[str, ...], table: str) -> bool:
        try:
            self.load_table(name, namespace, table)
        except NoSuchTable:
            return False
        return True

    def create_table(
        self,
        name: str,
        namespace: tuple[str, ...],
        table: str,
        schema: Schema,
        partition_spec: PartitionSpec | None,
        write_order: SortOrder | None,
        location: str | None,
        properties: dict[str, str],
    ) -> LoadedTable:
        with _translated():
            created = self._get(name).catalog.create_table(
                (*namespace, table),
                schema,
                location=location,
                partition_spec=partition_spec or UNPARTITIONED_PARTITION_SPEC,
                sort_order=write_order or UNSORTED_SORT_ORDER,
                properties=properties,
            )
        self._announce(EventType.TABLE_CREATED, name, namespace, table, created.metadata_location)
        return LoadedTable(created.metadata_location, created.metadata)

    def commit_table(
        self,
        name: str,
        namespace: tuple[str, ...],
        table: str,
        requirements: list[TableRequirement],
        updates: list[TableUpdate],
    ) -> LoadedTable:
        """The catalog of record's own commit; CommitFailed (409) when a requirement fails or a concurrent commit
        won, as the catalog says."""
        catalog = self._get(name).catalog
        with _translated():
            current = catalog.load_table((*namespace, table))
            response = catalog.commit_table(current, tuple(requirements), tuple(updates))
        self._announce(EventType.TABLE_COMMITTED, name, namespace, table, response.metadata_location)
        return LoadedTable(response.metadata_location, response.metadata)

    def drop_table(self, name: str, namespace: tuple[str, ...], table: str, purge: bool) -> None:
        if purge:  # nothing lakewarden does deletes the files of a table it does not own
            raise Unsupported("a forwarded catalog's table is dropped without purging: its files are its owner's")
        with _translated():
            self._get(name).catalog.drop_table((*namespace, table))
        self._announce(EventType.TABLE_DROPPED, name, namespace, table, None)

    def _announce(
        self, kind: EventType, name: str, namespace: tuple[str, ...], table: str, location: str | None
    ) -> None:
        with self.db.write(any_node=True) as session:
            event = self.outbox.write(
                session,
                kind,
                name,
                store.key(list(namespace)),
                table,
                {"metadata_location": location, "forwarded": True},
            )
        self.outbox.publish([event])


@contextmanager
def _translated() -> Iterator[None]:
    """pyiceberg's exceptions as lakewarden's (the REST catalog's error answers)."""
    try:
        yield
    except NoSuchTableError as exc:
        raise NoSuchTable(str(exc)) from exc
    except NoSuchNamespaceError as exc:
        raise NoSuchNamespace(str(exc)) from exc
    except (TableAlreadyExistsError, NamespaceAlreadyExistsError) as exc:
        raise AlreadyExists(str(exc)) from exc
    except CommitFailedException as exc:
        raise CommitFailed(str(exc)) from exc
