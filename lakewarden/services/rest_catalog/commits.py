"""Commits to the REST catalog's tables: each change is staged on its table's current metadata (the client's
requirements checked under the table's conflict strategy, the updates applied, the new metadata file written),
then every pointer is swapped by compare-and-swap in one transaction with its timeline entry and event. A lost
swap drops the files just written and checks the change again on the new head, on the server, while the
requirements still hold."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AssertCreate, TableRequirement, TableUpdate

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import CommitFailed, CommitStateUnknown, InvalidField, NoSuchTable, WouldWait
from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.metadata.conflicts import check_properties, checked_updates
from lakewarden.metadata.paths import PATH_PROPERTIES, confine_table
from lakewarden.metadata.report_filters import ReportedFilter
from lakewarden.metadata.table_metadata import (
    apply_updates,
    defines_table,
    describe_commit,
    local_path,
    metadata_from_updates,
    write_metadata,
)
from lakewarden.metadata.yielding import Yielded, yield_to_planned_write, yield_window_ms
from lakewarden.services.rest_catalog.catalog_tables import CatalogTables
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import LoadedTable
from lakewarden.services.rest_catalog.metadata_files import LOOP_JSON_BYTES, MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.services.rest_catalog.writes_in_flight import WritesInFlight
from lakewarden.store import rest_catalog as store
from lakewarden.store.commit_statement import swap_and_record
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
MAX_COMMIT_ATTEMPTS = 20
YIELDING = "lakewarden (yielding to a planned write)"
YIELD_ATTEMPTS = 3  # the client named in the log and timeline


@dataclass(frozen=True)
class TableChange:
    """One table's part of a commit: the requirements its current metadata must meet, and the updates."""

    namespace: str
    name: str
    requirements: Sequence[TableRequirement]
    updates: Sequence[TableUpdate]


@dataclass(frozen=True)
class _Staged:
    """A change applied to its table's current metadata and written, waiting for its pointer swap."""

    change: TableChange
    expected: str  # the metadata location the swap expects
    version: int  # the pointer's version the swap expects
    base: TableMetadata
    applied: Sequence[TableUpdate]  # the updates as applied (rebased by the partition strategy, maybe)
    metadata: TableMetadata
    location: str  # the new metadata file
    text: str  # its JSON, reused for the response
    files: list[str]  # every file written for it (dropped when the swap is lost)
    known: bool = False  # staged on the head this node last knew, not on one read for it

    @property
    def changed(self) -> bool:
        """False for a change that changes nothing: its table keeps its metadata, no version is made."""
        return bool(self.location)


CREATES = -1  # _Staged.version of a staged create: no pointer yet


class _SwapLost(Exception):
    """A pointer of a multi-table commit moved meanwhile."""


def _paths_changed(base: TableMetadata, metadata: TableMetadata) -> bool:
    """Whether a commit changes where the table's files go (its location, a path property): what it keeps was
    confined to the warehouse when it was committed. Resolving the paths (their symlinks) on every commit would
    cost each commit file system calls; lakewarden's own deletions check each file against the table's location
    as they delete it."""
    if metadata.location != base.location:
        return True
    return any(metadata.properties.get(k) != base.properties.get(k) for k in PATH_PROPERTIES)


