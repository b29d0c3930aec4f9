"""Reads of the REST catalog's tables: a table's current metadata (for clients, and in process for lakewarden's
own services), and loadTable's answers: their entity tags, the `config` and vended `storage-credentials` a client
is told besides the metadata, and bodies served from the metadata files' cache (metadata_files.py), on the event
loop when nothing has to be read or made."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from lakewarden.domain.storage import Access, StorageProfile, Vending, table_prefixes
from lakewarden.metadata.paths import PATH_PROPERTIES
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.metadata_files import NO_CONFIG, MetadataFiles
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import Database

ETAGS_KEPT = 4096  # entity tags kept (about 150 bytes each with their key: 0.6 MB at most)


@functools.lru_cache(maxsize=ETAGS_KEPT)
def table_etag(metadata_location: str, snapshots: str) -> str:
    """A loadTable answer's entity tag: a metadata file never changes, so its location (and the snapshots
    mode) names the body. Kept for the tables loaded most recently: a hash per load shows in a cached load's time
    on the event loop."""
    return '"' + hashlib.sha256(f"{metadata_location}|{snapshots}".encode()).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str, etag: str) -> bool:
    """`If-None-Match`: `*`, or a list of entity tags (weak ones compare by their value, as RFC 9110 says)."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


@dataclass(frozen=True)
class LoadedTable:
    """A table's metadata as read or committed, and the file it is in (None for a staged create: not written)."""

    metadata_location: str | None
    metadata: TableMetadata


@dataclass(frozen=True)
class Delegation:
    """A client that asked for vended credentials (`X-Iceberg-Access-Delegation`): who, and what it may do."""

    access: Access
    who: str


@dataclass(frozen=True)
class TableAccess:
    """What a client is told besides the metadata: `config` (how to reach the files) and the credentials."""

    config: dict[str, str]
    storage_credentials: list[dict[str, Any]]

    def tail(self) -> bytes:
        """The end of a loadTable body (metadata_files.py)."""
        if not self.config and not self.storage_credentials:
            return NO_CONFIG
        text = ', "config": ' + json.dumps(self.config)
        if self.storage_credentials:
            text += ', "storage-credentials": ' + json.dumps(self.storage_credentials)
        return (text + "}").encode()

    def fields(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"config": self.config}
        if self.storage_credentials:
            extra["storage-credentials"] = self.storage_credentials
        return extra


