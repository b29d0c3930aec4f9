"""The table explorer: keeps the set of managed tables equal to what the registered catalogs hold.

A pass lists each catalog, applies its filters, adds new tables, refreshes moved ones and disposes gone ones; where
a catalog keeps every metadata location together, one read lists them and only changed tables are loaded. A failed
listing keeps the catalog's tables and marks it unhealthy. External catalogs are swept every interval, cheap ones
every `watch-interval`; internal catalogs' changes arrive as events, so their sweep is an hourly safety net.
docs/catalogs.md gives the intervals."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from lakewarden.domain.catalogs import FORMAT_OF_CATALOG, CatalogSpec, TableFilter, table_format
from lakewarden.domain.optimizing_config import TURNED_OFF, OptimizingConfig
from lakewarden.domain.tables import TableIdentifier, TableSnapshot, effective_config, optimizing_group
from lakewarden.metadata.catalogs import list_tables, snapshot_of, table_locations
from lakewarden.metadata.formats import READERS
from lakewarden.services.loop import LoopService
from lakewarden.services.tables.catalog_access import InProcessCatalog, InternalTables, catalog_for
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import processes as process_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database
from lakewarden.store.models import TableRuntimeRow

log = logging.getLogger(__name__)
DROPPED = "the table is no longer in its catalog"
# external catalog types whose refresh reads every table's metadata location in one pass (table_locations)
WATCHED_TYPES = frozenset({"sql", "hive", "glue", "filesystem", *FORMAT_OF_CATALOG})


@dataclass
class RefreshResult:
    catalog: str
    health: str = "healthy"
    error: str | None = None
    tables: int = 0
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disposed: list[str] = field(default_factory=list)
    loaded: int = 0  # tables whose metadata was read
    duration_ms: int = 0
    # running processes a change of their table closes, with why: its configuration (_process_to_close), its drop
    closing: dict[int, str] = field(default_factory=dict)


def _process_to_close(runtime: TableRuntimeRow, config: dict[str, str], group: str) -> tuple[int, str] | None:
    """The table's running optimizing process and why it must close now that the table's configuration is
    `config` (in resource group `group`), if it must. As Amoro: turning self-optimizing off closes it without committing
    (TableRuntimeRefreshExecutor.handleConfigChanged), and so does moving the table to another resource group
    (DefaultOptimizingService's handleConfigChanged releases it from the old group's queue, which closes its
    process); the next planning happens in the new group."""
    process_id = runtime.optimizing_process_id
    if process_id is None:
        return None
    if OptimizingConfig.enabled_in(runtime.config) and OptimizingConfig.enabled_in(config) is False:
        return process_id, TURNED_OFF
    if runtime.optimizing_group != group:
        return process_id, f"the table moved to resource group {group}"
    return None


def defaults_fingerprint(spec: CatalogSpec) -> str:
    """What a catalog's table defaults are, in 64 characters: kept with the refresh that loaded every table."""
    return hashlib.sha256(json.dumps(spec.table_defaults, sort_keys=True).encode()).hexdigest()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:2000]


