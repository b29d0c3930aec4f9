"""The namespaces and tables of lakewarden's REST catalog (catalogs of type `internal`), as they come and go:
namespaces created and dropped; tables created, registered, dropped (and purged in the background) and renamed.

Pointers to each table's current metadata file live in the system database; metadata and data live under the
catalog's warehouse. Every change is recorded on the table's timeline and announced by an event written in the
same transaction as the pointer's (outbox.py). Commits to a table are commits.py's, its reads loads.py's.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder

from lakewarden.domain.catalogs import CatalogSpec, check_object_name
from lakewarden.domain.errors import AlreadyExists, CommitFailed, CommitStateUnknown, InvalidField, Unprocessable
from lakewarden.domain.events import EventType
from lakewarden.metadata.conflicts import check_properties
from lakewarden.metadata.paths import OutsideRoot, check_under, confine_table
from lakewarden.metadata.table_metadata import new_metadata, purge_files, write_metadata
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import LoadedTable
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)


class CatalogTables:
    def __init__(
        self, db: Database, warehouses: Warehouses, files: MetadataFiles, heads: TableHeads, outbox: Outbox
    ) -> None:
        self.db = db
        self.warehouses = warehouses
        self.files = files
        self.heads = heads
        self.outbox = outbox
        self._purges = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakewarden-purge")

    # ---- namespaces

    def create_namespace(self, catalog: str, namespace: str, properties: dict[str, str]) -> None:
        self.warehouses.catalog(catalog)
        for level in store.levels(namespace):
            check_object_name("namespace", level)
        with self.db.write(any_node=True) as session:
            store.create_namespace(session, catalog, namespace, properties)
            event = self.outbox.write(
                session, EventType.NAMESPACE_CREATED, catalog, namespace, None, {"properties": properties}
            )
        self.outbox.publish([event])

    def list_namespaces(self, catalog: str, parent: str | None) -> list[str]:
        self.warehouses.catalog(catalog)
        with self.db.read() as session:
            return store.list_namespaces(session, catalog, parent)

    def load_namespace(self, catalog: str, namespace: str) -> dict[str, str]:
        self.warehouses.catalog(catalog)
        with self.db.read() as session:
            return dict(store.get_namespace(session, catalog, namespace).properties)

    def update_namespace_properties(
        self, catalog: str, namespace: str, removals: list[str], updates: dict[str, str]
    ) -> tuple[list[str], list[str], list[str]]:
        """The keys set, removed, and asked to be removed but absent; one event names the keys changed."""
        self.warehouses.catalog(catalog)
        overlap = set(removals) & set(updates)
        if overlap:
            raise Unprocessable("removals", f"{sorted(overlap)} are also in updates")
        with self.db.write(any_node=True) as session:
            updated, removed, missing = store.update_namespace_properties(
                session, catalog, namespace, removals, updates
            )
            event = self.outbox.write(
                session,
                EventType.NAMESPACE_UPDATED,
                catalog,
                namespace,
                None,
                {"updated": updated, "removed": removed},
            )
        self.outbox.publish([event])
        return updated, removed, missing

    def list_tables(self, catalog: str, namespace: str) -> list[str]:
        self.warehouses.catalog(catalog)
        with self.db.read() as session:
            return store.list_pointers(session, catalog, namespace)

    def drop_namespace(self, catalog: str, namespace: str) -> None:
        self.warehouses.catalog(catalog)
        with self.db.write(any_node=True) as session:
            store.drop_namespace(session, catalog, namespace)
            event = self.outbox.write(session, EventType.NAMESPACE_DROPPED, catalog, namespace, None, {})
        self.outbox.publish([event])

    # ---- tables

    def create_table(
        self,
        catalog: str,
        namespace: str,
        name: str,
        schema: Schema,
        spec_: PartitionSpec | None,
        order: SortOrder | None,
        location: str | None,
        properties: dict[str, str],
        stage: bool,
    ) -> LoadedTable:
        spec = self.warehouses.catalog(catalog)
        check_object_name("name", name)
        with self.db.read() as session:
            store.get_namespace(session, catalog, namespace)
            if store.pointer_exists(session, catalog, namespace, name):
                raise AlreadyExists(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
        check_properties(properties)
        location = location or self.warehouses.default_location(spec, namespace, name)
        confine_table(spec.properties["warehouse"], location, properties)
        try:
            metadata = new_metadata(schema, spec_ or PartitionSpec(), order or SortOrder(), location, dict(properties))
        except ValueError as exc:
            raise InvalidField("table", str(exc)) from exc
        if stage:  # nothing is written until the client commits the create
            return LoadedTable(None, metadata)
        io = self.warehouses.io_of(spec)
        location = self.files.new_location(metadata, 0)
        write_metadata(io, location, metadata)
        details: dict[str, Any] = {
            "operation": "create",
            "snapshot_id": None,
            "parent_snapshot_id": None,
            "summary": {},
        }
        self.add_table(catalog, namespace, name, location, details, {}, client=None, written=io)
        return LoadedTable(location, metadata)

    def add_table(
        self,
        catalog: str,
        namespace: str,
        name: str,
        location: str,
        details: dict[str, Any],
        payload: dict[str, Any],
        client: str | None,
        written: FileIO | None = None,
        staged: bool = False,
    ) -> None:
        """A new table in one transaction: its pointer, version 0 on its timeline, a table-created event;
        then the event is published. `written`: the metadata file was just written (through that FileIO)
        and is deleted if the table cannot be added. A staged create that finds the name taken is a
        commit conflict (409), as the spec wants."""
        try:
            with self.heads.changing((catalog, namespace, name)), self.db.write(any_node=True) as session:
                if staged and store.pointer_exists(session, catalog, namespace, name):
                    raise CommitFailed(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
                store.create_pointer(session, catalog, namespace, name, location)
                store.record_commit(
                    session, catalog, namespace, name, version=0, metadata_location=location, client=client, **details
                )
                event = self.outbox.write(
                    session,
                    EventType.TABLE_CREATED,
                    catalog,
                    namespace,
                    name,
                    {"metadata_location": location, "version": 0, **payload},
                )
        except CommitStateUnknown:  # the new pointer may name the file: it stays
            log.error("create of %s.%s in catalog %s: state unknown, its metadata file kept", namespace, name, catalog)
            raise
        except Exception:
            if written is not None:
                written.delete(location)
            raise
        self.heads.wrote((catalog, namespace, name), (location, 0))
        self.outbox.publish([event])

    def register_table(
        self, catalog: str, namespace: str, name: str, metadata_location: str, overwrite: bool = False
    ) -> LoadedTable:
        """Adopt an existing table by its metadata file: a readable file under the warehouse, of a table
        whose location is under the warehouse too (a purge later deletes only what lies there). With
        `overwrite`, a table of that name has its pointer moved to that metadata (a new version)."""
        spec = self.warehouses.catalog(catalog)
        check_object_name("name", name)
        try:
            check_under(spec.properties["warehouse"], metadata_location, "metadata-location")
        except OutsideRoot as exc:
            raise InvalidField("metadata-location", f"{exc}: only metadata under the warehouse is registered") from None
        try:
            metadata = self.files.read(self.warehouses.io_of(spec), metadata_location)
        except Exception as exc:
            raise InvalidField("metadata-location", f"cannot read table metadata there: {exc}") from exc
        confine_table(spec.properties["warehouse"], metadata.location, metadata.properties)
        details: dict[str, Any] = {
            "operation": "register",
            "snapshot_id": metadata.current_snapshot_id,
            "parent_snapshot_id": None,
            "summary": {},
        }
        with self.db.read() as session:
            exists = store.pointer_exists(session, catalog, namespace, name)
        if overwrite and exists:
            with self.heads.changing((catalog, namespace, name)), self.db.write(any_node=True) as session:
                pointer = store.get_pointer(session, catalog, namespace, name)
                if not store.swap_pointer(
                    session, catalog, namespace, name, pointer.metadata_location, pointer.version, metadata_location
                ):
                    raise CommitFailed(f"{name} changed while it was being registered again; try again")
                version = pointer.version + 1
                store.record_commit(
                    session, catalog, namespace, name, version=version, metadata_location=metadata_location, **details
                )
                payload = {"metadata_location": metadata_location, "version": version, "registered": True, **details}
                event = self.outbox.write(session, EventType.TABLE_COMMITTED, catalog, namespace, name, payload)
            self.heads.wrote((catalog, namespace, name), (metadata_location, version))
            self.outbox.publish([event])
            return LoadedTable(metadata_location, metadata)
        self.add_table(catalog, namespace, name, metadata_location, details, {"registered": True}, client=None)
        return LoadedTable(metadata_location, metadata)

    def drop_table(self, catalog: str, namespace: str, name: str, purge: bool) -> None:
        spec = self.warehouses.catalog(catalog)
        with self.heads.changing((catalog, namespace, name)), self.db.write(any_node=True) as session:
            pointer = store.drop_pointer(session, catalog, namespace, name)
            location = pointer.metadata_location
            event = self.outbox.write(
                session,
                EventType.TABLE_DROPPED,
                catalog,
                namespace,
                name,
                {"metadata_location": location, "purge": purge},
            )
        self.heads.wrote((catalog, namespace, name), None)
        self.outbox.publish([event])
        if purge:  # after the answer: the table is gone for clients at once, its files follow
            self._purges.submit(self._purge, spec, location)

    def _purge(self, spec: CatalogSpec, metadata_location: str) -> None:
        try:
            io = self.warehouses.io_of(spec)
            deleted, skipped = purge_files(io, self.files.read(io, metadata_location), metadata_location)
        except Exception:
            log.exception(
                "purging the table of %s failed; its files stay (orphan cleanup can take them)", metadata_location
            )
            return
        log.info(
            "purged %d file(s) of the table of %s%s",
            deleted,
            metadata_location,
            f"; left {skipped} referenced file(s) outside its location" if skipped else "",
        )

    def close(self) -> None:
        """Let a purge that runs finish; purges not started yet are given up (their files are orphans)."""
        self._purges.shutdown(wait=True, cancel_futures=True)

    def rename_table(self, catalog: str, source: tuple[str, str], target: tuple[str, str]) -> None:
        self.warehouses.catalog(catalog)
        check_object_name("destination.name", target[1])
        keys = ((catalog, *source), (catalog, *target))
        with self.heads.changing(*keys), self.db.write(any_node=True) as session:
            store.rename_pointer(session, catalog, source, target)
            event = self.outbox.write(
                session,
                EventType.TABLE_RENAMED,
                catalog,
                target[0],
                target[1],
                {"from": {"namespace": store.levels(source[0]), "table": source[1]}},
            )
        self.heads.wrote(keys[0], None)
        self.heads.forget(keys[1])  # the row moved with its head: read under its new name when next asked for
        self.outbox.publish([event])