class TableLoads:
    """A table's current metadata, and loadTable with what comes with it."""

    def __init__(
        self,
        db: Database,
        warehouses: Warehouses,
        files: MetadataFiles,
        heads: TableHeads,
        credentials: CredentialVendor,
    ) -> None:
        self.db = db
        self.warehouses = warehouses
        self.files = files
        self.heads = heads
        self.credentials = credentials

    def location(self, catalog: str, namespace: str, name: str) -> str:
        """The table's current metadata location: the head this node keeps when it holds the database alone
        (heads.py), else the pointer read."""
        return self.heads.current(self.db, (catalog, namespace, name))[0]

    def load_table(self, catalog: str, namespace: str, name: str) -> LoadedTable:
        spec = self.warehouses.catalog(catalog)
        location = self.location(catalog, namespace, name)
        return LoadedTable(location, self.files.read(self.warehouses.io_of(spec), location))

    def table(self, catalog: str, namespace: str, name: str) -> Table:
        """A read-only pyiceberg Table for lakewarden's own services: no HTTP round trip to ourselves."""
        loaded = self.load_table(catalog, namespace, name)
        assert loaded.metadata_location is not None
        identifier = (*store.levels(namespace), name)
        io = self.warehouses.io_of(self.warehouses.catalog(catalog))
        return Table(identifier, loaded.metadata, loaded.metadata_location, io, NoopCatalog(catalog))

    def table_exists(self, catalog: str, namespace: str, name: str) -> bool:
        self.warehouses.catalog(catalog)
        with self.db.read() as session:
            return store.pointer_exists(session, catalog, namespace, name)

    def response_body(self, loaded: LoadedTable) -> bytes:
        """`{"metadata-location", "metadata", "config"}` as JSON, cached by metadata location."""
        assert loaded.metadata_location is not None
        return self.files.response_body(loaded.metadata_location, loaded.metadata)

    def table_access(
        self, catalog: str, namespace: str, name: str, metadata: TableMetadata, delegation: Delegation | None
    ) -> TableAccess:
        """`config` for a client of the table, and `storage-credentials` scoped to the table's prefixes when
        the client asked for them and may have them."""
        profile = self.warehouses.storage(self.warehouses.catalog(catalog))
        return self.access_with(profile, catalog, namespace, name, metadata, delegation)

    def access_with(
        self,
        profile: StorageProfile,
        catalog: str,
        namespace: str,
        name: str,
        metadata: TableMetadata,
        delegation: Delegation | None,
    ) -> TableAccess:
        """`table_access` with the storage profile given: an internal catalog's, or a forwarded one's."""
        config = profile.client_config()
        if delegation is None or not profile.vends(delegation.access):
            return TableAccess(config, [])
        paths = (metadata.properties[k] for k in PATH_PROPERTIES if k in metadata.properties)
        prefixes = table_prefixes(metadata.location, paths)
        credentials = self.credentials.storage_credentials(profile, prefixes, delegation.access, delegation.who)
        if credentials and profile.vending is Vending.STS:
            # Java's S3FileIO asks this endpoint (relative to the catalog's URI) before they expire
            path = "%1F".join(quote(level, safe="") for level in store.levels(namespace))
            config["client.refresh-credentials-endpoint"] = (
                f"v1/{quote(catalog, safe='')}/namespaces/{path}/tables/{quote(name, safe='')}/credentials"
            )
        return TableAccess(config, credentials)

    def load_credentials(self, catalog: str, namespace: str, name: str, delegation: Delegation) -> list[dict[str, Any]]:
        """The `/credentials` endpoint: the table's storage credentials alone (none for a local warehouse).

        One credential, under the table's location, where every prefix has the same keys (the vendor gives one
        set of keys for all of a table's prefixes): Iceberg's S3FileIO renews through this endpoint and refuses
        an answer with more than one S3 credential, and those keys reach every prefix the table writes to."""
        metadata = self.load_table(catalog, namespace, name).metadata
        credentials = self.table_access(catalog, namespace, name, metadata, delegation).storage_credentials
        if len(credentials) > 1 and all(c["config"] == credentials[0]["config"] for c in credentials):
            location = metadata.location.rstrip("/") + "/"
            return [next((c for c in credentials if c["prefix"] == location), credentials[0])]
        return credentials

    def load_table_body(
        self,
        catalog: str,
        namespace: str,
        name: str,
        snapshots: str = "all",
        if_none_match: str | None = None,
        delegation: Delegation | None = None,
    ) -> tuple[str, bytes | None]:
        """The loadTable answer: its ETag, and its body, the metadata part serialised once per metadata file
        (which never changes) and `snapshots` mode; no body when `if_none_match` names the ETag (the client's
        copy is current). `delegation`: the client asked for vended credentials."""
        answer = self._load_answer(catalog, namespace, name, snapshots, if_none_match, delegation, read=True)
        assert answer is not None
        return answer

    async def cached_load(
        self,
        catalog: str,
        namespace: str,
        name: str,
        snapshots: str = "all",
        if_none_match: str | None = None,
        delegation: Delegation | None = None,
    ) -> tuple[str, bytes | None] | None:
        """As load_table_body from memory alone (the head this node keeps when it holds the database alone, else
        one indexed read of the pointer, awaited), or None when a metadata file would have to be read or
        credentials made: the REST route answers the hot case on its event loop, the rest in a thread."""
        location = (await self.heads.current_async(self.db, (catalog, namespace, name)))[0]
        return self._load_answer(
            catalog, namespace, name, snapshots, if_none_match, delegation, read=False, location=location
        )

    def _load_answer(
        self,
        catalog: str,
        namespace: str,
        name: str,
        snapshots: str,
        if_none_match: str | None,
        delegation: Delegation | None,
        read: bool,
        location: str | None = None,
    ) -> tuple[str, bytes | None] | None:
        spec = self.warehouses.catalog(catalog)
        profile = self.warehouses.storage(spec)
        if location is None:
            location = self.location(catalog, namespace, name)
        # what the client is told besides the metadata changes with the profile and what it may do
        variant = (
            snapshots if not profile.s3 else f"{snapshots}|{profile.fingerprint}|{delegation and delegation.access}"
        )
        etag = table_etag(location, variant)
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return etag, None
        if delegation is not None and profile.vends(delegation.access):
            if not read:
                return None  # credentials are made for the table's prefixes, maybe by a call to STS: in a thread
            metadata = self.files.read(self.warehouses.io_of(spec), location)
            tail = self.table_access(catalog, namespace, name, metadata, delegation).tail()
            return etag, self.files.response_body(location, metadata, snapshots, tail)
        tail = TableAccess(profile.client_config(), []).tail()
        body = self.files.cached_body(location, snapshots, tail)
        if body is None and read:
            body = self.files.response_body(
                location, self.files.read(self.warehouses.io_of(spec), location), snapshots, tail
            )
        return None if body is None else (etag, body)
