"""The warehouses of lakewarden's REST catalog: its `internal` catalogs, each looked up once by name (a client's
`warehouse` or path prefix), with its storage profile and the server's own FileIO for it, kept until the catalog
is changed or removed (`forget`)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from pyiceberg.io import FileIO, load_file_io

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import NoSuchWarehouse, NotFound
from lakewarden.domain.storage import StorageProfile
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database


class Warehouses:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._catalogs: dict[str, CatalogSpec] = {}  # internal catalogs by name
        self._profiles: dict[str, StorageProfile] = {}  # their storage profiles, by name
        self._ios: dict[str, tuple[Any, FileIO]] = {}  # the server's FileIO of each, with what it was made from

    def forget(self, name: str) -> None:
        """A catalog was changed or removed: look it up afresh next time."""
        with self._lock:
            self._catalogs.pop(name, None)
            self._profiles.pop(name, None)
            self._ios.pop(name, None)

    def catalog(self, name: str) -> CatalogSpec:
        """The internal catalog of that name; NoSuchWarehouse if there is none (or it is of another type)."""
        with self._lock:
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
        with self._lock:
            self._catalogs[name] = spec
        return spec

    def names(self) -> list[str]:
        """The internal catalogs' names."""
        with self.db.read() as session:
            return [c.name for c in catalog_store.list_catalogs(session) if c.type == "internal"]

    def storage(self, spec: CatalogSpec) -> StorageProfile:
        """The catalog's storage profile (domain/storage.py)."""
        with self._lock:
            profile = self._profiles.get(spec.name)
        if profile is None or profile.warehouse != spec.properties["warehouse"]:
            profile = StorageProfile.of(spec.properties)
            with self._lock:
                self._profiles[spec.name] = profile
        return profile

    def io_of(self, spec: CatalogSpec) -> FileIO:
        """The server's own FileIO for the catalog's warehouse (local, or S3 with the server's keys)."""
        properties = self.storage(spec).server_io_properties(spec.connection_properties)
        key = (spec.properties["warehouse"], tuple(sorted(properties.items())))
        with self._lock:
            known = self._ios.get(spec.name)
        if known is not None and known[0] == key:
            return known[1]  # made once per catalog: making one is a noticeable part of a commit
        io = load_file_io(properties, spec.properties["warehouse"])
        with self._lock:
            self._ios[spec.name] = (key, io)
        return io

    @staticmethod
    def default_location(spec: CatalogSpec, namespace: str, name: str) -> str:
        """Where a table or view goes when its client names no location: a fresh directory each time, so that one
        dropped and created again never sees the old files."""
        path = "/".join(store.levels(namespace))
        return f"{spec.properties['warehouse'].rstrip('/')}/{path}/{name}-{uuid.uuid4().hex[:12]}"
