"""lakewarden's Iceberg REST catalog, its parts side by side. Each part receives the collaborators it uses
(services/composition.py builds them); none knows this holder, which only names them for the routes and does
what concerns them all."""

from __future__ import annotations

from dataclasses import dataclass

from lakewarden.services.rest_catalog.catalog_tables import CatalogTables
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.services.rest_catalog.commits import TableCommits
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from lakewarden.services.rest_catalog.federation import Federation
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import TableLoads
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.read_ahead import ManifestReadAhead
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning
from lakewarden.services.rest_catalog.views import ViewCatalog
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.services.tables.reads import TableReads


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

    def close(self) -> None:
        self.scans.close()
        self.read_ahead.close()
        self.tables.close()
