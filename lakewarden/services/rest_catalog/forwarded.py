"""An external catalog (`sql`, `hive`, `glue`, `rest`) as the REST routes serve it: its namespaces and tables,
each request forwarded to the catalog of record (federation.py). It serves no views, plans, renames or
multi-table transactions: those belong to the catalog of record, which lakewarden does not stand in for."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyiceberg.table.update import TableRequirement, TableUpdate

from lakewarden.domain.errors import Unsupported, WouldWait
from lakewarden.domain.reads import ReadReport
from lakewarden.services.rest_catalog.federation import Federation, Forwarded
from lakewarden.services.rest_catalog.loads import (
    Delegation,
    LoadedTable,
    TableAccess,
    TableLoads,
    etag_matches,
    table_etag,
)
from lakewarden.services.rest_catalog.served import (
    METRICS,
    NAMESPACES,
    TABLES,
    Answer,
    LoadAnswer,
    MetricsRequest,
    NewTable,
    ReadRecorder,
    ServedCatalog,
    load_result,
)
from lakewarden.services.rest_catalog.writes_in_flight import APP_ID
from lakewarden.store import rest_catalog as store


class ForwardedCatalog(ServedCatalog):
    """`forwarded`: the catalog's registration and pyiceberg's client of it; `loads` makes a table's answer's
    access (its storage profile's config and vended credentials); `reads` keeps the reports clients send."""

    endpoints = (*NAMESPACES, *TABLES, *METRICS)

    def __init__(self, federation: Federation, forwarded: Forwarded, loads: TableLoads, reads: ReadRecorder) -> None:
        self.flights = federation.flights
        super().__init__(forwarded.spec.name)
        self.federation = federation
        self.forwarded = forwarded
        self.loads = loads
        self.reads = reads

    def config(self) -> Answer:
        profile = self.forwarded.profile
        return {
            "defaults": {} if profile is None else profile.client_config(),
            "overrides": {"prefix": self.name, "namespace-separator": "%1F"},
            "endpoints": list(self.endpoints),
        }

    # ---- namespaces

    def list_namespaces(self, parent: str | None) -> list[str]:
        levels = tuple(store.levels(parent)) if parent else None
        return [store.key(list(ns)) for ns in self.federation.list_namespaces(self.name, levels)]

    def create_namespace(self, namespace: str, properties: dict[str, str]) -> None:
        self.federation.create_namespace(self.name, _levels(namespace), properties)

    def load_namespace(self, namespace: str) -> dict[str, str]:
        return self.federation.load_namespace(self.name, _levels(namespace))

    # ---- tables

    def list_tables(self, namespace: str) -> list[str]:
        return sorted(self.federation.list_tables(self.name, _levels(namespace)))

    def _answer(self, namespace: str, name: str, table: LoadedTable, asked: Delegation | None) -> Answer:
        """A table's loadTable answer: its metadata, and how to reach its files (its catalog's storage profile,
        credentials as `asked`)."""
        profile = self.forwarded.profile
        access = (
            TableAccess({}, [])
            if profile is None
            else self.loads.access_with(profile, self.name, namespace, name, table.metadata, asked)
        )
        return load_result(table, access)

    def create_table(self, namespace: str, table: NewTable, asked: Delegation | None) -> Answer:
        if table.stage_create:
            raise Unsupported(f"catalog {self.name} is forwarded: stage its table's creation in the catalog itself")
        created = self.federation.create_table(
            self.name,
            _levels(namespace),
            table.name,
            table.schema,
            table.partition_spec,
            table.write_order,
            table.location,
            table.properties,
        )
        return self._answer(namespace, table.name, created, asked)

    def load_table(
        self, namespace: str, table: str, snapshots: str, if_none_match: str | None, asked: Delegation | None
    ) -> LoadAnswer:
        """Loaded from the catalog of record each time (lakewarden keeps no copy of its pointer); every snapshot,
        whatever `snapshots` asks, as the spec allows."""
        loaded = self.federation.load_table(self.name, _levels(namespace), table)
        assert loaded.metadata_location is not None
        etag = table_etag(loaded.metadata_location, "all")
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return etag, None
        return etag, json.dumps(self._answer(namespace, table, loaded, asked), separators=(",", ":")).encode()

    def table_exists(self, namespace: str, table: str) -> bool:
        return self.federation.table_exists(self.name, _levels(namespace), table)

    def commit_table(
        self,
        namespace: str,
        table: str,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        client: str | None,
        wait: bool,
    ) -> bytes:
        if not wait:
            raise WouldWait("a forwarded commit waits for its catalog of record")
        committed = self.federation.commit_table(
            self.name, _levels(namespace), table, list(requirements), list(updates)
        )
        return json.dumps(self._answer(namespace, table, committed, None)).encode()

    def drop_table(self, namespace: str, table: str, purge: bool) -> None:
        self.federation.drop_table(self.name, _levels(namespace), table, purge)

    # ---- reports: kept without a partition (the table's spec is its catalog's)

    def record_read(self, namespace: str, table: str, report: ReadReport) -> None:
        self.reads.record((self.name, namespace, table), report)

    def write_planned(self, namespace: str, table: str, request: MetricsRequest, reporter: str) -> None:
        self.federation.flights.planned((self.name, namespace, table), request.metadata)
        if request.snapshot_id is not None:
            writer, planned = request.metadata.get(APP_ID) or reporter, request.snapshot_id
            levels = _levels(namespace)
            self.federation.yield_to_planned_write(self.name, levels, table, planned, request.filter, writer)


def _levels(namespace: str) -> tuple[str, ...]:
    return tuple(store.levels(namespace))
