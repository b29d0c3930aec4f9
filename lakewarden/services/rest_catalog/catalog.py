"""lakewarden's Iceberg REST catalog, its parts side by side. Each part receives the collaborators it uses
(services/composition.py builds them); none knows this holder, which only names them for the routes and does
what concerns them all."""

from __future__ import annotations

from dataclasses import dataclass

from lakewarden.domain.catalogs import REST_ENDPOINT
from lakewarden.domain.errors import Forbidden
from lakewarden.domain.security import NOBODY, Principal
from lakewarden.services.rest_catalog.catalog_tables import CatalogTables
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.services.rest_catalog.commits import TableCommits
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from lakewarden.services.rest_catalog.federation import Federation, Forwarded
from lakewarden.services.rest_catalog.forwarded import ForwardedCatalog
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import TableLoads
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.own import OwnCatalog, OwnParts
from lakewarden.services.rest_catalog.read_ahead import ManifestReadAhead
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning
from lakewarden.services.rest_catalog.served import ReadRecorder, ServedCatalog
from lakewarden.services.rest_catalog.views import ViewCatalog
from lakewarden.services.rest_catalog.warehouses import Warehouses

OWN_FACES_KEPT = 1024


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
    reads: ReadRecorder  # keeps the scans and commits clients report (services/tables/reads.py)

    def __post_init__(self) -> None:
        self._own = OwnParts(
            self.warehouses, self.tables, self.loads, self.commits, self.queue, self.views, self.scans, self.reads
        )
        self._own_faces: dict[str, OwnCatalog] = {}  # by name: an own catalog's face is the same for every request

    def forget_catalog(self, name: str) -> None:
        """A catalog was changed or removed: look it up afresh next time, and read its tables' heads again (a
        catalog dropped and made again has other tables under the same names)."""
        self.warehouses.forget(name)
        self.federation.forget(name)
        self._own_faces.pop(name, None)
        self.heads.forget()

    def served(self, name: str, caller: Principal) -> ServedCatalog:
        """The catalog a REST request's prefix names, as the routes serve it: a forwarded one (federation.py) or
        lakewarden's own (an unknown name too, which answers NoSuchWarehouse where it is used). The one place
        the two are told apart. May read the database the first time a name is asked for."""
        return self._serve(name, self.federation.find(name), caller)

    def served_known(self, name: str, caller: Principal) -> ServedCatalog | None:
        """`served` without any I/O, or None when the name was not looked up yet (the event loop's way)."""
        looked_up, found = self.federation.known_as(name)
        return self._serve(name, found, caller) if looked_up else None

    def _serve(self, name: str, found: Forwarded | None, caller: Principal) -> ServedCatalog:
        if found is None:
            own = self._own_faces.get(name)
            if own is None:
                own = OwnCatalog(self._own, name)
                if len(self._own_faces) < OWN_FACES_KEPT:  # any name is served; only so many are kept
                    self._own_faces[name] = own
            return own
        # a catalog not opened to clients (`rest-endpoint.enabled`) is served to lakewarden's optimizers only
        if not (found.open_to_clients or caller.task_holder is not None or caller is NOBODY):
            raise Forbidden(
                f"catalog {name} is served to lakewarden's optimizers only: set {REST_ENDPOINT}=true on it to serve "
                "its tables to every client with a grant"
            )
        return ForwardedCatalog(self.federation, found, self.loads, self.reads)

    def close(self) -> None:
        self.scans.close()
        self.read_ahead.close()
        self.tables.close()
