"""One catalog as lakewarden's Iceberg REST routes serve it: the one face every route talks to.

A route parses its request, asks `RestCatalog.served` for the catalog its prefix names and makes one call. Which
kind of catalog answers (lakewarden's own, own.py; one forwarded to its catalog of record, forwarded.py) is decided
there and nowhere else. A kind serves what it overrides; every other endpoint answers the spec's 406, and
`endpoints` lists what `GET /v1/config` advertises. A third kind of catalog is a third subclass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.view.metadata import ViewVersion

from lakewarden.domain.errors import InvalidField, NoSuchTable, Unsupported
from lakewarden.domain.reads import ReadReport, commit_report, scan_report
from lakewarden.metadata.views import AssertViewUUID, ViewUpdate
from lakewarden.services.rest_catalog.commits import TableChange
from lakewarden.services.rest_catalog.loads import Delegation, LoadedTable, TableAccess
from lakewarden.services.rest_catalog.writes_in_flight import WritesInFlight, own_snapshot, plans_a_write
from lakewarden.store import rest_catalog as store

# every catalog's endpoints, as `GET /v1/config` names them
NAMESPACES = (
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
)
NAMESPACE_CHANGES = (
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
)
TABLES = (
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
)
TABLE_EXTRAS = ("POST /v1/{prefix}/tables/rename",)
METRICS = ("POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",)
TRANSACTIONS = (
    "POST /v1/{prefix}/transactions/commit",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
)
SCAN_PLANNING = (
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks",
)
VIEWS = (
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/register-view",
)
SCAN_REPORT, COMMIT_REPORT = "scan-report", "commit-report"
Answer = dict[str, Any]  # a JSON answer of the spec's (LoadTableResult, LoadViewResult, a plan...)
LoadAnswer = tuple[str, bytes | None]  # a loadTable answer: its ETag, and its JSON body (None: not modified)


class ReadRecorder(Protocol):
    """Where the reports clients send are kept (services/tables/reads.py's TableReads)."""

    def record(self, owner: tuple[str, str, str], report: ReadReport) -> None: ...


@dataclass(frozen=True)
class NewTable:
    """A createTable request."""

    name: str
    schema: Schema
    partition_spec: PartitionSpec | None = None
    write_order: SortOrder | None = None
    location: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    stage_create: bool = False


@dataclass(frozen=True)
class NewView:
    """A createView request."""

    name: str
    schema: Schema
    version: ViewVersion
    properties: dict[str, str]
    location: str | None = None


@dataclass(frozen=True)
class PropertiesUpdated:
    """A namespace's properties update: the keys set, removed, and asked to be removed but absent."""

    updated: list[str]
    removed: list[str]
    missing: list[str]


@dataclass(frozen=True)
class MetricsRequest:
    """A ReportMetricsRequest (Iceberg's ReportMetricsRequestParser): a ScanReport or a CommitReport."""

    report_type: str
    snapshot_id: int | None
    filter: Any
    operation: str | None
    metrics: dict[str, dict[str, Any]]
    metadata: dict[str, str]
    projected_field_ids: tuple[int, ...] = ()  # a scan report's projection
    by_lakewarden: bool = False  # reported by one of lakewarden's own optimizers (its catalog token)


def load_result(table: LoadedTable, access: TableAccess) -> Answer:
    """The spec's LoadTableResult: the table's metadata, and how to reach its files."""
    return {
        "metadata-location": table.metadata_location,
        "metadata": table.metadata.model_dump(mode="json", by_alias=True, exclude_none=True),
        **access.fields(),
    }


class ServedCatalog:
    """One catalog, by the name a client passes as `warehouse` (its prefix). Namespaces are given as the store's
    key (levels joined by 0x1F). Methods that may wait on a network, a file or the database are plain, and run in
    a worker thread; the two coroutines answer on the event loop or say they cannot."""

    endpoints: Sequence[str] = ()

    def __init__(self, name: str) -> None:
        self.name = name

    def _unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"catalog {self.name} does not serve {what} (GET /v1/config lists its endpoints)")

    def config(self) -> Answer:
        """`GET /v1/config`'s answer for this catalog: the client's defaults, overrides and the endpoints."""
        raise self._unsupported("its configuration")

    # ---- namespaces

    def list_namespaces(self, parent: str | None) -> list[str]:
        raise self._unsupported("namespaces")

    def create_namespace(self, namespace: str, properties: dict[str, str]) -> None:
        raise self._unsupported("namespace creation")

    def load_namespace(self, namespace: str) -> dict[str, str]:
        raise self._unsupported("namespaces")

    def drop_namespace(self, namespace: str) -> None:
        raise self._unsupported("namespace drops")

    def update_namespace_properties(
        self, namespace: str, removals: list[str], updates: dict[str, str]
    ) -> PropertiesUpdated:
        raise self._unsupported("namespace property updates")

    # ---- tables

    def list_tables(self, namespace: str) -> list[str]:
        raise self._unsupported("tables")

    def create_table(self, namespace: str, table: NewTable, asked: Delegation | None) -> Answer:
        raise self._unsupported("table creation")

    def cached_load(
        self, namespace: str, table: str, snapshots: str, if_none_match: str | None, asked: Delegation | None
    ) -> Awaitable[LoadAnswer | None] | None:
        """`load_table` from memory alone, to await on the event loop: its answer, or None when it must read or
        wait (then the route calls `load_table` in a thread). None instead of an awaitable: never from memory."""
        return None

    def load_table(
        self, namespace: str, table: str, snapshots: str, if_none_match: str | None, asked: Delegation | None
    ) -> LoadAnswer:
        raise self._unsupported("tables")

    def table_exists(self, namespace: str, table: str) -> bool:
        raise self._unsupported("tables")

    flights: WritesInFlight | None = None  # the writes in flight on a catalog lakewarden maintains

    async def after_writes(self, namespace: str, table: str, updates: Sequence[TableUpdate]) -> None:
        """lakewarden's own commit (a snapshot naming its process) waits while a client's row-level write to the
        table is in flight, within the write's hold (writes_in_flight.py): the rewrite lands after the write,
        not between its plan and its commit. Called before the table's turn is taken: the write's own commit
        needs that turn to end the flight."""
        key = (self.name, namespace, table)
        if self.flights is None or not own_snapshot(updates) or not self.flights.in_flight(key):
            return
        await asyncio.to_thread(self.flights.wait_clear, key, self.flights.hold(key))

    def commit_turn(self, tables: Sequence[tuple[str, str]]) -> AbstractAsyncContextManager[Any]:
        """The turn of these tables' commits on this node, to hold in `async with` on the event loop (none by
        default: the catalog of record orders its commits)."""
        return nullcontext()

    def commit_table(
        self,
        namespace: str,
        table: str,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        client: str | None,
        wait: bool,
    ) -> bytes:
        """The commit's answer as JSON. Without `wait` it is made only if nothing in it can wait, else it raises
        WouldWait having done nothing (the route then calls it again in a thread)."""
        raise self._unsupported("table commits")

    def drop_table(self, namespace: str, table: str, purge: bool) -> None:
        raise self._unsupported("table drops")

    def rename_table(self, source: tuple[str, str], target: tuple[str, str]) -> None:
        raise self._unsupported("table renames")

    def commit_transaction(self, changes: Sequence[TableChange], client: str | None) -> None:
        raise self._unsupported("multi-table transactions")

    def register_table(
        self, namespace: str, name: str, metadata_location: str, overwrite: bool, asked: Delegation | None
    ) -> Answer:
        raise self._unsupported("table registration")

    def load_credentials(self, namespace: str, table: str, asked: Delegation) -> list[dict[str, Any]]:
        raise self._unsupported("vended credentials")

    # ---- reports

    def report_metrics(self, namespace: str, table: str, request: MetricsRequest, reporter: str) -> None:
        """A client's scan or commit report, kept for its table; a report of another type is accepted and dropped,
        as Iceberg's own parser makes it an unknown report."""
        if not self.table_exists(namespace, table):
            raise NoSuchTable(f"Table does not exist: {'.'.join(store.levels(namespace))}.{table}")
        if request.report_type == SCAN_REPORT:
            fields = self.partition_fields(namespace, table)
            report = scan_report(
                request.metrics, request.snapshot_id, request.filter, request.metadata, reporter, fields
            )
        elif request.report_type == COMMIT_REPORT:
            if request.operation is None:
                raise InvalidField("operation", "is required in a commit report")
            report = commit_report(request.metrics, request.snapshot_id, request.operation, request.metadata, reporter)
        else:
            return
        self.record_read(namespace, table, report)
        writes = request.report_type == SCAN_REPORT and plans_a_write(request.projected_field_ids)
        if writes and not request.by_lakewarden:
            self.write_planned(namespace, table, request, reporter)

    def write_planned(self, namespace: str, table: str, request: MetricsRequest, reporter: str) -> None:
        """A client reported the scan of a row-level write (writes_in_flight.py): a catalog lakewarden maintains
        marks the write in flight and has lakewarden's work since its snapshot yield to it (Iceberg's Java client
        sends the report and waits for the answer before it checks its commit)."""

    def partition_fields(self, namespace: str, table: str) -> list[tuple[str, str]]:
        """The table's identity partition fields, by which a scan's filter names the partition it read (none
        known: the partition is not named)."""
        return []

    def record_read(self, namespace: str, table: str, report: ReadReport) -> None:
        raise self._unsupported("metrics reports")

    # ---- server-side scan planning

    def plan_scan(
        self,
        namespace: str,
        table: str,
        body: dict[str, Any],
        asked: Delegation | None,
        planner: str,
    ) -> Answer:
        raise self._unsupported("scan planning")

    def plan_result(self, namespace: str, table: str, plan_id: str, asked: Delegation | None) -> Answer:
        raise self._unsupported("scan planning")

    def cancel_plan(self, namespace: str, table: str, plan_id: str) -> None:
        raise self._unsupported("scan planning")

    def plan_tasks(self, namespace: str, table: str, plan_task: str) -> Answer:
        raise self._unsupported("scan planning")

    # ---- views

    def list_views(self, namespace: str) -> list[str]:
        raise self._unsupported("views")

    def create_view(self, namespace: str, view: NewView) -> Answer:
        raise self._unsupported("views")

    def load_view(self, namespace: str, view: str) -> Answer:
        raise self._unsupported("views")

    def view_exists(self, namespace: str, view: str) -> bool:
        raise self._unsupported("views")

    def replace_view(
        self,
        namespace: str,
        view: str,
        requirements: Sequence[AssertViewUUID],
        updates: Sequence[ViewUpdate],
        client: str | None,
    ) -> Answer:
        raise self._unsupported("views")

    def drop_view(self, namespace: str, view: str) -> None:
        raise self._unsupported("views")

    def rename_view(self, source: tuple[str, str], target: tuple[str, str]) -> None:
        raise self._unsupported("views")

    def register_view(self, namespace: str, name: str, metadata_location: str) -> Answer:
        raise self._unsupported("views")
