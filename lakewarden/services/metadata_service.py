"""The metadata service behind lakewarden's Iceberg REST catalog (catalogs of type `internal`).

Pointers to each table's current metadata file live in the system database; metadata and data live
under the catalog's warehouse. A commit checks the client's requirements, applies its updates,
writes a new metadata file and swaps the pointer by compare-and-swap. When the swap loses to a
concurrent commit, the requirements are checked again against the fresh metadata and the commit
is retried on the server while they still hold; the metadata file of a lost swap is deleted.
Every successful commit is recorded on the table's timeline and announced by an event written in
the same transaction as the swap; in-process subscribers hear of it at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AssertCreate,
    TableRequirement,
    TableUpdate,
)

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import AlreadyExists, Conflict, InvalidField, NotFound
from lakewarden.metadata.conflicts import CONFLICT_STRATEGY, PartitionConflict, conflict_strategy, rebase_on_partitions
from lakewarden.metadata.table_metadata import (
    apply_updates,
    defines_table,
    describe_commit,
    metadata_from_updates,
    metadata_json,
    new_metadata,
    purge_files,
    write_metadata,
)
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import metadata as store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
MAX_COMMIT_ATTEMPTS = 20
Subscriber = Callable[[dict[str, Any]], None]


class CommitFailed(Conflict):
    """A requirement of the commit does not hold against the table's current metadata."""


class NoSuchWarehouse(NotFound):
    pass


class _SwapLost(Exception):
    """A pointer of a multi-table commit moved meanwhile."""


@dataclass(frozen=True)
class LoadedTable:
    metadata_location: str | None
    metadata: TableMetadata


def _check_properties(properties: dict[str, str]) -> None:
    try:
        conflict_strategy(properties)
    except ValueError as exc:
        raise InvalidField(CONFLICT_STRATEGY, str(exc)) from exc


