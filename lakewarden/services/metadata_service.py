"""The metadata service behind lakewarden's Iceberg REST catalog (catalogs of type `internal`).

Pointers to each table's current metadata file live in the system database; metadata and data live
under the catalog's warehouse. A commit checks the client's requirements, applies its updates,
writes a new metadata file and swaps the pointer by compare-and-swap. When the swap loses to a
concurrent commit, the requirements are checked again against the fresh metadata and the commit
is retried on the server while they still hold; the metadata file of a lost swap is deleted.
Every successful commit is recorded on the table's timeline and announced by an event written in
the same transaction as the swap; in-process subscribers hear of it at once. loadTable's answers are
services/table_loads.py's.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AssertCreate,
    TableRequirement,
    TableUpdate,
)

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
from lakewarden.metadata.conflicts import CONFLICT_STRATEGY, checked_updates, conflict_strategy
from lakewarden.metadata.paths import PATH_PROPERTIES, OutsideRoot, check_under, confine_table
from lakewarden.metadata.table_metadata import (
    apply_updates,
    defines_table,
    describe_commit,
    metadata_from_updates,
    new_metadata,
    purge_files,
    write_metadata,
)
from lakewarden.services.commit_queue import CommitQueue
from lakewarden.services.credentials import CredentialVendor
from lakewarden.services.metadata_files import DEFAULT_MAX_BYTES as DEFAULT_METADATA_CACHE_BYTES
from lakewarden.services.metadata_files import MetadataFiles
from lakewarden.services.table_loads import TableLoads
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import metadata as store
from lakewarden.store.commit_statement import swap_and_record
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
MAX_COMMIT_ATTEMPTS = 20
Subscriber = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class TableChange:
    """One table's part of a commit: the requirements its current metadata must meet, and the updates."""

    namespace: str
    name: str
    requirements: Sequence[TableRequirement]
    updates: Sequence[TableUpdate]


@dataclass(frozen=True)
class _Staged:
    """A change applied to its table's current metadata and written, waiting for its pointer swap."""

    change: TableChange
    expected: str  # the metadata location the swap expects
    version: int  # the pointer's version the swap expects
    base: TableMetadata
    applied: Sequence[TableUpdate]  # the updates as applied (rebased by the partition strategy, maybe)
    metadata: TableMetadata
    location: str  # the new metadata file
    text: str  # its JSON, reused for the response
    files: list[str]  # every file written for it (dropped when the swap is lost)

    @property
    def changed(self) -> bool:
        """False for a change that changes nothing: its table keeps its metadata, no version is made."""
        return bool(self.location)


CREATES = -1  # _Staged.version of a staged create: no pointer yet


class _SwapLost(Exception):
    """A pointer of a multi-table commit moved meanwhile."""


@dataclass(frozen=True)
class LoadedTable:
    metadata_location: str | None
    metadata: TableMetadata


def _paths_changed(base: TableMetadata, metadata: TableMetadata) -> bool:
    """Whether a commit changes where the table's files go (its location, a path property): what it keeps was
    confined to the warehouse when it was committed. Resolving the paths (their symlinks) on every commit took
    a tenth of a commit; lakewarden's own deletions check each file against the table's location as they delete it."""
    if metadata.location != base.location:
        return True
    return any(metadata.properties.get(k) != base.properties.get(k) for k in PATH_PROPERTIES)


def _check_properties(properties: dict[str, str]) -> None:
    try:
        conflict_strategy(properties)
    except ValueError as exc:
        raise InvalidField(CONFLICT_STRATEGY, str(exc)) from exc


