"""lakewarden's work undone for a writer (metadata/yielding.py), as the snapshot that undid it says: the summary
fields it writes and their reading."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

YIELDED = "lakewarden.yielded-snapshots"  # lakewarden's snapshots whose work was undone
YIELDED_FILES = "lakewarden.yielded-files"  # how many files lakewarden had removed are back
# the tasks whose work was undone, each with the share of its rewrite undone: "process.task:share,…"
YIELDED_TASKS = "lakewarden.yielded-tasks"
YIELDED_TO = "lakewarden.yielded-to"  # what the work yielded to: a planned write's application, or "commit"
TASK_ID = "lakewarden.task-id"  # in the summary of each snapshot a task commits


@dataclass(frozen=True)
class UndoneTask:
    process_id: int
    task_id: int | None
    share: float  # of the bytes its commit rewrote, the part undone


@dataclass(frozen=True)
class Yield:
    snapshot_id: int | None  # the snapshot that undid the work
    to: str
    snapshots: tuple[int, ...]
    files: int
    tasks: tuple[UndoneTask, ...]


def yield_of(summary: Mapping[str, str], snapshot_id: int | None) -> Yield | None:
    """What a snapshot's summary says was undone; None when it undid nothing. Parts it cannot read are left out
    (a summary is written by lakewarden, but read from any table)."""
    undone = summary.get(YIELDED)
    if not undone:
        return None
    tasks = []
    for part in str(summary.get(YIELDED_TASKS, "")).split(","):
        ids, _, share = part.partition(":")
        process, _, task = ids.partition(".")
        try:
            tasks.append(UndoneTask(int(process), int(task) if task else None, min(max(float(share), 0.0), 1.0)))
        except ValueError:
            continue
    snapshots = tuple(int(s) for s in str(undone).split(",") if s.strip().lstrip("-").isdigit())
    files = str(summary.get(YIELDED_FILES, "0"))
    to = str(summary.get(YIELDED_TO, "commit"))
    return Yield(snapshot_id, to, snapshots, int(files) if files.isdigit() else 0, tuple(tasks))
