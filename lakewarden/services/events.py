"""What lakewarden does when its metadata service announces a change: the table is evaluated at once.

Events arrive from request threads; a single worker takes them off a queue in batches, refreshes
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
from typing import Any

from lakewarden.domain.tables import TableIdentifier
from lakewarden.services.evaluation import TableEvaluator
from lakewarden.services.explorer import TableExplorer

log = logging.getLogger(__name__)
OWN_COMMIT = "lakewarden.process-id"
BATCH_SECONDS = 0.1


class EventDispatcher:
    def __init__(self, explorer: TableExplorer, evaluator: TableEvaluator) -> None:
        self.explorer = explorer  # reads lakewarden's own tables from the metadata service, in-process
        self.evaluator = evaluator
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.handled = 0

    def __call__(self, event: dict[str, Any]) -> None:
        if not event["type"].startswith("namespace-"):
            self._queue.put(event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lakewarden-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            time.sleep(BATCH_SECONDS)  # let a burst of commits arrive, then handle it as one
            batch = [event]
            while not self._queue.empty():
                more = self._queue.get()
                if more is None:
                    return
                batch.append(more)
            by_catalog: dict[str, set[TableIdentifier]] = defaultdict(set)
            for item in batch:
                by_catalog[item["catalog"]] |= _tables_of(item)
            for catalog, names in sorted(by_catalog.items()):
                try:
                    self.explorer.refresh_tables(catalog, names)
                except Exception:
                    log.exception("refreshing %s after an event failed", catalog)
            # lakewarden's own rewrites only need the runtime to follow them: the process that made them
            # settles the table, and a re-evaluation now would be pointless
            if any(not _own_commit(item) for item in batch):
                self.evaluator.wake()
            self.handled += len(batch)


def _own_commit(event: dict[str, Any]) -> bool:
    return event["type"] == "table-committed" and OWN_COMMIT in (event["payload"].get("summary") or {})


def _tables_of(event: dict[str, Any]) -> set[TableIdentifier]:
    """The tables an event concerns (a rename: both names)."""
    names = {TableIdentifier(event["catalog"], ".".join(event["namespace"]), event["table"])}
    moved = event["payload"].get("from")
    if moved:
        names.add(TableIdentifier(event["catalog"], ".".join(moved["namespace"]), moved["table"]))
    return names
