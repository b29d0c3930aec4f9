"""The metadata service behind lakewarden's Iceberg REST catalog (catalogs of type `internal`).

Pointers to each table's current metadata file live in the system database; metadata and data live
under the catalog's warehouse. Every change (a commit, a create, a drop, a rename) is recorded on the
table's timeline and announced by an event written in the same transaction as the pointer's; in-process
subscribers hear of it at once. Commits are services/table_commits.py's (compare-and-swap, retried on the
server while the client's requirements hold), loadTable's answers services/table_loads.py's.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortOrder

from lakewarden.domain.catalogs import CatalogSpec, check_object_name
from lakewarden.domain.errors import (
    AlreadyExists,
    CommitFailed,
    CommitStateUnknown,
    InvalidField,
    NoSuchWarehouse,
    NotFound,
)
from lakewarden.domain.storage import StorageProfile
from lakewarden.metadata.paths import OutsideRoot, check_under, confine_table
from lakewarden.metadata.table_metadata import (
    new_metadata,
    purge_files,
    write_metadata,
)
from lakewarden.services.commit_queue import CommitQueue
from lakewarden.services.credentials import CredentialVendor
from lakewarden.services.metadata_files import DEFAULT_MAX_BYTES as DEFAULT_METADATA_CACHE_BYTES
from lakewarden.services.metadata_files import MetadataFiles
from lakewarden.services.table_commits import TableCommits, check_properties
from lakewarden.services.table_heads import TableHeads
from lakewarden.services.table_loads import LoadedTable, TableLoads
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import metadata as store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
Subscriber = Callable[[dict[str, Any]], None]


class MetadataService:
    def __init__(
        self,
        db: Database,
        metadata_cache_bytes: int = DEFAULT_METADATA_CACHE_BYTES,
        queue: CommitQueue | None = None,
        sole_node: bool = True,
    ) -> None:
        self.db = db
        # the commit routes take a table's turn in this line before they commit (services/commit_queue.py)
        self.queue = queue or CommitQueue()
        self._subscribers: list[Subscriber] = []
        self._purges = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakewarden-purge")
        self.files = MetadataFiles(metadata_cache_bytes)  # parsed metadata files and loadTable bodies, kept
        self._catalogs_lock = threading.Lock()
        self._catalogs: dict[str, CatalogSpec] = {}  # internal catalogs by name (the catalog routes forget them)
        self._profiles: dict[str, StorageProfile] = {}  # their storage profiles, by name
        self._ios: dict[str, tuple[Any, FileIO]] = {}  # the server's FileIO of each, with what it was made from
        self.credentials = CredentialVendor()
        self.loads = TableLoads(self)  # loadTable's answers (services/table_loads.py)
        # the tables' heads this node knows: none when it is one of several (services/table_heads.py)
        self.heads = TableHeads(keeping=sole_node)
        self.commits = TableCommits(self)  # commits (services/table_commits.py)

    # ---- events

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def publish(self, events: Sequence[dict[str, Any]]) -> None:
        """Hand events, once their transaction committed, to the in-process subscribers."""
        for event in events:
            for subscriber in self._subscribers:
                try:
                    subscriber(event)
                except Exception:
                    log.exception("event subscriber failed on %s", event["type"])

    def event(
        self, session: Any, kind: str, catalog: str, namespace: str, table: str | None, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Write an event into the outbox in the caller's transaction; publish it after the commit."""
        return store.add_event(session, kind, catalog, namespace, table, payload)

    # ---- catalogs

    def forget_catalog(self, name: str) -> None:
        """A catalog was changed or removed: look it up afresh next time."""
        with self._catalogs_lock:
            self._catalogs.pop(name, None)
            self._profiles.pop(name, None)
            self._ios.pop(name, None)
        self.heads.forget()  # a catalog dropped and made again has other tables under the same names

    def catalog(self, name: str) -> CatalogSpec:
        with self._catalogs_lock:
            cached = self._catalogs.get(name)
        if cached is not None:
            return cached
        with self.db.read() as session:
            try:
                spec = catalog_store.spec_of(catalog_store.get_catalog(session, name))
            except NotFound:
                raise NoSuchWarehouse(f"warehouse {name!r} is not an internal catalog of this lakewarden") from None
        if spec.type != "internal":
            raise NoSuchWarehouse(f"warehouse {name!r} is a {spec.type} catalog, not an internal one")
        with self._catalogs_lock:
            self._catalogs[name] = spec
        return spec

    def storage(self, spec: CatalogSpec) -> StorageProfile:
        """The catalog's storage profile (domain/storage.py)."""
        with self._catalogs_lock:
            profile = self._profiles.get(spec.name)
        if profile is None or profile.warehouse != spec.properties["warehouse"]:
            profile = StorageProfile.of(spec.properties)
            with self._catalogs_lock:
                self._profiles[spec.name] = profile
        return profile

    def io_of(self, spec: CatalogSpec) -> FileIO:
        """The server's own FileIO for the catalog's warehouse (local, or S3 with the server's keys)."""
        properties = self.storage(spec).server_io_properties(spec.connection_properties)
        key = (spec.properties["warehouse"], tuple(sorted(properties.items())))
        with self._catalogs_lock:
            known = self._ios.get(spec.name)
        if known is not None and known[0] == key:
            return known[1]  # made once per catalog: making one costs about a tenth of a commit
        io = load_file_io(properties, spec.properties["warehouse"])
        with self._catalogs_lock:
            self._ios[spec.name] = (key, io)
        return io

    # ---- namespaces

    def create_namespace(self, catalog: str, namespace: str, properties: dict[str, str]) -> None:
        self.catalog(catalog)
        for level in store.levels(namespace):
            check_object_name("namespace", level)
        with self.db.write(any_node=True) as session:
            store.create_namespace(session, catalog, namespace, properties)
            event = self.event(session, "namespace-created", catalog, namespace, None, {"properties": properties})
        self.publish([event])

    def drop_namespace(self, catalog: str, namespace: str) -> None:
        self.catalog(catalog)
        with self.db.write(any_node=True) as session:
            store.drop_namespace(session, catalog, namespace)
            event = self.event(session, "namespace-dropped", catalog, namespace, None, {})
        self.publish([event])

    # ---- tables

    def default_location(self, spec: CatalogSpec, namespace: str, table: str) -> str:
        # a fresh directory each time: a table dropped and created again never sees the old files
        path = "/".join(store.levels(namespace))
        return f"{spec.properties['warehouse'].rstrip('/')}/{path}/{table}-{uuid.uuid4().hex[:12]}"

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
        spec = self.catalog(catalog)
        check_object_name("name", name)
        with self.db.read() as session:
            store.get_namespace(session, catalog, namespace)
            if store.pointer_exists(session, catalog, namespace, name):
                raise AlreadyExists(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
        check_properties(properties)
        location = location or self.default_location(spec, namespace, name)
        confine_table(spec.properties["warehouse"], location, properties)
        try:
            metadata = new_metadata(schema, spec_ or PartitionSpec(), order or SortOrder(), location, dict(properties))
        except ValueError as exc:
            raise InvalidField("table", str(exc)) from exc
        if stage:  # nothing is written until the client commits the create
            return LoadedTable(None, metadata)
        io = self.io_of(spec)
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

    def _location(self, catalog: str, namespace: str, name: str) -> str:
        """The table's current metadata location: the head this node keeps when it holds the database alone
        (services/table_heads.py), else the pointer read."""
        return self.heads.current(self.db, (catalog, namespace, name))[0]

    def response_body(self, loaded: LoadedTable) -> bytes:
        """`{"metadata-location", "metadata", "config"}` as JSON, cached by metadata location."""
        assert loaded.metadata_location is not None
        return self.files.response_body(loaded.metadata_location, loaded.metadata)

    def load_table(self, catalog: str, namespace: str, name: str) -> LoadedTable:
        spec = self.catalog(catalog)
        location = self._location(catalog, namespace, name)
        return LoadedTable(location, self.files.read(self.io_of(spec), location))

    def table(self, catalog: str, namespace: str, name: str) -> Table:
        """A read-only pyiceberg Table for lakewarden's own services: no HTTP round trip to ourselves."""
        loaded = self.load_table(catalog, namespace, name)
        assert loaded.metadata_location is not None
        identifier = (*store.levels(namespace), name)
        return Table(
            identifier,
            loaded.metadata,
            loaded.metadata_location,
            self.io_of(self.catalog(catalog)),
            NoopCatalog(catalog),
        )

    def table_exists(self, catalog: str, namespace: str, name: str) -> bool:
        self.catalog(catalog)
        with self.db.read() as session:
            return store.pointer_exists(session, catalog, namespace, name)

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
                event = self.event(
                    session,
                    "table-created",
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
        self.publish([event])

    def register_table(
        self, catalog: str, namespace: str, name: str, metadata_location: str, overwrite: bool = False
    ) -> LoadedTable:
        """Adopt an existing table by its metadata file: a readable file under the warehouse, of a table
        whose location is under the warehouse too (a purge later deletes only what lies there). With
        `overwrite`, a table of that name has its pointer moved to that metadata (a new version)."""
        spec = self.catalog(catalog)
        check_object_name("name", name)
        try:
            check_under(spec.properties["warehouse"], metadata_location, "metadata-location")
        except OutsideRoot as exc:
            raise InvalidField("metadata-location", f"{exc}: only metadata under the warehouse is registered") from None
        try:
            metadata = self.files.read(self.io_of(spec), metadata_location)
        except Exception as exc:
            raise InvalidField("metadata-location", f"cannot read table metadata there: {exc}") from exc
        confine_table(spec.properties["warehouse"], metadata.location, metadata.properties)
        details: dict[str, Any] = {
            "operation": "register",
            "snapshot_id": metadata.current_snapshot_id,
            "parent_snapshot_id": None,
            "summary": {},
        }
        if overwrite and self.table_exists(catalog, namespace, name):
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
                event = self.event(session, "table-committed", catalog, namespace, name, payload)
            self.heads.wrote((catalog, namespace, name), (metadata_location, version))
            self.publish([event])
            return LoadedTable(metadata_location, metadata)
        self.add_table(catalog, namespace, name, metadata_location, details, {"registered": True}, client=None)
        return LoadedTable(metadata_location, metadata)

    def drop_table(self, catalog: str, namespace: str, name: str, purge: bool) -> None:
        spec = self.catalog(catalog)
        with self.heads.changing((catalog, namespace, name)), self.db.write(any_node=True) as session:
            pointer = store.drop_pointer(session, catalog, namespace, name)
            location = pointer.metadata_location
            event = self.event(
                session, "table-dropped", catalog, namespace, name, {"metadata_location": location, "purge": purge}
            )
        self.heads.wrote((catalog, namespace, name), None)
        self.publish([event])
        if purge:  # after the answer: the table is gone for clients at once, its files follow
            self._purges.submit(self._purge, spec, location)

    def _purge(self, spec: CatalogSpec, metadata_location: str) -> None:
        try:
            io = self.io_of(spec)
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
        self.catalog(catalog)
        check_object_name("destination.name", target[1])
        keys = ((catalog, *source), (catalog, *target))
        with self.heads.changing(*keys), self.db.write(any_node=True) as session:
            store.rename_pointer(session, catalog, source, target)
            event = self.event(
                session,
                "table-renamed",
                catalog,
                target[0],
                target[1],
                {"from": {"namespace": store.levels(source[0]), "table": source[1]}},
            )
        self.heads.wrote(keys[0], None)
        self.heads.forget(keys[1])  # the row moved with its head: read under its new name when next asked for
        self.publish([event])
