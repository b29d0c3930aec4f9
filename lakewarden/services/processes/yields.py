"""A process whose work was undone for a writer says so: each snapshot that undid lakewarden's work (its summary,
domain/yields.py) is recorded on the processes whose tasks made that work, with the CPU those tasks spent on the
part undone. The table is evaluated again by the commit's own event, and its partitions planned anew."""

from __future__ import annotations

import logging

from lakewarden.domain.costs import cpu_seconds
from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.domain.yields import yield_of
from lakewarden.store import processes as store
from lakewarden.store.database import Database, utcnow

log = logging.getLogger(__name__)


class YieldRecorder:
    """Called with each committed event (services/tables/changes.py hands over those whose summary says work was
    undone); records nothing for any other."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def __call__(self, event: CatalogEvent) -> None:
        if event.type != EventType.TABLE_COMMITTED:
            return
        found = yield_of(event.payload.get("summary") or {}, event.payload.get("snapshot_id"))
        if found is None:
            return
        with self.db.write() as session:
            for task in found.tasks:
                usage = store.task_usage(session, task.process_id, task.task_id) if task.task_id is not None else None
                cpu_ms = cpu_seconds(usage[0] if usage else None) * 1000 * task.share
                entry = {
                    "snapshot_id": found.snapshot_id,
                    "to": found.to,
                    "task_id": task.task_id,
                    "share": task.share,
                    "files_restored": found.files,
                    "cpu_ms": round(cpu_ms, 1),
                    "at": utcnow().isoformat(),
                }
                if store.record_yield(session, task.process_id, entry, cpu_ms):
                    log.info(
                        "process %d yielded to %s: snapshot %s undid %.0f%% of task %s's work (%.1f CPU-s)",
                        task.process_id,
                        found.to,
                        found.snapshot_id,
                        task.share * 100,
                        task.task_id,
                        cpu_ms / 1000,
                    )
