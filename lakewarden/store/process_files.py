"""Store functions for the files an optimizing process changed (`process_file`): written as its tasks complete,
read a page at a time, deleted with the process when the history is pruned (store/history.py)."""

from __future__ import annotations

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from lakewarden.store.models import ProcessFileRow


def add_process_files(session: Session, process_id: int, task_id: int, files: dict[str, list[str]]) -> None:
    """The files a task changed, by kind (one statement for them all)."""
    rows = [
        {"process_id": process_id, "task_id": task_id, "kind": kind, "path": path}
        for kind, paths in files.items()
        for path in paths
    ]
    if rows:
        session.execute(insert(ProcessFileRow), rows)


def process_files(
    session: Session, process_id: int, kind: str | None, offset: int, limit: int
) -> tuple[list[ProcessFileRow], int]:
    """A page of the files a process changed (of one kind, or all), in the order they were recorded, and how many
    there are in all."""
    wanted = [ProcessFileRow.process_id == process_id]
    if kind is not None:
        wanted.append(ProcessFileRow.kind == kind)
    total = session.scalar(select(func.count()).select_from(ProcessFileRow).where(*wanted)) or 0
    page = session.scalars(
        select(ProcessFileRow).where(*wanted).order_by(ProcessFileRow.file_id).offset(offset).limit(limit)
    )
    return list(page), int(total)
