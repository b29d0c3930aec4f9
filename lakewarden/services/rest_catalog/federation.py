"""Talks to the catalogs of record of the external catalogs lakewarden's REST endpoint forwards to (`sql`,
`hive`, `glue`, `rest`), through pyiceberg.

A load reads the table from that catalog and a commit is that catalog's own commit, so a concurrent writer makes it
fail, never lost; lakewarden keeps no copy of the pointer. Each change is written to the outbox like an internal
catalog's. Forwarded: catalogs with `rest-endpoint.enabled=true`, and for lakewarden's optimizers only the ones they
cannot open themselves (Glue)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
from lakewarden.metadata.report_filters import ReportedFilter
from lakewarden.metadata.yielding import (
    PastYieldWindow,
    Yielded,
    yield_to_planned_write,
    yield_to_writer,
    yield_window_ms,
)
from lakewarden.services.rest_catalog.commits import YIELD_ATTEMPTS
from lakewarden.services.rest_catalog.loads import LoadedTable
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.writes_in_flight import WritesInFlight
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
    def __init__(self, db: Database, outbox: Outbox, flights: WritesInFlight | None = None) -> None:
        self.db = db
        self.outbox = outbox
        self.flights = flights or WritesInFlight()  # shared with the own catalogs' commits and the dispatcher
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
        won, as the catalog says. A commit that fails only because of lakewarden's own work since its base lands
        over it, as on lakewarden's own catalogs (metadata/yielding.py): the yielded commit is the catalog of
        record's one compare-and-swap."""
        catalog = self._get(name).catalog
        with _translated():
            current = catalog.load_table((*namespace, table))
            yielded = _yielded(current, requirements, updates)
            if yielded is not None:
                requirements, updates = list(yielded.requirements), list(yielded.updates)
            try:
                response = catalog.commit_table(current, tuple(requirements), tuple(updates))
            except Exception:
                _discard(current.io, yielded.written if yielded is not None else [])
                raise
        self._announce(EventType.TABLE_COMMITTED, name, namespace, table, response.metadata_location)
        self.flights.landed((name, store.key(list(namespace)), table), updates)
        return LoadedTable(response.metadata_location, response.metadata)

    def yield_to_planned_write(
        self, name: str, namespace: tuple[str, ...], table: str, snapshot_id: int, reported_filter: Any, writer: str
    ) -> Yielded | None:
        """A client reported the scan of a row-level write planned on `snapshot_id` through this endpoint:
        lakewarden's work since then that the write may name is undone in the catalog of record now."""
        catalog = self._get(name).catalog
        for _ in range(YIELD_ATTEMPTS):  # another of lakewarden's commits may land meanwhile: undo that too
            with _translated():
                current = catalog.load_table((*namespace, table))
                metadata = current.metadata
                window = yield_window_ms(metadata.properties)
                if window is None or metadata.current_snapshot_id == snapshot_id:
                    return None
                matches = ReportedFilter(reported_filter, metadata.schema(), metadata.specs()).may_match
                now = int(time.time() * 1000)
                yielded = yield_to_planned_write(current.io, metadata, snapshot_id, matches, window, now, writer)
                if yielded is None:
                    return None
                try:
                    response = catalog.commit_table(current, tuple(yielded.requirements), tuple(yielded.updates))
                except CommitFailedException:  # the table moved: looked at again
                    _discard(current.io, yielded.written)
                    continue
            self._announce(EventType.TABLE_COMMITTED, name, namespace, table, response.metadata_location)
            return yielded
        return None

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


def _yielded(current: Any, requirements: list[TableRequirement], updates: list[TableUpdate]) -> Yielded | None:
    """The commit moved over lakewarden's own work, when only that work makes its requirements fail."""
    try:
        for requirement in requirements:
            requirement.validate(current.metadata)
        return None
    except CommitFailedException:
        pass
    window = yield_window_ms(current.metadata.properties)
    if window is None:
        return None
    try:
        return yield_to_writer(current.io, current.metadata, requirements, updates, window, int(time.time() * 1000))
    except PastYieldWindow as exc:
        raise CommitFailed(str(exc)) from exc


def _discard(io: Any, paths: list[str]) -> None:
    for path in paths:
        with suppress(OSError):
            io.delete(path)


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