class TableCommits:
    """`heads`: the heads this node knows (heads.py). A node that is not one of several stages a commit on the
    head it last swapped or read, without reading the pointer: the swap compares it with the row, so a head that
    moved meanwhile (a commit outside this process) only costs a lost swap, after which the head is read. With
    several nodes committing to one table a known head would be stale as often as not: there none is kept, and
    every attempt reads the pointer. `tables`: where a staged create adds its table."""

    def __init__(
        self,
        db: Database,
        warehouses: Warehouses,
        files: MetadataFiles,
        heads: TableHeads,
        outbox: Outbox,
        tables: CatalogTables,
        flights: WritesInFlight | None = None,
    ) -> None:
        self.db = db
        self.flights = flights or WritesInFlight()
        self.warehouses = warehouses
        self.files = files
        self.heads = heads
        self.outbox = outbox
        self.tables = tables

    def commit_table(
        self,
        catalog: str,
        namespace: str,
        name: str,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        client: str | None = None,
        wait: bool = True,
    ) -> LoadedTable:
        """One table's commit: its requirements checked under the table's conflict strategy (a staged
        create when they assert one), then the pointer swapped by compare-and-swap.

        Without `wait` it is made only if nothing in it can wait: the event loop's commit (the REST catalog's
        route), which saves the hop to a worker thread and back. Under Python's global lock a thread runs the
        commit no sooner, and each hand-off between threads costs a share of the commit (bench/rest_catalog.py
        measures it). That is a commit on SQLite and local files, staged on a cached version of at
        most about LOOP_JSON_BYTES of JSON whose requirements hold (no rebase, no manifest read), with no other
        writer of the database at work. Anything else raises WouldWait before any effect: the caller makes it
        again in a thread, where it may wait."""
        if not wait and not self.db.driver.in_process:
            raise WouldWait("the system database is across a network")
        spec = self.warehouses.catalog(catalog)
        if any(isinstance(r, AssertCreate) for r in requirements):
            if not wait:
                raise WouldWait("a staged create writes through a session")
            return self._commit_create(spec, namespace, name, updates, client)
        change = TableChange(namespace, name, requirements, updates)
        try:
            (staged,) = self._commit(spec, [change], client, single=True, wait=wait)
        except CommitFailed as exc:
            log.info("commit to %s.%s.%s refused (%s): %s", catalog, namespace, name, client or "a client", exc)
            raise
        self._landed(catalog, [change])
        return LoadedTable(staged.location or staged.expected, staged.metadata)

    def _landed(self, catalog: str, changes: Sequence[TableChange]) -> None:
        """Clients' snapshots landed: the writes they planned are no longer in flight."""
        for change in changes:
            self.flights.landed((catalog, change.namespace, change.name), change.updates)

    def yield_to_planned_write(
        self, catalog: str, namespace: str, name: str, snapshot_id: int, reported_filter: Any, writer: str
    ) -> Yielded | None:
        """A client reported the scan of a row-level write planned on `snapshot_id`: lakewarden's work since then
        that the write may name is undone now, before the client checks its commit (metadata/yielding.py)."""
        spec = self.warehouses.catalog(catalog)
        io = self.warehouses.io_of(spec)
        for _ in range(YIELD_ATTEMPTS):  # another of lakewarden's commits may land meanwhile: undo that too
            (expected, _), _ = self._head((spec.name, namespace, name), False)
            current = self.files.read(io, expected)
            window = yield_window_ms(current.properties)
            if window is None or current.current_snapshot_id == snapshot_id:
                return None
            matches = ReportedFilter(reported_filter, current.schema(), current.specs()).may_match
            now = int(time.time() * 1000)
            yielded = yield_to_planned_write(io, current, snapshot_id, matches, window, now, writer)
            if yielded is None:
                return None
            try:
                self.commit_table(catalog, namespace, name, yielded.requirements, yielded.updates, YIELDING)
                return yielded
            except CommitFailed as exc:  # the table moved: looked at again (a writer's commit ends it)
                self.files.discard(io, yielded.written)
                log.info("lakewarden's work on %s.%s.%s did not yield yet: %s", catalog, namespace, name, exc)
        return None

    def commit_transaction(self, catalog: str, changes: Sequence[TableChange], client: str | None = None) -> None:
        """Commit changes to several tables atomically: every pointer swaps in one transaction, or none does.
        The requirements are checked as the spec says (no partition rebase across tables); lakewarden's own work
        yields to each table's change as to a single commit."""
        self._commit(self.warehouses.catalog(catalog), changes, client, single=False)
        self._landed(catalog, changes)

    def _commit(
        self, spec: CatalogSpec, changes: Sequence[TableChange], client: str | None, single: bool, wait: bool = True
    ) -> list[_Staged]:
        """The commit loop of every commit: stage each change on its table's current metadata (requirements
        checked, updates applied, the new metadata file written), then swap every pointer in one
        transaction with its timeline entry and event. A lost swap rolls them all back: the files just
        written are dropped and the changes are checked again on the new heads, up to MAX_COMMIT_ATTEMPTS."""
        io = self.warehouses.io_of(spec)
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            known = attempt == 0  # a known head first (see `heads`); after a lost swap the heads are read
            staged: list[_Staged] = []
            try:
                for change in changes:
                    staged.append(self._stage(spec, io, change, single, known, wait))
            except Exception:
                self.files.discard(io, [path for entry in staged for path in entry.files])
                if known and self._heads_moved(spec.name, changes):
                    continue  # refused on a head that is no longer the table's: checked again on the real one
                raise
            if any(entry.known and not entry.changed for entry in staged) and self._heads_moved(spec.name, changes):
                continue  # a change that changes nothing answers with the table's current metadata: make sure
            try:
                events = self._swap_all(spec.name, staged, client, wait)
            except _SwapLost:  # another commit won a swap: drop our files, check again, try again
                self.files.discard(io, [path for entry in staged for path in entry.files])
                continue
            except CommitStateUnknown:  # the pointer may name the files now: they stay (orphan cleanup knows)
                for change in changes:
                    self.heads.forget((spec.name, change.namespace, change.name))
                what = ", ".join(f"{'.'.join(store.levels(c.namespace))}.{c.name}" for c in changes)
                log.error("commit to %s in catalog %s: state unknown, its files kept", what, spec.name)
                raise
            except Exception:  # refused (a staged create whose name was taken): nothing of it stays
                self.files.discard(io, [path for entry in staged for path in entry.files])
                raise
            for entry in staged:
                if entry.changed:
                    self.files.written(entry.location, entry.metadata, entry.text, replaced=entry.expected or None)
                    key = (spec.name, entry.change.namespace, entry.change.name)
                    self.heads.wrote(key, (entry.location, entry.version + 1))
            self.outbox.publish(events)
            return staged
        what = changes[0].name if single else "a multi-table commit"
        raise CommitFailed(f"gave up after {MAX_COMMIT_ATTEMPTS} concurrent commits to {what}")

    def _head(self, key: tuple[str, str, str], known: bool) -> tuple[tuple[str, int], bool]:
        """The table's head, and whether it is the one this node knew (else it was read, and is known now)."""
        head = self.heads.get(key) if known else None
        return (head, True) if head is not None else (self.heads.read(self.db, key), False)

    def _heads_moved(self, catalog: str, changes: Sequence[TableChange]) -> bool:
        """Whether a head known here is not its table's any more (the table's pointer read again): it is
        forgotten, and the commit checked again on the real one."""
        moved = False
        for change in changes:
            key = (catalog, change.namespace, change.name)
            known = self.heads.get(key)
            if known is None:
                continue
            try:
                head: tuple[str, int] | None = store.pointer_head(self.db, *key)
            except NoSuchTable:
                head = None
            if head != known:
                self.heads.forget(key)
                moved = True
        return moved

    def _stage(
        self, spec: CatalogSpec, io: FileIO, change: TableChange, single: bool, known: bool, wait: bool = True
    ) -> _Staged:
        label = "" if single else f"{'.'.join(store.levels(change.namespace))}.{change.name}: "
        if any(isinstance(r, AssertCreate) for r in change.requirements):  # a staged create in a transaction
            metadata = self._created(spec, change.updates, label)
            location = self.files.new_location(metadata, 0)
            text = write_metadata(io, location, metadata)
            return _Staged(change, "", CREATES, metadata, change.updates, metadata, location, text, [location])
        (expected, version), was_known = self._head((spec.name, change.namespace, change.name), known)
        base = self.files.read(io, expected, LOOP_JSON_BYTES if not wait else None)
        if not wait and local_path(base.location) is None:
            raise WouldWait("the table's files are across a network")
        try:
            # without `wait` a requirement that fails is not rebased here (that reads and writes manifests)
            applied, written = checked_updates(io, base, change.requirements, change.updates, single, label, wait)
        except CommitFailed as exc:
            if wait:
                raise
            raise WouldWait("a requirement fails: the conflict strategy decides, in a thread") from exc
        try:
            metadata = apply_updates(base, applied, metadata_location=expected)
        except (ValueError, KeyError) as exc:
            self.files.discard(io, written)
            raise InvalidField("updates", f"{label}{exc}") from exc
        if metadata is base:  # nothing changes (as Java's catalog handlers, no new version is committed)
            self.files.discard(io, written)
            return _Staged(change, expected, version, base, applied, base, "", "", [], was_known)
        try:
            check_properties(metadata.properties, base.properties)
            if _paths_changed(base, metadata):
                confine_table(spec.properties["warehouse"], metadata.location, metadata.properties)
        except InvalidField:
            self.files.discard(io, written)
            raise
        location = self.files.new_location(metadata, version + 1)
        if not wait and local_path(location) is None:  # moved by the updates
            raise WouldWait("the metadata file is written across a network")
        text = write_metadata(io, location, metadata)
        return _Staged(
            change,
            expected,
            version,
            base,
            applied,
            metadata,
            location,
            text,
            [location, *written],
            was_known,
        )

    def _commit_create(
        self, spec: CatalogSpec, namespace: str, name: str, updates: Sequence[TableUpdate], client: str | None
    ) -> LoadedTable:
        """The commit of a staged create (CTAS, CREATE OR REPLACE on a new table): the updates define it."""
        metadata = self._created(spec, updates, "")
        io = self.warehouses.io_of(spec)
        location = self.files.new_location(metadata, 0)
        write_metadata(io, location, metadata)
        details = {**describe_commit(metadata, metadata, updates), "operation": "create"}
        self.tables.add_table(spec.name, namespace, name, location, details, details, client, written=io, staged=True)
        return LoadedTable(location, metadata)

    @staticmethod
    def _created(spec: CatalogSpec, updates: Sequence[TableUpdate], label: str) -> TableMetadata:
        """A staged create's table, as its updates define it, checked."""
        try:
            metadata = apply_updates(metadata_from_updates(updates), tuple(u for u in updates if not defines_table(u)))
        except (ValueError, KeyError, StopIteration) as exc:
            raise InvalidField("updates", f"{label}cannot create the table from these updates: {exc}") from exc
        check_properties(metadata.properties)
        confine_table(spec.properties["warehouse"], metadata.location, metadata.properties)
        return metadata

    def _swap_all(
        self, catalog: str, staged: Sequence[_Staged], client: str | None, wait: bool = True
    ) -> list[CatalogEvent]:
        """Every staged pointer swapped, with its timeline entry and event, in one transaction (a single table's
        commit in the fewest steps: one statement on PostgreSQL, a transaction on SQLite's driver alone;
        store/commit_statement.py)."""
        if len(staged) == 1 and staged[0].changed and staged[0].version != CREATES:
            (entry,) = staged
            key = (catalog, entry.change.namespace, entry.change.name)
            details = describe_commit(entry.base, entry.metadata, entry.applied)
            event = swap_and_record(self.db, key, entry.expected, entry.version, entry.location, client, details, wait)
            if event is None:
                raise _SwapLost
            return [event]
        events = []
        with self.db.write(any_node=True) as session:
            for entry in staged:
                if not entry.changed:
                    continue
                namespace, name = entry.change.namespace, entry.change.name
                if entry.version == CREATES:
                    if store.pointer_exists(session, catalog, namespace, name):  # the spec: a conflict
                        raise CommitFailed(f"Table already exists: {'.'.join(store.levels(namespace))}.{name}")
                    store.create_pointer(session, catalog, namespace, name, entry.location)
                    details = {**describe_commit(entry.metadata, entry.metadata, entry.applied), "operation": "create"}
                    store.record_commit(
                        session,
                        catalog,
                        namespace,
                        name,
                        version=0,
                        metadata_location=entry.location,
                        client=client,
                        **details,
                    )
                    payload = {"metadata_location": entry.location, "version": 0, **details}
                    events.append(
                        self.outbox.write(session, EventType.TABLE_CREATED, catalog, namespace, name, payload)
                    )
                    continue
                if not store.swap_pointer(
                    session, catalog, namespace, name, entry.expected, entry.version, entry.location
                ):
                    raise _SwapLost  # leaving the block rolls every swap back
                version = entry.version + 1
                details = describe_commit(entry.base, entry.metadata, entry.applied)
                store.record_commit(
                    session,
                    catalog,
                    namespace,
                    name,
                    version=version,
                    metadata_location=entry.location,
                    client=client,
                    **details,
                )
                payload = {"metadata_location": entry.location, "version": version, **details}
                events.append(self.outbox.write(session, EventType.TABLE_COMMITTED, catalog, namespace, name, payload))
        return events
