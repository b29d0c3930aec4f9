"""lakewarden's own catalog (type `internal`) as the REST routes serve it: every endpoint, over the parts that keep
its namespaces, tables, commits, views and plans (their pointers in the system database)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from pyiceberg.table.update import TableRequirement, TableUpdate

from lakewarden.domain.catalogs import IDEMPOTENCY_LIFETIME_ISO
from lakewarden.domain.errors import InvalidField, NoSuchWarehouse
from lakewarden.domain.reads import ReadReport
from lakewarden.metadata.files import identity_fields
from lakewarden.metadata.views import AssertViewUUID, ViewUpdate
from lakewarden.services.rest_catalog.catalog_tables import CatalogTables
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.services.rest_catalog.commits import TableChange, TableCommits
from lakewarden.services.rest_catalog.loads import Delegation, LoadedTable, TableLoads
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning, parse_affinity, parse_plan_request
from lakewarden.services.rest_catalog.served import (
    METRICS,
    NAMESPACE_CHANGES,
    NAMESPACES,
    SCAN_PLANNING,
    TABLE_EXTRAS,
    TABLES,
    TRANSACTIONS,
    VIEWS,
    Answer,
    LoadAnswer,
    MetricsRequest,
    NewTable,
    NewView,
    PropertiesUpdated,
    ReadRecorder,
    ServedCatalog,
    load_result,
)
from lakewarden.services.rest_catalog.views import ViewCatalog
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.services.rest_catalog.writes_in_flight import APP_ID
from lakewarden.store import rest_catalog as store


@dataclass(frozen=True)
class OwnParts:
    """The parts an internal catalog's answers come from (RestCatalog's, shared by every internal catalog)."""

    warehouses: Warehouses
    tables: CatalogTables
    loads: TableLoads
    commits: TableCommits
    queue: CommitQueue
    views: ViewCatalog
    scans: ScanPlanning
    reads: ReadRecorder


class OwnCatalog(ServedCatalog):
    """An internal catalog by name. A name that is no internal catalog answers NoSuchWarehouse where it is used."""

    endpoints = (
        *NAMESPACES,
        *NAMESPACE_CHANGES,
        *TABLES,
        *TABLE_EXTRAS,
        *METRICS,
        *TRANSACTIONS,
        *SCAN_PLANNING,
        *VIEWS,
    )

    def __init__(self, parts: OwnParts, name: str) -> None:
        self.flights = parts.commits.flights
        super().__init__(name)
        self.parts = parts

    def config(self) -> Answer:
        warehouses = self.parts.warehouses
        return {
            # how to reach the warehouse (no secrets)
            "defaults": warehouses.storage(warehouses.catalog(self.name)).client_config(),
            # namespaces in paths: levels joined by 0x1F (the spec's default separator, advertised as it says)
            "overrides": {"prefix": self.name, "namespace-separator": "%1F"},
            "endpoints": list(self.endpoints),
            "idempotency-key-lifetime": IDEMPOTENCY_LIFETIME_ISO,
        }

    # ---- namespaces

    def list_namespaces(self, parent: str | None) -> list[str]:
        return self.parts.tables.list_namespaces(self.name, parent)

    def create_namespace(self, namespace: str, properties: dict[str, str]) -> None:
        try:
            self.parts.tables.create_namespace(self.name, namespace, properties)
        except NoSuchWarehouse as exc:  # the spec documents no 404 here (every other route has one): a bad request
            raise InvalidField("prefix", str(exc)) from exc

    def load_namespace(self, namespace: str) -> dict[str, str]:
        return self.parts.tables.load_namespace(self.name, namespace)

    def drop_namespace(self, namespace: str) -> None:
        self.parts.tables.drop_namespace(self.name, namespace)

    def update_namespace_properties(
        self, namespace: str, removals: list[str], updates: dict[str, str]
    ) -> PropertiesUpdated:
        return PropertiesUpdated(
            *self.parts.tables.update_namespace_properties(self.name, namespace, removals, updates)
        )

    # ---- tables

    def list_tables(self, namespace: str) -> list[str]:
        return self.parts.tables.list_tables(self.name, namespace)

    def _answer(self, namespace: str, name: str, table: LoadedTable, asked: Delegation | None) -> Answer:
        return load_result(table, self.parts.loads.table_access(self.name, namespace, name, table.metadata, asked))

    def create_table(self, namespace: str, table: NewTable, asked: Delegation | None) -> Answer:
        loaded = self.parts.tables.create_table(
            self.name,
            namespace,
            table.name,
            table.schema,
            table.partition_spec,
            table.write_order,
            table.location,
            table.properties,
            table.stage_create,
        )
        return self._answer(namespace, table.name, loaded, asked)

    def cached_load(
        self, namespace: str, table: str, snapshots: str, if_none_match: str | None, asked: Delegation | None
    ) -> Awaitable[LoadAnswer | None]:
        return self.parts.loads.cached_load(self.name, namespace, table, snapshots, if_none_match, asked)

    def load_table(
        self, namespace: str, table: str, snapshots: str, if_none_match: str | None, asked: Delegation | None
    ) -> LoadAnswer:
        return self.parts.loads.load_table_body(self.name, namespace, table, snapshots, if_none_match, asked)

    def table_exists(self, namespace: str, table: str) -> bool:
        return self.parts.loads.table_exists(self.name, namespace, table)

    def commit_turn(self, tables: Sequence[tuple[str, str]]) -> AbstractAsyncContextManager[Any]:
        keys = [(self.name, *store.levels(namespace), name) for namespace, name in tables]
        return self.parts.queue.turn(keys[0]) if len(keys) == 1 else self.parts.queue.turns(keys)

    def commit_table(
        self,
        namespace: str,
        table: str,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        client: str | None,
        wait: bool,
    ) -> bytes:
        loaded = self.parts.commits.commit_table(self.name, namespace, table, requirements, updates, client, wait)
        return self.parts.loads.response_body(loaded)

    def drop_table(self, namespace: str, table: str, purge: bool) -> None:
        self.parts.tables.drop_table(self.name, namespace, table, purge)

    def rename_table(self, source: tuple[str, str], target: tuple[str, str]) -> None:
        self.parts.tables.rename_table(self.name, source, target)

    def commit_transaction(self, changes: Sequence[TableChange], client: str | None) -> None:
        self.parts.commits.commit_transaction(self.name, list(changes), client)

    def register_table(
        self, namespace: str, name: str, metadata_location: str, overwrite: bool, asked: Delegation | None
    ) -> Answer:
        loaded = self.parts.tables.register_table(self.name, namespace, name, metadata_location, overwrite)
        return self._answer(namespace, name, loaded, asked)

    def load_credentials(self, namespace: str, table: str, asked: Delegation) -> list[dict[str, Any]]:
        return self.parts.loads.load_credentials(self.name, namespace, table, asked)

    # ---- reports

    def partition_fields(self, namespace: str, table: str) -> list[tuple[str, str]]:
        metadata = self.parts.loads.load_table(self.name, namespace, table).metadata
        return identity_fields(metadata.spec(), metadata.schema())

    def record_read(self, namespace: str, table: str, report: ReadReport) -> None:
        self.parts.reads.record((self.name, namespace, table), report)

    def write_planned(self, namespace: str, table: str, request: MetricsRequest, reporter: str) -> None:
        self.parts.commits.flights.planned((self.name, namespace, table), request.metadata)
        if request.snapshot_id is not None:
            writer = request.metadata.get(APP_ID) or reporter
            commits = self.parts.commits
            commits.yield_to_planned_write(self.name, namespace, table, request.snapshot_id, request.filter, writer)

    # ---- server-side scan planning

    def plan_scan(
        self, namespace: str, table: str, body: dict[str, Any], asked: Delegation | None, planner: str
    ) -> Answer:
        scan, affinity = parse_plan_request(body), parse_affinity(body)
        return self.parts.scans.submit(self.name, namespace, table, scan, asked, affinity, body.get("filter"), planner)

    def plan_result(self, namespace: str, table: str, plan_id: str, asked: Delegation | None) -> Answer:
        return self.parts.scans.result(self.name, namespace, table, plan_id, asked)

    def cancel_plan(self, namespace: str, table: str, plan_id: str) -> None:
        self.parts.scans.cancel(self.name, namespace, table, plan_id)

    def plan_tasks(self, namespace: str, table: str, plan_task: str) -> Answer:
        return self.parts.scans.tasks(self.name, namespace, table, plan_task)

    # ---- views

    def list_views(self, namespace: str) -> list[str]:
        return self.parts.views.list_views(self.name, namespace)

    def create_view(self, namespace: str, view: NewView) -> Answer:
        created = self.parts.views.create(
            self.name, namespace, view.name, view.schema, view.version, view.properties, view.location
        )
        return created.body()

    def load_view(self, namespace: str, view: str) -> Answer:
        return self.parts.views.load(self.name, namespace, view).body()

    def view_exists(self, namespace: str, view: str) -> bool:
        return self.parts.views.exists(self.name, namespace, view)

    def replace_view(
        self,
        namespace: str,
        view: str,
        requirements: Sequence[AssertViewUUID],
        updates: Sequence[ViewUpdate],
        client: str | None,
    ) -> Answer:
        return self.parts.views.replace(self.name, namespace, view, requirements, updates, client).body()

    def drop_view(self, namespace: str, view: str) -> None:
        self.parts.views.drop(self.name, namespace, view)

    def rename_view(self, source: tuple[str, str], target: tuple[str, str]) -> None:
        self.parts.views.rename(self.name, source, target)

    def register_view(self, namespace: str, name: str, metadata_location: str) -> Answer:
        return self.parts.views.register(self.name, namespace, name, metadata_location).body()
