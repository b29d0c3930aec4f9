"""What lakewarden does when its metadata service announces a change: the table is evaluated at once.

Events arrive from request threads; a single worker takes them off a queue, coalesces them per
catalog, refreshes the catalog's managed tables (adding created ones, disposing dropped ones, taking
the new metadata location of committed ones) and wakes the evaluator, so a commit that crosses a
trigger is queued for optimizing within moments instead of the explorer's interval.
lakewarden's own optimizing commits are recognised by their snapshot summary and change nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from lakewarden.services.evaluation import TableEvaluator
from lakewarden.services.explorer import TableExplorer

log = logging.getLogger(__name__)
OWN_COMMIT = "lakewarden.process-id"


class EventDispatcher:
    def __init__(self, explorer: TableExplorer, evaluator: TableEvaluator) -> None:
        self.explorer = explorer
        self.evaluator = evaluator
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.handled = 0

    def __call__(self, event: dict[str, Any]) -> None:
        if event["type"].startswith("namespace-"):
            return
        summary = event["payload"].get("summary") or {}
        if event["type"] == "table-committed" and OWN_COMMIT in summary:
            # lakewarden's own rewrite: the process that made it settles the table; a re-plan would be pointless
            return
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
            catalogs = {event["catalog"]}
            while not self._queue.empty():  # coalesce a burst of commits into one refresh per catalog
                more = self._queue.get()
                if more is None:
                    return
                catalogs.add(more["catalog"])
            for catalog in sorted(catalogs):
                try:
                    self.explorer.refresh(catalog)
                except Exception:
                    log.exception("refreshing %s after an event failed", catalog)
            self.evaluator.wake()
            self.handled += 1