class MetadataService:
    def __init__(
        self,
        db: Database,
        metadata_cache_bytes: int = DEFAULT_METADATA_CACHE_BYTES,
        queue: CommitQueue | None = None,
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
        _check_properties(properties)
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
        self._add_table(catalog, namespace, name, location, details, {}, client=None, written=io)
        return LoadedTable(location, metadata)

    def _location(self, catalog: str, namespace: str, name: str) -> str:
        return store.pointer_head(self.db, catalog, namespace, name)[0]

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

    def commit_table(
        self,
        catalog: str,
        namespace: str,
        name: str,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        client: str | None = None,
    ) -> LoadedTable:
        """One table's commit: its requirements checked under the table's conflict strategy (a staged
        create when they assert one), then the pointer swapped by compare-and-swap."""
        spec = self.catalog(catalog)
        if any(isinstance(r, AssertCreate) for r in requirements):
            return self._commit_create(spec, namespace, name, updates, client)
        try:
            (staged,) = self._commit(spec, [TableChange(namespace, name, requirements, updates)], client, single=True)
        except CommitFailed as exc:
            log.info("commit to %s.%s.%s refused (%s): %s", catalog, namespace, name, client or "a client", exc)
            raise
        return LoadedTable(staged.location or staged.expected, staged.metadata)

    def commit_transaction(self, catalog: str, changes: Sequence[TableChange], client: str | None = None) -> None:
        """Commit changes to several tables atomically: every pointer swaps in one transaction, or none does.
        The requirements are checked as the spec says (no partition rebase across tables)."""
        self._commit(self.catalog(catalog), changes, client, single=False)

    def _commit(
        self, spec: CatalogSpec, changes: Sequence[TableChange], client: str | None, single: bool
    ) -> list[_Staged]:
        """The commit loop of every commit: stage each change on its table's current metadata (requirements
        checked, updates applied, the new metadata file written), then swap every pointer in one
        transaction with its timeline entry and event. A lost swap rolls them all back: the files just
        written are dropped and the changes are checked again on the new heads, up to MAX_COMMIT_ATTEMPTS."""
        io = self.io_of(spec)
        for _ in range(MAX_COMMIT_ATTEMPTS):
            staged: list[_Staged] = []
            try:
                for change in changes:
                    staged.append(self._stage(spec, io, change, single))
            except Exception:
                self.files.discard(io, [path for entry in staged for path in entry.files])
                raise
            try:
                events = self._swap_all(spec.name, staged, client)
            except _SwapLost:  # another commit won a swap: drop our files, check again, try again
                self.files.discard(io, [path for entry in staged for path in entry.files])
                continue
            except CommitStateUnknown:  # the pointer may name the files now: they stay (orphan cleanup knows)
                what = ", ".join(f"{'.'.join(store.levels(c.namespace))}.{c.name}" for c in changes)
                log.error("commit to %s in catalog %s: state unknown, its files kept", what, spec.name)
                raise
            except Exception:  # refused (a staged create whose name was taken): nothing of it stays
                self.files.discard(io, [path for entry in staged for path in entry.files])
                raise
            for entry in staged:
                if entry.changed:
                    self.files.written(entry.location, entry.metadata, entry.text, replaced=entry.expected or None)
            self.publish(events)
            return staged
        what = changes[0].name if single else "a multi-table commit"
        raise CommitFailed(f"gave up after {MAX_COMMIT_ATTEMPTS} concurrent commits to {what}")

    def _stage(self, spec: CatalogSpec, io: FileIO, change: TableChange, single: bool) -> _Staged:
        label = "" if single else f"{'.'.join(store.levels(change.namespace))}.{change.name}: "
        if any(isinstance(r, AssertCreate) for r in change.requirements):  # a staged create in a transaction
            metadata = self._created(spec, change.updates, label)
            location = self.files.new_location(metadata, 0)
            text = write_metadata(io, location, metadata)
            return _Staged(change, "", CREATES, metadata, change.updates, metadata, location, text, [location])
        expected, version = store.pointer_head(self.db, spec.name, change.namespace, change.name)
        base = self.files.read(io, expected)
        applied, written = checked_updates(io, base, change.requirements, change.updates, single, label)
        try:
            metadata = apply_updates(base, applied, metadata_location=expected)
        except (ValueError, KeyError) as exc:
            self.files.discard(io, written)
            raise InvalidField("updates", f"{label}{exc}") from exc
        if metadata is base:  # nothing changes (as Java's catalog handlers, no new version is committed)
            self.files.discard(io, written)
            return _Staged(change, expected, version, base, applied, base, "", "", [])
        try:
            _check_properties(metadata.properties)
            if _paths_changed(base, metadata):
                confine_table(spec.properties["warehouse"], metadata.location, metadata.properties)
        except InvalidField:
            self.files.discard(io, written)
            raise
        location = self.files.new_location(metadata, version + 1)
        text = write_metadata(io, location, metadata)
        return _Staged(
            change,
            expected,
            version,
            base,
            applied,
            metadata,
            location,
            text,
            [location, *written],
        )

    def _commit_create(
        self, spec: CatalogSpec, namespace: str, name: str, updates: Sequence[TableUpdate], client: str | None
    ) -> LoadedTable:
        """The commit of a staged create (CTAS, CREATE OR REPLACE on a new table): the updates define it."""
        metadata = self._created(spec, updates, "")
        io = self.io_of(spec)
        location = self.files.new_location(metadata, 0)
        write_metadata(io, location, metadata)
        details = {**describe_commit(metadata, metadata, updates), "operation": "create"}
        self._add_table(spec.name, namespace, name, location, details, details, client, written=io, staged=True)
        return LoadedTable(location, metadata)

    @staticmethod
    def _created(spec: CatalogSpec, updates: Sequence[TableUpdate], label: str) -> TableMetadata:
        """A staged create's table, as its updates define it, checked."""
        try:
            metadata = apply_updates(metadata_from_updates(updates), tuple(u for u in updates if not defines_table(u)))
        except (ValueError, KeyError, StopIteration) as exc:
            raise InvalidField("updates", f"{label}cannot create the table from these updates: {exc}") from exc
        _check_properties(metadata.properties)
        confine_table(spec.properties["warehouse"], metadata.location, metadata.properties)
        return metadata

    def _add_table(
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
            with self.db.write(any_node=True) as session:
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
        self.publish([event])

    def _swap_all(self, catalog: str, staged: Sequence[_Staged], client: str | None) -> list[dict[str, Any]]:
        """Every staged pointer swapped, with its timeline entry and event, in one transaction (a single table's
        commit in the fewest steps: one statement on PostgreSQL, a transaction on SQLite's driver alone;
        store/commit_statement.py)."""
        if len(staged) == 1 and staged[0].changed and staged[0].version != CREATES:
            (entry,) = staged
            key = (catalog, entry.change.namespace, entry.change.name)
            details = describe_commit(entry.base, entry.metadata, entry.applied)
            event = swap_and_record(self.db, key, entry.expected, entry.version, entry.location, client, details)
            if event is None:
                raise _SwapLost
            return [event]
        events = []
        with self.db.write(any_node=True) as session:
            for entry in staged:
                if not entry.changed:
                    continue
                namespace, name = entry.change.namespace, entry.change.name
                if entry.version == CREATES:
                    if store.pointer_exists(session, catalog, namespace, name):  # the spec: a conflict
                        raise CommitFailed(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
                    store.create_pointer(session, catalog, namespace, name, entry.location)
                    details = {**describe_commit(entry.metadata, entry.metadata, entry.applied), "operation": "create"}
                    store.record_commit(
                        session,
                        catalog,
                        namespace,
                        name,
                        version=0,
                        metadata_location=entry.location,
                        client=client,
                        **details,
                    )
                    payload = {"metadata_location": entry.location, "version": 0, **details}
                    events.append(self.event(session, "table-created", catalog, namespace, name, payload))
                    continue
                if not store.swap_pointer(
                    session, catalog, namespace, name, entry.expected, entry.version, entry.location
                ):
                    raise _SwapLost  # leaving the block rolls every swap back
                version = entry.version + 1
                details = describe_commit(entry.base, entry.metadata, entry.applied)
                store.record_commit(
                    session,
                    catalog,
                    namespace,
                    name,
                    version=version,
                    metadata_location=entry.location,
                    client=client,
                    **details,
                )
                payload = {"metadata_location": entry.location, "version": version, **details}
                events.append(self.event(session, "table-committed", catalog, namespace, name, payload))
        return events

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
            with self.db.write(any_node=True) as session:
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
            self.publish([event])
            return LoadedTable(metadata_location, metadata)
        self._add_table(catalog, namespace, name, metadata_location, details, {"registered": True}, client=None)
        return LoadedTable(metadata_location, metadata)

    def drop_table(self, catalog: str, namespace: str, name: str, purge: bool) -> None:
        spec = self.catalog(catalog)
        with self.db.write(any_node=True) as session:
            pointer = store.drop_pointer(session, catalog, namespace, name)
            location = pointer.metadata_location
            event = self.event(
                session, "table-dropped", catalog, namespace, name, {"metadata_location": location, "purge": purge}
            )
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
        with self.db.write(any_node=True) as session:
            store.rename_pointer(session, catalog, source, target)
            event = self.event(
                session,
                "table-renamed",
                catalog,
                target[0],
                target[1],
                {"from": {"namespace": store.levels(source[0]), "table": source[1]}},
            )
        self.publish([event])
