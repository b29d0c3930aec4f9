"""How a table's row-level writers bunch their commits, learned from its snapshots: a job that deletes, updates
or merges commits in bursts, and a rewrite planned inside a burst races the job's next statement. lakewarden
plans after a pause as long as the job's own gaps suggest the burst is over (services/processes/dispatcher.py),
for at most a bounded wait. Where lakewarden is not on the commit path (a Hive, Glue or filesystem catalog
written directly), this is the whole defence."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lakewarden.domain.retention import OWN_COMMIT

ROW_LEVEL = frozenset({"overwrite", "delete"})  # the operations of a DELETE, UPDATE or MERGE commit
# the summary counts of a row-level commit that names files
NAMING = ("added-position-delete-files", "added-dvs", "deleted-data-files", "removed-position-delete-files")
APP_ID = "app-id"  # Iceberg's EnvironmentContext key in a snapshot's summary (Spark also writes spark.app.id)
LOOKED_AT = 50  # the newest snapshots learned from
MIN_PAUSE_MS = 1_000
MAX_PAUSE_MS = 30_000


@dataclass(frozen=True)
class Cadence:
    """The newest commit of a row-level writer, and the pause after which its burst is taken to be over."""

    last_write_ms: int
    pause_ms: int

    def busy(self, now_ms: int) -> bool:
        return now_ms - self.last_write_ms < self.pause_ms

    def document(self) -> dict[str, int]:
        return {"last_write_ms": self.last_write_ms, "pause_ms": self.pause_ms}


def cadence(snapshots: Sequence[tuple[int, Mapping[str, str]]]) -> Cadence | None:
    """From (timestamp in ms, summary) of a table's snapshots, oldest first: the cadence of the applications that
    committed row-level changes among the newest LOOKED_AT (all their commits count, appends too); None when
    no such writer committed lately. The pause is twice the median gap between their consecutive commits,
    within bounds."""
    recent = [(at, summary) for at, summary in snapshots[-LOOKED_AT:] if OWN_COMMIT not in summary]
    writers = {s.get(APP_ID) or s.get("spark.app.id") for _, s in recent if _names_files(s)}
    if not writers:
        return None
    theirs = sorted(at for at, s in recent if (s.get(APP_ID) or s.get("spark.app.id")) in writers)
    gaps = [b - a for a, b in itertools.pairwise(theirs) if b > a]
    pause = 2 * statistics.median(gaps) if gaps else MAX_PAUSE_MS
    return Cadence(theirs[-1], int(min(max(pause, MIN_PAUSE_MS), MAX_PAUSE_MS)))


def _names_files(summary: Mapping[str, str]) -> bool:
    """Whether a commit is a row-level change that names files (a position delete or deletion vector, a file
    removed), which a rewrite of those files conflicts with. An upsert as Flink writes it adds equality deletes
    only: it names no file, and a rewrite keeps the planned sequence number, so the deletes still apply."""
    if summary.get("operation") not in ROW_LEVEL:
        return False
    if "added-equality-delete-files" not in summary:
        return True
    return any(_count(summary, key) for key in NAMING)


def _count(summary: Mapping[str, str], key: str) -> int:
    try:
        return int(summary.get(key, "0"))
    except ValueError:
        return 1  # unreadable: taken to name files


def of_document(found: Mapping[str, int] | None) -> Cadence | None:
    if not found:
        return None
    try:
        return Cadence(int(found["last_write_ms"]), int(found["pause_ms"]))
    except (KeyError, TypeError, ValueError):
        return None
