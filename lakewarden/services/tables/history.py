"""The history pruner: what the server keeps of the past stays bounded (`ams.history`); the load sampler.

Every `expire-interval`, on the leader: ended processes with their tasks, the commit timeline, the reported reads
and the event outbox are pruned by age and by count (store/history.py says what is always kept), in short transactions;
the local optimizers' logs are rotated past their size (copied, then truncated in place: the optimizer keeps
appending to the file it opened) and deleted once nobody has written them for their keep-time.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from stat import S_ISREG

from lakewarden.config import HistoryConfig, Retention
from lakewarden.services.loop import LoopService
from lakewarden.store import history as store
from lakewarden.store import shapes, stats
from lakewarden.store.database import Database, utcnow

log = logging.getLogger(__name__)
PRUNE = {
    "processes": store.prune_processes,
    "timeline": store.prune_timeline,
    "events": store.prune_events,
    "reads": store.prune_reads,
    "table-shapes": store.prune_table_shapes,
    "group-load": store.prune_group_loads,
}
KINDS = tuple(PRUNE)


class HistoryPruner(LoopService):
    name = "history-pruner"

    def __init__(
        self,
        db: Database,
        config: HistoryConfig,
        log_dir: Path,
        settle: Callable[[datetime], int] | None = None,
    ) -> None:
        super().__init__(config.expire_interval.total_seconds())
        self.db = db
        # keeps what each optimizing process bought (services/tables/reads.py) before the reads it is judged by go
        self.settle = settle
        self.config = config
        self.log_dir = log_dir
        self.pruned = dict.fromkeys(KINDS, 0)  # rows deleted since start, by kind
        self.logs_rotated = 0
        self.logs_deleted = 0

    def run_once(self) -> None:
        self.prune()
        self.rotate_logs()

    def prune(self, now: datetime | None = None) -> dict[str, int]:
        """Prunes every kind until nothing is left to prune (or the server stops); returns the rows deleted."""
        now = now or utcnow()
        deleted = dict.fromkeys(KINDS, 0)
        started = time.monotonic()
        if self.settle is not None:
            self.settle(now)
        for kind in KINDS:
            retention: Retention = getattr(self.config, kind.replace("-", "_"))
            while not self.stopping:
                with self.db.write() as session:
                    count = PRUNE[kind](session, now - retention.keep_time, retention.keep_count)
                deleted[kind] += count
                if count == 0:
                    break
            self.pruned[kind] += deleted[kind]
        if any(deleted.values()):
            log.info(
                "history pruned in %.1fs: %s",
                time.monotonic() - started,
                ", ".join(f"{count} {kind}" for kind, count in deleted.items()),
            )
        return deleted

    def rotate_logs(self, now: float | None = None) -> None:
        """Rotates each optimizer log past max-size into `<log>.1` … `<log>.<backups>`; deletes the logs and copies
        not written for keep-time."""
        if not self.log_dir.is_dir():
            return
        settings = self.config.optimizer_logs
        now = now if now is not None else time.time()
        for path in sorted(self.log_dir.iterdir()):
            try:
                stat = path.lstat()
                if not S_ISREG(stat.st_mode):  # only the logs themselves: never a directory, nor a link's target
                    continue
                if now - stat.st_mtime > settings.keep_time.total_seconds():
                    path.unlink()
                    self.logs_deleted += 1
                elif path.suffix == ".log" and stat.st_size > settings.max_size:
                    self._rotate(path, settings.backups)
            except FileNotFoundError:  # gone meanwhile
                continue

    def _rotate(self, path: Path, backups: int) -> None:
        for n in range(backups, 1, -1):
            older = path.with_name(f"{path.name}.{n - 1}")
            if older.exists():
                older.replace(path.with_name(f"{path.name}.{n}"))
        if backups:
            shutil.copyfile(path, path.with_name(f"{path.name}.1"))
        with path.open("r+b") as file:  # the writer opened it to append: its next line starts the file again
            file.truncate(0)
        self.logs_rotated += 1


class LoadSampler(LoopService):
    """Every `history.group-load` interval, on the leader: each group's optimizers, threads, busy threads, queued
    tasks and pending tables, one sample per group (store/shapes.py), for the group page's chart."""

    name = "load-sampler"

    def __init__(self, db: Database, interval_seconds: float) -> None:
        super().__init__(interval_seconds)
        self.db = db

    def run_once(self) -> None:
        with self.db.write() as session:
            shapes.sample_group_load(session, stats.group_load(session), stats.pending_tables(session))