class TableExplorer(LoopService):
    name = "table-explorer"

    def __init__(
        self,
        db: Database,
        interval_seconds: float,
        thread_count: int,
        on_change: Callable[[], None] | None = None,
        internal: InternalTables | None = None,
        internal_interval: float | None = None,
        on_closing: Callable[[int, str], None] | None = None,
        watch_interval: float | None = None,
    ) -> None:
        watch = interval_seconds if watch_interval is None else min(watch_interval, interval_seconds)
        super().__init__(watch)
        self.external_interval = interval_seconds
        self.watch_interval = watch
        self.internal_interval = interval_seconds if internal_interval is None else internal_interval
        self._swept: dict[str, float] = {}  # catalog -> when this node last swept it (monotonic)
        self.db = db
        self.internal = internal  # internal catalogs are listed and read in process
        self.thread_count = thread_count
        self.on_change = on_change  # called after a refresh that added or changed tables
        # called with a running optimizing process a refresh saw its table's configuration close, and why
        self.on_closing = on_closing
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def start(self) -> None:
        self._swept.clear()  # a node that starts leading sweeps every catalog first: events may have been missed
        super().start()

    def run_once(self) -> None:
        with self.db.read() as session:
            rows = [
                (row.name, catalog_store.spec_of(row), row.loaded_defaults)
                for row in catalog_store.list_catalogs(session)
            ]
        now = time.monotonic()
        for name, spec, loaded_defaults in rows:
            if self.stopping:
                return
            swept = self._swept.get(name)
            if spec.type == "internal" and self.internal is not None:
                changed = loaded_defaults != defaults_fingerprint(spec)
                if swept is not None and now - swept < self.internal_interval and not changed:
                    continue
            else:
                every = self.watch_interval if spec.type in WATCHED_TYPES else self.external_interval
                # a pass that starts a moment early (the loop's sleep, this pass's own time) still counts as due
                if swept is not None and now - swept < every - min(1.0, every / 10):
                    continue
            self._swept[name] = now
            result = self.refresh(name)
            if result.error:
                log.warning("catalog %s unhealthy: %s", name, result.error)

    def _lock(self, catalog: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(catalog, threading.Lock())

    def refresh(self, catalog_name: str) -> RefreshResult:
        """Explore one catalog now; one refresh per catalog at a time."""
        with self._lock(catalog_name):
            started = time.monotonic()
            result = self._refresh(catalog_name)
            result.duration_ms = int((time.monotonic() - started) * 1000)
            return result

    def _refresh(self, catalog_name: str) -> RefreshResult:
        with self.db.read() as session:
            spec = catalog_store.spec_of(catalog_store.get_catalog(session, catalog_name))
        result = RefreshResult(catalog_name)
        table_filter = TableFilter.of(spec)
        try:
            if spec.type in FORMAT_OF_CATALOG:
                listed, wanted, defaults, snapshots = self._explore_files(spec, table_filter)
                result.loaded = len(wanted)
            else:
                listed, defaults, snapshots = self._explore_catalog(spec, table_filter, result)
        except Exception as exc:  # any failure to list: keep every table, report the catalog unhealthy
            result.health, result.error = "unhealthy", _describe(exc)
            with self.db.write() as session:
                catalog_store.record_refresh(session, catalog_name, result.error)
            return result
        # A table that vanished between listing and loading is gone as well.
        listed -= {name for name, snap in snapshots.items() if snap is None}
        self._apply(spec, listed, snapshots, result, loaded_defaults=defaults)
        self._applied(result)
        return result

    def _explore_files(
        self, spec: CatalogSpec, table_filter: TableFilter
    ) -> tuple[
        set[TableIdentifier], set[TableIdentifier], str | None, dict[TableIdentifier, TableSnapshot | str | None]
    ]:
        """A catalog of another format's tables, read from its warehouse's files: the tables listed, those read
        (new, changed or failed last time), the defaults' fingerprint when all were read, and what was read."""
        reader = READERS[table_format(spec)]
        paths = {
            TableIdentifier(spec.name, db, t): path
            for (db, t), path in reader.find_tables(spec.properties["warehouse"]).items()
            if table_filter.accepts_table(db, t)
        }
        tokens = {(name.database, name.table): reader.change_token(path) for name, path in paths.items()}
        wanted, defaults = self._moved(spec, set(paths), tokens)
        snapshots: dict[TableIdentifier, TableSnapshot | str | None] = {}
        for name in sorted(wanted):
            try:
                snapshots[name] = reader.snapshot(paths[name])
            except Exception as exc:  # this table only: listed with its error
                snapshots[name] = _describe(exc)
        return set(paths), wanted, defaults, snapshots

    def _explore_catalog(
        self, spec: CatalogSpec, table_filter: TableFilter, result: RefreshResult
    ) -> tuple[set[TableIdentifier], str | None, dict[TableIdentifier, TableSnapshot | str | None]]:
        """An Iceberg catalog, through pyiceberg: the tables listed, the defaults' fingerprint when all were
        loaded, and what was loaded."""
        with catalog_for(spec, self.internal) as catalog:
            locations = table_locations(catalog, table_filter)
            defaults: str | None = None
            if locations is None:  # the catalog cannot tell where each table is: each is loaded
                listed = {TableIdentifier(spec.name, db, t) for db, t in list_tables(catalog, table_filter)}
                wanted = listed
            else:
                listed = {TableIdentifier(spec.name, db, t) for db, t in locations}
                wanted, defaults = self._moved(spec, listed, locations)
            snapshots = self._load_all(catalog, sorted(wanted))
            result.loaded = len(wanted)
        return listed, defaults, snapshots

    def _applied(self, result: RefreshResult) -> None:
        """After a refresh's transaction: the running processes a configuration change closes are closed
        (_process_to_close), and the evaluator looks at what changed."""
        if self.on_closing is not None:
            for process_id, reason in result.closing.items():
                self.on_closing(process_id, reason)
        if (result.added or result.updated) and self.on_change is not None:
            self.on_change()

    def _moved(
        self, spec: CatalogSpec, listed: set[TableIdentifier], locations: dict[tuple[str, str], str]
    ) -> tuple[set[TableIdentifier], str | None]:
        """Of the listed tables, those to load: new ones, those whose metadata location moved, and those whose last
        load failed; all of them when the catalog's table defaults changed since every table was last loaded (a
        table's configuration is its properties over those defaults). With the defaults' fingerprint to record
        when all are loaded."""
        defaults = defaults_fingerprint(spec)
        with self.db.read() as session:
            if catalog_store.get_catalog(session, spec.name).loaded_defaults != defaults:
                return listed, defaults
            known = table_store.table_locations(session, spec.name)
        moved = {
            name
            for name in listed
            if (found := known.get(name)) is None
            or found.failed
            or found.metadata_location != locations[(name.database, name.table)]
        }
        return moved, None

    def refresh_tables(self, catalog_name: str, names: set[TableIdentifier]) -> RefreshResult:
        """Refresh only the named tables (a change announced by an event, on the events' thread): no listing of
        the catalog."""
        with self.charged(), self._lock(catalog_name):
            started = time.monotonic()
            with self.db.read() as session:
                spec = catalog_store.spec_of(catalog_store.get_catalog(session, catalog_name))
            table_filter = TableFilter.of(spec)
            wanted = {n for n in names if table_filter.accepts_table(n.database, n.table)}
            result = RefreshResult(catalog_name)
            with catalog_for(spec, self.internal) as catalog:
                snapshots = self._load_all(catalog, sorted(wanted))
            result.loaded = len(wanted)
            present = {name for name, snap in snapshots.items() if snap is not None}
            self._apply(spec, present, snapshots, result, scope=names)
            result.duration_ms = int((time.monotonic() - started) * 1000)
        self._applied(result)
        return result

    def _load_all(
        self, catalog: Catalog, names: list[TableIdentifier]
    ) -> dict[TableIdentifier, TableSnapshot | str | None]:
        """Load every listed table in parallel: a snapshot, None when it no longer exists, or the error text."""

        def load(name: TableIdentifier) -> TableSnapshot | str | None:
            try:
                return snapshot_of(catalog.load_table((*name.database.split("."), name.table)))
            except NoSuchTableError:
                return None
            except Exception as exc:
                return _describe(exc)

        def charged_load(name: TableIdentifier) -> TableSnapshot | str | None:
            with self.charged():  # on a thread of the pool
                return load(name)

        if len(names) <= 1 or isinstance(catalog, InProcessCatalog):  # no I/O to overlap
            return {name: load(name) for name in names}
        with ThreadPoolExecutor(max_workers=min(self.thread_count, len(names)), thread_name_prefix="explorer") as pool:
            return dict(zip(names, pool.map(charged_load, names), strict=True))

    def _apply(
        self,
        spec: CatalogSpec,
        listed: set[TableIdentifier],
        snapshots: dict[TableIdentifier, TableSnapshot | str | None],
        result: RefreshResult,
        scope: set[TableIdentifier] | None = None,
        loaded_defaults: str | None = None,
    ) -> None:
        """Make the managed tables match `listed`; with `scope`, only the tables named there are considered."""
        defaults = spec.table_defaults
        # A whole catalog's: what lakewarden knows is read first, outside the write transaction (reading a million
        # tables' locations under the write lock would hold up every other writer, commits, meanwhile); the
        # catalog's lock keeps other refreshes of it out. An event's few tables: read once, in the write itself.
        known: dict[TableIdentifier, int] = {}
        if scope is None:
            with self.db.read() as session:
                known = {n: k.table_id for n, k in table_store.table_locations(session, spec.name).items()}
        with self.db.write() as session:
            if scope is None:
                # only the tables loaded now can change: their records are read, not the whole catalog's
                current = table_store.tables_by_id(session, [known[n] for n in snapshots if n in known])
            else:
                current = table_store.tables_by_name(session, spec.name, scope)
                known = {name: record.runtime.table_id for name, record in current.items()}
            for name in sorted(set(known) - listed):
                for process in process_store.running_processes(session, table_id=known[name]):
                    result.closing[process.process_id] = DROPPED
                table_store.dispose_table(session, known[name])
                result.disposed.append(str(name))
            for name in sorted(listed & set(snapshots)):
                loaded = snapshots[name]
                record = current.get(name)
                if isinstance(loaded, TableSnapshot):
                    config = effective_config(defaults, loaded.properties)
                    group = optimizing_group(config)
                    if record is None:
                        record = table_store.add_table(session, name, group, config, table_format(spec))
                        result.added.append(str(name))
                    elif (
                        record.runtime.metadata_location != loaded.metadata_location or record.runtime.config != config
                    ):
                        result.updated.append(str(name))
                        closing = _process_to_close(record.runtime, config, group)
                        if closing is not None:
                            result.closing[closing[0]] = closing[1]
                    else:
                        continue
                    table_store.record_table_snapshot(session, record.runtime, loaded, group, config)
                elif isinstance(loaded, str):
                    if record is None:
                        config = effective_config(defaults, {})
                        record = table_store.add_table(
                            session, name, optimizing_group(config), config, table_format(spec)
                        )
                        result.added.append(str(name))
                    table_store.record_table_error(session, record.runtime, loaded)
            if scope is None:
                catalog_store.record_refresh(session, spec.name, None, loaded_defaults)
        result.tables = len(listed)
        if result.added or result.disposed:
            log.info("catalog %s: %d added, %d disposed", spec.name, len(result.added), len(result.disposed))
