"""lakewarden's Iceberg REST catalog, its parts side by side. Each part receives the collaborators it uses
(services/composition.py builds them); none knows this holder, which only names them for the routes and does
what concerns them all."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lakewarden.services.rest_catalog.catalog_tables import CatalogTables
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.services.rest_catalog.commits import TableCommits
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from lakewarden.services.rest_catalog.federation import Federation
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import (
    Delegation,
    LoadedTable,
    TableAccess,
    TableLoads,
    etag_matches,
    table_etag,
)
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.read_ahead import ManifestReadAhead
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning
from lakewarden.services.rest_catalog.views import ViewCatalog
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.services.tables.reads import TableReads
from lakewarden.store import rest_catalog as store


@dataclass
class RestCatalog:
    warehouses: Warehouses  # the internal catalogs served, their storage and FileIO
    outbox: Outbox  # the events of every change, and their in-process subscribers
    heads: TableHeads  # each table's head (metadata location, version) as this node knows it
    files: MetadataFiles  # parsed metadata files and loadTable bodies, kept
    credentials: CredentialVendor  # storage credentials vended to clients
    queue: CommitQueue  # a table's commits take turns on this node
    loads: TableLoads  # reads: a table's metadata, loadTable's answers
    tables: CatalogTables  # namespaces and tables created, registered, dropped, renamed
    commits: TableCommits  # commits to one table or several at once
    views: ViewCatalog
    scans: ScanPlanning  # server-side scan planning
    read_ahead: ManifestReadAhead  # fills the manifest cache as commits land and at start
    federation: Federation  # external catalogs served by forwarding to them
    reads: TableReads  # the scans and commits clients report, and the server's own plans (services/tables)

    def forget_catalog(self, name: str) -> None:
        """A catalog was changed or removed: look it up afresh next time, and read its tables' heads again (a
        catalog dropped and made again has other tables under the same names)."""
        self.warehouses.forget(name)
        self.federation.forget(name)
        self.heads.forget()

    def forwarded_answer(
        self, prefix: str, namespace: str, name: str, table: LoadedTable, asked: Delegation | None
    ) -> dict[str, Any]:
        """A forwarded table's loadTable answer: its metadata, and how to reach its files (its catalog's storage
        profile, credentials as `asked`)."""
        found = self.federation.find(prefix)
        profile = None if found is None else found.profile
        access = (
            TableAccess({}, [])
            if profile is None
            else self.loads.access_with(profile, prefix, namespace, name, table.metadata, asked)
        )
        return {
            "metadata-location": table.metadata_location,
            "metadata": table.metadata.model_dump(mode="json", by_alias=True, exclude_none=True),
            **access.fields(),
        }

    def forwarded_load(
        self, prefix: str, namespace: str, name: str, if_none_match: str | None, asked: Delegation | None
    ) -> tuple[str, bytes | None]:
        """A forwarded table loaded from its catalog of record: the answer's ETag and its JSON body, None when
        `if_none_match` names it (as TableLoads.load_table_body answers for an internal table)."""
        loaded = self.federation.load_table(prefix, tuple(store.levels(namespace)), name)
        assert loaded.metadata_location is not None
        etag = table_etag(loaded.metadata_location, "all")
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return etag, None
        answer = self.forwarded_answer(prefix, namespace, name, loaded, asked)
        return etag, json.dumps(answer, separators=(",", ":")).encode()

    def close(self) -> None:
        self.scans.close()
        self.read_ahead.close()
        self.tables.close()
