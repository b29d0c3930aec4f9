"""What lakewarden does when its REST catalog announces a change (rest_catalog/outbox.py): the table is evaluated
at once.

Events arrive from request threads; a single worker takes them off a queue, refreshes
just the tables they name (adding created ones, disposing dropped ones, taking the new metadata
location of committed ones; no listing of the catalog) and wakes the evaluator, so a commit that crosses a
trigger is queued for optimizing within moments instead of the explorer's interval.
lakewarden's own optimizing commits (recognised by their snapshot summary) refresh the runtime but
wake nothing: the process that made them settles the table.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from sqlalchemy.engine import make_url

from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.domain.tables import TableIdentifier
from lakewarden.domain.yields import YIELDED
from lakewarden.services.loop import LoopService
from lakewarden.services.tables.evaluation import TableEvaluator
from lakewarden.services.tables.explorer import TableExplorer
from lakewarden.store import rest_catalog as rest_store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)
OWN_COMMIT = "lakewarden.process-id"


class ChangeListener:
    def __init__(
        self,
        explorer: TableExplorer,
        evaluator: TableEvaluator,
        on_yielded: Callable[[CatalogEvent], None] | None = None,
    ) -> None:
        self.explorer = explorer  # reads lakewarden's own tables in process
        self.evaluator = evaluator
        # a commit that undid lakewarden's work for a writer: its processes say so (services/processes/yields.py)
        self.on_yielded = on_yielded
        self._queue: queue.Queue[CatalogEvent | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.handled = 0

    def __call__(self, event: CatalogEvent) -> None:
        if event.is_table:  # tables only are managed
            self._queue.put(event)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="lakewarden-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the worker (restartable: a node that leads again starts it again)."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(10)
        self._thread = None

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            # no wait for more: an event finding the worker idle is handled at once (every commit's evaluation
            # would wait for it); what arrives while a batch is handled makes the next batch, so a burst of
            # commits is still taken in a few refreshes, not one each
            batch = [event]
            while not self._queue.empty():
                more = self._queue.get()
                if more is None:
                    return
                batch.append(more)
            by_catalog: dict[str, set[TableIdentifier]] = defaultdict(set)
            for item in batch:
                by_catalog[item.catalog] |= _tables_of(item)
            for catalog, names in sorted(by_catalog.items()):
                try:
                    self.explorer.refresh_tables(catalog, names)
                except Exception:
                    log.exception("refreshing %s after an event failed", catalog)
            # lakewarden's own rewrites only need the runtime to follow them: the process that made them
            # settles the table, and a re-evaluation now would be pointless
            if any(not _own_commit(item) for item in batch):
                self.evaluator.wake()
            for item in batch:
                if self.on_yielded is not None and _yielded(item):
                    try:
                        self.on_yielded(item)
                    except Exception:
                        log.exception("recording the yield of %s failed", item.table)
            self.handled += len(batch)


def _own_commit(event: CatalogEvent) -> bool:
    """lakewarden's own rewrite; not a commit that undid its work (that table is evaluated again at once)."""
    summary = event.payload.get("summary") or {}
    return event.type == EventType.TABLE_COMMITTED and OWN_COMMIT in summary and YIELDED not in summary


def _yielded(event: CatalogEvent) -> bool:
    return event.type == EventType.TABLE_COMMITTED and YIELDED in (event.payload.get("summary") or {})


def _tables_of(event: CatalogEvent) -> set[TableIdentifier]:
    """The tables an event concerns (a rename: both names)."""
    assert event.table is not None  # a table's event
    names = {TableIdentifier(event.catalog, ".".join(event.namespace), event.table)}
    moved = event.payload.get("from")
    if moved:
        names.add(TableIdentifier(event.catalog, ".".join(moved["namespace"]), moved["table"]))
    return names


class OutboxTail(LoopService):
    """High availability: the leader's ChangeListener is fed from the outbox, so commits made on any node
    reach its evaluator. A PostgreSQL LISTEN wakes it at each commit (store/metadata.add_event notifies);
    it also looks every second. Event ids come from a sequence and may become visible out of order (a
    transaction that took its id earlier commits later), so an id skipped over is looked for again until
    GAP_SECONDS have passed (a rolled-back transaction leaves a gap for good)."""

    name = "outbox-tail"
    GAP_SECONDS = 30.0

    def __init__(self, db: Database, listener: ChangeListener, interval_seconds: float = 1.0) -> None:
        super().__init__(interval_seconds)
        self.db = db
        self.listener = listener
        self.floor: int | None = None  # every event id up to it was handled or given up on
        self._seen: set[int] = set()
        self._gaps: dict[int, float] = {}  # id skipped over -> when it was first missed
        self._listener: threading.Thread | None = None

    def start(self) -> None:
        with self.db.read() as session:
            self.floor = rest_store.last_event_id(session)  # the new leader's loops start with full passes
        self._seen.clear()
        self._gaps.clear()
        super().start()
        if self.db.engine.dialect.name == "postgresql":
            self._listener = threading.Thread(target=self._listen, name="lakewarden-outbox-listen", daemon=True)
            self._listener.start()

    def run_once(self) -> None:
        assert self.floor is not None
        with self.db.read() as session:
            rows = rest_store.events_after(session, self.floor, 1000)
        now = time.monotonic()
        for row in rows:
            if row.event_id in self._seen:
                continue
            self._seen.add(row.event_id)
            self._gaps.pop(row.event_id, None)
            self.listener(rest_store.stored_event(row))
        top = max(self._seen, default=self.floor)
        for missing in range(self.floor + 1, top):
            if missing not in self._seen:
                self._gaps.setdefault(missing, now)
        for missing, since in list(self._gaps.items()):
            if now - since > self.GAP_SECONDS:
                del self._gaps[missing]
                log.info("outbox: event id %d never appeared (a rolled-back transaction)", missing)
        self.floor = min(self._gaps) - 1 if self._gaps else top
        self._seen = {i for i in self._seen if i > self.floor}

    def _listen(self) -> None:
        import psycopg

        conninfo = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
        while not self.stopping:
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {rest_store.EVENTS_CHANNEL}")
                    while not self.stopping:
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.wake()
            except Exception as exc:  # the database restarts: listen again; the periodic look covers the gap
                log.warning("outbox: listening failed: %s", exc)
                self._stop.wait(1.0)
