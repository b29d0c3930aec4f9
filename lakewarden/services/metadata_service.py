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
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import AddSnapshotUpdate, TableRequirement, TableUpdate, update_table_metadata

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import AlreadyExists, Conflict, InvalidField, NotFound
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


@dataclass(frozen=True)
class LoadedTable:
    metadata_location: str | None
    metadata: TableMetadata


class MetadataService:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._subscribers: list[Subscriber] = []
        self._cache: OrderedDict[str, TableMetadata] = OrderedDict()  # metadata files never change
        self._cache_lock = threading.Lock()

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

    def catalog(self, name: str) -> CatalogSpec:
        with self.db.read() as session:
            try:
                spec = catalog_store.spec_of(catalog_store.get_catalog(session, name))
            except NotFound:
                raise NoSuchWarehouse(f"warehouse {name!r} is not an internal catalog of this lakewarden") from None
        if spec.type != "internal":
            raise NoSuchWarehouse(f"warehouse {name!r} is a {spec.type} catalog, not an internal one")
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
        try:
            metadata = new_table_metadata(
                schema, spec_ or PartitionSpec(), order or SortOrder(),
                location or self.default_location(spec, namespace, name), dict(properties),
            )  # fmt: skip
        except ValueError as exc:
            raise InvalidField("table", str(exc)) from exc
        if stage:  # nothing is written until the client commits the create
            return LoadedTable(None, metadata)
        io = self._io(spec)
        location = self._new_location(metadata, 0)
        ToOutputFile.table_metadata(metadata, io.new_output(location))
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

    def load_table(self, catalog: str, namespace: str, name: str) -> LoadedTable:
        spec = self.catalog(catalog)
        with self.db.read() as session:
            location = store.get_pointer(session, catalog, namespace, name).metadata_location
        return LoadedTable(location, self._read(self._io(spec), location))

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
        for _ in range(MAX_COMMIT_ATTEMPTS):
            with self.db.read() as session:
                pointer = store.get_pointer(session, catalog, namespace, name)
                expected, version = pointer.metadata_location, pointer.version
            base = self._read(io, expected)
            try:
                for requirement in requirements:
                    requirement.validate(base)
            except CommitFailedException as exc:
                raise CommitFailed(str(exc)) from exc
            try:
                metadata = update_table_metadata(base, tuple(updates), metadata_location=expected)
            except (ValueError, KeyError) as exc:
                raise InvalidField("updates", str(exc)) from exc
            location = self._new_location(metadata, version + 1)
            ToOutputFile.table_metadata(metadata, io.new_output(location))
            with self.db.write() as session:
                new_version = store.swap_pointer(session, catalog, namespace, name, expected, location)
                if new_version is None:
                    event = None
                else:
                    details = _describe_commit(base, metadata, updates)
                    store.record_commit(session, catalog, namespace, name, version=new_version,
                                        metadata_location=location, client=client, **details)  # fmt: skip
                    event = self._event(session, "table-committed", catalog, namespace, name,
                                        {"metadata_location": location, "version": new_version, **details})  # fmt: skip
            if event is None:  # another commit won the swap: drop our file, re-check, try again
                io.delete(location)
                continue
            with self._cache_lock:
                self._cache[location] = metadata
            self._publish([event])
            return LoadedTable(location, metadata)
        raise CommitFailed(f"gave up after {MAX_COMMIT_ATTEMPTS} concurrent commits to {name}")

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
            _purge(io, self._read(io, location))
            io.delete(location)

    def rename_table(self, catalog: str, source: tuple[str, str], target: tuple[str, str]) -> None:
        self.catalog(catalog)
        with self.db.write() as session:
            store.rename_pointer(session, catalog, source, target)
            event = self._event(session, "table-renamed", catalog, target[0], target[1],
                                {"from": {"namespace": store.levels(source[0]), "table": source[1]}})  # fmt: skip
        self._publish([event])


def _describe_commit(base: TableMetadata, metadata: TableMetadata, updates: Sequence[TableUpdate]) -> dict[str, Any]:
    added = [u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)]
    if added:
        snapshot = added[-1]
        summary = snapshot.summary.model_dump() if snapshot.summary else {}
        operation = str(summary.get("operation", "append"))
        return {"operation": operation, "snapshot_id": snapshot.snapshot_id,
                "parent_snapshot_id": snapshot.parent_snapshot_id, "summary": summary}  # fmt: skip
    actions = sorted({u.action for u in updates})
    return {"operation": ",".join(actions)[:64] or "noop", "snapshot_id": metadata.current_snapshot_id,
            "parent_snapshot_id": base.current_snapshot_id, "summary": {}}  # fmt: skip


def _purge(io: FileIO, metadata: TableMetadata) -> None:
    """Delete what the table's metadata references: data, delete and manifest files, then metadata files."""
    paths: set[str] = set()
    for snapshot in metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    paths.update(log_entry.metadata_file for log_entry in metadata.metadata_log)
    for path in sorted(paths):
        with contextlib.suppress(OSError):  # already gone: purging again must not fail
            io.delete(path)
