"""Views of lakewarden's internal catalogs: the REST catalog's view routes, in the tables' machinery.

A view is a pointer in the system database (`iceberg_view`) to its current metadata file, written under
the view's location (confined to the warehouse like a table's). A replace applies the client's updates to
the current metadata (metadata/views.py, Java's ViewMetadata.Builder rules), writes a new file and swaps
the pointer by compare-and-swap, retrying on the fresh metadata when another replace won; every change is
recorded on the timeline and announced in the outbox (`view-*` events, which do not wake the evaluator).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

from lakewarden.domain.catalogs import check_object_name
from lakewarden.domain.errors import CommitFailed, CommitStateUnknown, InvalidField
from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.metadata.paths import OutsideRoot, check_under, confine_table
from lakewarden.metadata.views import AssertViewUUID, ViewChangeError, apply_view_updates, new_view, view_json
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.store import rest_catalog as store
from lakewarden.store import views as view_store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
MAX_REPLACE_ATTEMPTS = 10


@dataclass(frozen=True)
class LoadedView:
    metadata_location: str
    metadata: ViewMetadata

    def body(self) -> dict[str, Any]:
        metadata = self.metadata.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"metadata-location": self.metadata_location, "metadata": metadata, "config": {}}


class ViewCatalog:
    def __init__(self, db: Database, warehouses: Warehouses, files: MetadataFiles, outbox: Outbox) -> None:
        self.db = db
        self.warehouses = warehouses
        self.files = files  # (only to discard what a lost replace wrote)
        self.outbox = outbox

    def _io(self, catalog: str) -> tuple[FileIO, str]:
        spec = self.warehouses.catalog(catalog)
        return self.warehouses.io_of(spec), spec.properties["warehouse"]

    @staticmethod
    def _read(io: FileIO, location: str) -> ViewMetadata:
        with io.new_input(location).open() as stream:
            return ViewMetadata.model_validate_json(stream.read())

    @staticmethod
    def _write(io: FileIO, metadata: ViewMetadata, version: int) -> str:
        location = f"{metadata.location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"
        with io.new_output(location).create(overwrite=False) as out:
            out.write(view_json(metadata).encode())
        return location

    def list_views(self, catalog: str, namespace: str) -> list[str]:
        self.warehouses.catalog(catalog)
        with self.db.read() as session:
            return view_store.list_views(session, catalog, namespace)

    def exists(self, catalog: str, namespace: str, name: str) -> bool:
        self.warehouses.catalog(catalog)
        with self.db.read() as session:
            return view_store.view_exists(session, catalog, namespace, name)

    def load(self, catalog: str, namespace: str, name: str) -> LoadedView:
        io, _ = self._io(catalog)
        with self.db.read() as session:
            location = view_store.get_view(session, catalog, namespace, name).metadata_location
        return LoadedView(location, self._read(io, location))

    def create(
        self,
        catalog: str,
        namespace: str,
        name: str,
        schema: Schema,
        version: ViewVersion,
        properties: dict[str, str],
        location: str | None,
    ) -> LoadedView:
        io, warehouse = self._io(catalog)
        spec = self.warehouses.catalog(catalog)
        check_object_name("name", name)
        with self.db.read() as session:
            store.get_namespace(session, catalog, namespace)
            store.name_taken(session, catalog, namespace, name)
        location = location or self.warehouses.default_location(spec, namespace, name)
        confine_table(warehouse, location, properties)
        try:
            metadata = new_view(schema, version, dict(properties), location)
        except ViewChangeError as exc:
            raise InvalidField("view-version", str(exc)) from exc
        written = self._write(io, metadata, 0)
        try:
            with self.db.write(any_node=True) as session:
                view_store.create_view(session, catalog, namespace, name, written)
                self._record(session, catalog, namespace, name, 0, written, "create-view", metadata)
                event = self._event(session, EventType.VIEW_CREATED, catalog, namespace, name, written, 0)
        except CommitStateUnknown:  # the new pointer may name the file: it stays
            raise
        except Exception:
            self.files.discard(io, [written])
            raise
        self.outbox.publish([event])
        return LoadedView(written, metadata)

    def register(self, catalog: str, namespace: str, name: str, metadata_location: str) -> LoadedView:
        io, warehouse = self._io(catalog)
        check_object_name("name", name)
        try:
            check_under(warehouse, metadata_location, "metadata-location")
        except OutsideRoot as exc:
            raise InvalidField("metadata-location", f"{exc}: only metadata under the warehouse is registered") from None
        try:
            metadata = self._read(io, metadata_location)
        except Exception as exc:
            raise InvalidField("metadata-location", f"cannot read view metadata there: {exc}") from exc
        confine_table(warehouse, metadata.location, metadata.properties)
        with self.db.write(any_node=True) as session:
            view_store.create_view(session, catalog, namespace, name, metadata_location)
            self._record(session, catalog, namespace, name, 0, metadata_location, "register-view", metadata)
            event = self._event(session, EventType.VIEW_CREATED, catalog, namespace, name, metadata_location, 0)
        self.outbox.publish([event])
        return LoadedView(metadata_location, metadata)

    def replace(
        self,
        catalog: str,
        namespace: str,
        name: str,
        requirements: Sequence[AssertViewUUID],
        updates: Sequence[object],
        client: str | None = None,
    ) -> LoadedView:
        """A replace (CREATE OR REPLACE VIEW, ALTER VIEW … AS, properties): compare-and-swap, retried on the
        fresh metadata while its requirements hold."""
        io, warehouse = self._io(catalog)
        for _ in range(MAX_REPLACE_ATTEMPTS):
            with self.db.read() as session:
                pointer = view_store.get_view(session, catalog, namespace, name)
                expected, version = pointer.metadata_location, pointer.version
            base = self._read(io, expected)
            for requirement in requirements:
                if requirement.uuid != base.view_uuid:
                    raise CommitFailed(f"Requirement failed: view UUID does not match: {requirement.uuid}")
            try:
                metadata = apply_view_updates(base, updates)
            except ViewChangeError as exc:
                raise InvalidField("updates", str(exc)) from exc
            if metadata is base:
                return LoadedView(expected, base)
            confine_table(warehouse, metadata.location, metadata.properties)
            written = self._write(io, metadata, version + 1)
            with self.db.write(any_node=True) as session:
                swapped = view_store.swap_view(session, catalog, namespace, name, expected, version, written)
                if swapped:
                    self._record(
                        session, catalog, namespace, name, version + 1, written, "replace-view", metadata, client
                    )
                    event = self._event(
                        session, EventType.VIEW_REPLACED, catalog, namespace, name, written, version + 1
                    )
            if swapped:
                self.outbox.publish([event])
                return LoadedView(written, metadata)
            self.files.discard(io, [written])  # another replace won: check again on its metadata
        raise CommitFailed(f"gave up after {MAX_REPLACE_ATTEMPTS} concurrent replaces of view {name}")

    def drop(self, catalog: str, namespace: str, name: str) -> None:
        self.warehouses.catalog(catalog)
        with self.db.write(any_node=True) as session:
            row = view_store.drop_view(session, catalog, namespace, name)
            event = self._event(
                session, EventType.VIEW_DROPPED, catalog, namespace, name, row.metadata_location, row.version
            )
        self.outbox.publish([event])

    def rename(self, catalog: str, source: tuple[str, str], target: tuple[str, str]) -> None:
        self.warehouses.catalog(catalog)
        check_object_name("destination.name", target[1])
        with self.db.write(any_node=True) as session:
            view_store.rename_view(session, catalog, source, target)
            payload = {"from": {"namespace": store.levels(source[0]), "view": source[1]}}
            event = self.outbox.write(session, EventType.VIEW_RENAMED, catalog, target[0], target[1], payload)
        self.outbox.publish([event])

    @staticmethod
    def _record(
        session: Any,
        catalog: str,
        namespace: str,
        name: str,
        version: int,
        location: str,
        operation: str,
        metadata: ViewMetadata,
        client: str | None = None,
    ) -> None:
        summary = next((v.summary for v in metadata.versions if v.version_id == metadata.current_version_id), {})
        store.record_commit(
            session,
            catalog,
            namespace,
            name,
            version=version,
            operation=operation,
            snapshot_id=None,
            parent_snapshot_id=None,
            summary={**summary, "view-version-id": str(metadata.current_version_id)},
            metadata_location=location,
            client=client,
        )

    def _event(
        self, session: Any, kind: EventType, catalog: str, namespace: str, name: str, location: str, version: int
    ) -> CatalogEvent:
        payload = {"metadata_location": location, "version": version}
        return self.outbox.write(session, kind, catalog, namespace, name, payload)