class MetadataService:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._subscribers: list[Subscriber] = []
        self._cache: OrderedDict[str, TableMetadata] = OrderedDict()  # metadata files never change
        self._cache_lock = threading.Lock()
        self._json: OrderedDict[str, bytes] = OrderedDict()  # loadTable bodies by metadata location
        self._catalogs: dict[str, CatalogSpec] = {}  # internal catalogs by name (the catalog routes forget them)

    # ---- events

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def _publish(self, events: Sequence[dict[str, Any]]) -> None:
        for event in events:
            for subscriber in self._subscribers:
                try:
                    subscriber(event)
                except Exception:
                    log.exception("event subscriber failed on %s", event["type"])

    def _event(self, session: Any, kind: str, catalog: str, namespace: str, table: str | None,
               payload: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        row = store.add_event(session, kind, catalog, namespace, table, payload)
        return {"event_id": row.event_id, "type": kind, "catalog": catalog, "namespace": store.levels(namespace),
                "table": table, "payload": payload}  # fmt: skip

    # ---- catalogs

    def forget_catalog(self, name: str) -> None:
        """A catalog was changed or removed: look it up afresh next time."""
        with self._cache_lock:
            self._catalogs.pop(name, None)

    def catalog(self, name: str) -> CatalogSpec:
        with self._cache_lock:
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
        with self._cache_lock:
            self._catalogs[name] = spec
        return spec

    def _io(self, spec: CatalogSpec) -> FileIO:
        return load_file_io(dict(spec.connection_properties), spec.properties["warehouse"])

    # ---- namespaces

    def create_namespace(self, catalog: str, namespace: str, properties: dict[str, str]) -> None:
        self.catalog(catalog)
        with self.db.write() as session:
            store.create_namespace(session, catalog, namespace, properties)
            event = self._event(session, "namespace-created", catalog, namespace, None, {"properties": properties})
        self._publish([event])

    def drop_namespace(self, catalog: str, namespace: str) -> None:
        self.catalog(catalog)
        with self.db.write() as session:
            store.drop_namespace(session, catalog, namespace)
            event = self._event(session, "namespace-dropped", catalog, namespace, None, {})
        self._publish([event])

    # ---- tables

    def _read(self, io: FileIO, location: str) -> TableMetadata:
        with self._cache_lock:
            cached = self._cache.get(location)
            if cached is not None:
                self._cache.move_to_end(location)
                return cached
        metadata = FromInputFile.table_metadata(io.new_input(location))
        with self._cache_lock:
            self._cache[location] = metadata
            while len(self._cache) > 2000:
                self._cache.popitem(last=False)
        return metadata

    @staticmethod
    def _new_location(metadata: TableMetadata, version: int) -> str:
        return f"{metadata.location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"

    def default_location(self, spec: CatalogSpec, namespace: str, table: str) -> str:
        # a fresh directory each time: a table dropped and created again never sees the old files
        path = "/".join(store.levels(namespace))
        return f"{spec.properties['warehouse'].rstrip('/')}/{path}/{table}-{uuid.uuid4().hex[:12]}"

    def create_table(
        self, catalog: str, namespace: str, name: str, schema: Schema, spec_: PartitionSpec | None,
        order: SortOrder | None, location: str | None, properties: dict[str, str], stage: bool,
    ) -> LoadedTable:  # fmt: skip
        spec = self.catalog(catalog)
        with self.db.read() as session:
            store.get_namespace(session, catalog, namespace)
            if store.pointer_exists(session, catalog, namespace, name):
                raise AlreadyExists(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
        _check_properties(properties)
        try:
            metadata = new_metadata(
                schema, spec_ or PartitionSpec(), order or SortOrder(),
                location or self.default_location(spec, namespace, name), dict(properties),
            )  # fmt: skip
        except ValueError as exc:
            raise InvalidField("table", str(exc)) from exc
        if stage:  # nothing is written until the client commits the create
            return LoadedTable(None, metadata)
        io = self._io(spec)
        location = self._new_location(metadata, 0)
        write_metadata(io, location, metadata)
        try:
            with self.db.write() as session:
                store.create_pointer(session, catalog, namespace, name, location)
                store.record_commit(session, catalog, namespace, name, version=0, operation="create",
                                    snapshot_id=None, parent_snapshot_id=None, summary={},
                                    metadata_location=location, client=None)  # fmt: skip
                event = self._event(session, "table-created", catalog, namespace, name,
                                    {"metadata_location": location, "version": 0})  # fmt: skip
        except Exception:
            io.delete(location)
            raise
        self._publish([event])
        return LoadedTable(location, metadata)

    def load_table_json(self, catalog: str, namespace: str, name: str) -> bytes:
        """The loadTable response body, serialised once per metadata file (which never changes)."""
        return self.response_body(self.load_table(catalog, namespace, name))

    def response_body(self, loaded: LoadedTable) -> bytes:
        """`{"metadata-location", "metadata", "config"}` as JSON, cached by metadata location."""
        assert loaded.metadata_location is not None
        with self._cache_lock:
            body = self._json.get(loaded.metadata_location)
        if body is None:
            body = self._remember_body(loaded.metadata_location, metadata_json(loaded.metadata))
        return body

    def _remember_body(self, location: str, metadata_text: str) -> bytes:
        body = f'{{"metadata-location": {json.dumps(location)}, "metadata": {metadata_text}, "config": {{}}}}'.encode()
        with self._cache_lock:
            self._json[location] = body
            while len(self._json) > 500:
                self._json.popitem(last=False)
        return body

    def load_table(self, catalog: str, namespace: str, name: str) -> LoadedTable:
        spec = self.catalog(catalog)
        with self.db.read() as session:
            location = store.get_pointer(session, catalog, namespace, name).metadata_location
        return LoadedTable(location, self._read(self._io(spec), location))

    def table(self, catalog: str, namespace: str, name: str) -> Table:
        """A read-only pyiceberg Table for lakewarden's own services: no HTTP round trip to ourselves."""
        loaded = self.load_table(catalog, namespace, name)
        assert loaded.metadata_location is not None
        identifier = (*store.levels(namespace), name)
        return Table(identifier, loaded.metadata, loaded.metadata_location, self._io(self.catalog(catalog)),
                     NoopCatalog(catalog))  # fmt: skip

    def table_exists(self, catalog: str, namespace: str, name: str) -> bool:
        self.catalog(catalog)
        with self.db.read() as session:
            return store.pointer_exists(session, catalog, namespace, name)

    def commit_table(
        self, catalog: str, namespace: str, name: str, requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate], client: str | None = None,
    ) -> LoadedTable:  # fmt: skip
        spec = self.catalog(catalog)
        io = self._io(spec)
        if any(isinstance(r, AssertCreate) for r in requirements):
            return self._commit_create(spec, io, namespace, name, updates, client)
        for _ in range(MAX_COMMIT_ATTEMPTS):
            with self.db.read() as session:
                pointer = store.get_pointer(session, catalog, namespace, name)
                expected, version = pointer.metadata_location, pointer.version
            base = self._read(io, expected)
            applied, written = self._checked(io, base, requirements, updates)
            try:
                metadata = apply_updates(base, applied, metadata_location=expected)
            except (ValueError, KeyError) as exc:
                self._discard(io, written)
                raise InvalidField("updates", str(exc)) from exc
            _check_properties(metadata.properties)
            location = self._new_location(metadata, version + 1)
            text = write_metadata(io, location, metadata)
            with self.db.write() as session:
                new_version = version + 1
                if not store.swap_pointer(session, catalog, namespace, name, expected, version, location):
                    event = None
                else:
                    details = describe_commit(base, metadata, applied)
                    store.record_commit(session, catalog, namespace, name, version=new_version,
                                        metadata_location=location, client=client, **details)  # fmt: skip
                    event = self._event(session, "table-committed", catalog, namespace, name,
                                        {"metadata_location": location, "version": new_version, **details})  # fmt: skip
            if event is None:  # another commit won the swap: drop our files, re-check, try again
                self._discard(io, [location, *written])
                continue
            with self._cache_lock:
                self._cache[location] = metadata
            self._remember_body(location, text)  # the response: the file just written, not serialised again
            self._publish([event])
            return LoadedTable(location, metadata)
        raise CommitFailed(f"gave up after {MAX_COMMIT_ATTEMPTS} concurrent commits to {name}")

    @staticmethod
    def _checked(
        io: FileIO, base: TableMetadata, requirements: Sequence[TableRequirement], updates: Sequence[TableUpdate]
    ) -> tuple[Sequence[TableUpdate], list[str]]:
        """The commit's requirements checked against `base` under the table's conflict strategy.

        Returns the updates to apply (rebased onto the branch head where the
        `partition` strategy allows it) and the files written for them; raises CommitFailed."""
        try:
            for requirement in requirements:
                requirement.validate(base)
            return updates, []
        except CommitFailedException as exc:
            failure = exc
        try:
            strategy = conflict_strategy(base.properties)
        except ValueError as exc:
            raise InvalidField(CONFLICT_STRATEGY, str(exc)) from exc
        if strategy != "partition":
            raise CommitFailed(str(failure)) from failure
        try:
            rebased = rebase_on_partitions(io, base, requirements, updates)
        except PartitionConflict as exc:
            raise CommitFailed(str(exc)) from exc
        if rebased is None:
            raise CommitFailed(str(failure)) from failure
        try:
            for requirement in rebased.requirements:
                requirement.validate(base)
        except CommitFailedException as exc:  # another requirement fails too: a real conflict
            MetadataService._discard(io, [rebased.manifest_list])
            raise CommitFailed(str(exc)) from exc
        log.info("commit rebased onto the branch head (no partition overlap): %s", rebased.manifest_list)
        return rebased.updates, [rebased.manifest_list]

    def _commit_create(
        self, spec: CatalogSpec, io: FileIO, namespace: str, name: str, updates: Sequence[TableUpdate],
        client: str | None,
    ) -> LoadedTable:  # fmt: skip
        """The commit of a staged create (CTAS, CREATE OR REPLACE on a new table): the updates define it."""
        try:
            metadata = apply_updates(metadata_from_updates(updates), tuple(u for u in updates if not defines_table(u)))
        except (ValueError, KeyError, StopIteration) as exc:
            raise InvalidField("updates", f"cannot create the table from these updates: {exc}") from exc
        _check_properties(metadata.properties)
        location = self._new_location(metadata, 0)
        write_metadata(io, location, metadata)
        try:
            with self.db.write() as session:
                if store.pointer_exists(session, spec.name, namespace, name):
                    raise CommitFailed(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
                store.create_pointer(session, spec.name, namespace, name, location)
                details = describe_commit(metadata, metadata, updates)
                store.record_commit(session, spec.name, namespace, name, version=0, metadata_location=location,
                                    client=client, **{**details, "operation": "create"})  # fmt: skip
                event = self._event(session, "table-created", spec.name, namespace, name,
                                    {"metadata_location": location, "version": 0, **details})  # fmt: skip
        except Exception:
            io.delete(location)
            raise
        self._publish([event])
        return LoadedTable(location, metadata)

    def commit_transaction(
        self, catalog: str, changes: Sequence[tuple[str, str, Sequence[TableRequirement], Sequence[TableUpdate]]],
        client: str | None = None,
    ) -> None:  # fmt: skip
        """Commit changes to several tables atomically: every pointer swaps in one transaction, or none does."""
        spec = self.catalog(catalog)
        io = self._io(spec)
        for _ in range(MAX_COMMIT_ATTEMPTS):
            staged: list[tuple[str, str, str, int, str, TableMetadata, TableMetadata]] = []
            for namespace, name, requirements, updates in changes:
                with self.db.read() as session:
                    pointer = store.get_pointer(session, catalog, namespace, name)
                base = self._read(io, pointer.metadata_location)
                try:
                    for requirement in requirements:
                        requirement.validate(base)
                except CommitFailedException as exc:
                    self._discard(io, [entry[4] for entry in staged])
                    raise CommitFailed(f"{'.'.join(store.levels(namespace))}.{name}: {exc}") from exc
                try:
                    metadata = apply_updates(base, updates, metadata_location=pointer.metadata_location)
                except (ValueError, KeyError) as exc:
                    self._discard(io, [entry[4] for entry in staged])
                    raise InvalidField("updates", f"{'.'.join(store.levels(namespace))}.{name}: {exc}") from exc
                location = self._new_location(metadata, pointer.version + 1)
                write_metadata(io, location, metadata)
                staged.append((namespace, name, pointer.metadata_location, pointer.version, location, metadata, base))
            try:
                events = self._swap_all(catalog, staged, changes, client)
            except _SwapLost:  # one swap lost: none of them happened; check everything again
                self._discard(io, [entry[4] for entry in staged])
                continue
            self._publish(events)
            return
        raise CommitFailed(f"gave up after {MAX_COMMIT_ATTEMPTS} attempts at a multi-table commit")

    def _swap_all(self, catalog: str, staged: list[Any], changes: Sequence[Any], client: str | None) -> list[Any]:
        events = []
        with self.db.write() as session:
            for namespace, name, old, current, new, metadata, base in staged:
                if not store.swap_pointer(session, catalog, namespace, name, old, current, new):
                    raise _SwapLost  # leaving the block rolls every swap back
                version = current + 1
                updates = next(u for ns, n, _, u in changes if (ns, n) == (namespace, name))
                details = describe_commit(base, metadata, updates)
                store.record_commit(session, catalog, namespace, name, version=version, metadata_location=new,
                                    client=client, **details)  # fmt: skip
                events.append(self._event(session, "table-committed", catalog, namespace, name,
                                          {"metadata_location": new, "version": version, **details}))  # fmt: skip
        return events

    @staticmethod
    def _discard(io: FileIO, locations: Sequence[str]) -> None:
        for location in locations:
            with contextlib.suppress(OSError):
                io.delete(location)

    def register_table(self, catalog: str, namespace: str, name: str, metadata_location: str) -> LoadedTable:
        """Adopt an existing table by its metadata file; the file must be readable."""
        spec = self.catalog(catalog)
        try:
            metadata = self._read(self._io(spec), metadata_location)
        except Exception as exc:
            raise InvalidField("metadata-location", f"cannot read table metadata there: {exc}") from exc
        with self.db.write() as session:
            store.create_pointer(session, catalog, namespace, name, metadata_location)
            store.record_commit(session, catalog, namespace, name, version=0, operation="register",
                                snapshot_id=metadata.current_snapshot_id, parent_snapshot_id=None, summary={},
                                metadata_location=metadata_location, client=None)  # fmt: skip
            event = self._event(session, "table-created", catalog, namespace, name,
                                {"metadata_location": metadata_location, "version": 0, "registered": True})  # fmt: skip
        self._publish([event])
        return LoadedTable(metadata_location, metadata)

    def drop_table(self, catalog: str, namespace: str, name: str, purge: bool) -> None:
        spec = self.catalog(catalog)
        with self.db.write() as session:
            pointer = store.drop_pointer(session, catalog, namespace, name)
            location = pointer.metadata_location
            event = self._event(session, "table-dropped", catalog, namespace, name,
                                {"metadata_location": location, "purge": purge})  # fmt: skip
        self._publish([event])
        if purge:
            io = self._io(spec)
            purge_files(io, self._read(io, location))
            io.delete(location)

    def rename_table(self, catalog: str, source: tuple[str, str], target: tuple[str, str]) -> None:
        self.catalog(catalog)
        with self.db.write() as session:
            store.rename_pointer(session, catalog, source, target)
            event = self._event(session, "table-renamed", catalog, target[0], target[1],
                                {"from": {"namespace": store.levels(source[0]), "table": source[1]}})  # fmt: skip
        self._publish([event])
