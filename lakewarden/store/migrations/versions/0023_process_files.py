"""The files an optimizing process changed get a table of their own (`process_file`), listed a page at a time,
instead of lists inside the process's summary and its tasks' outputs (which held at most 100 of each kind). The
lists already recorded move into it; the summaries and outputs keep their counts and sizes.

Revision ID: 0023
Revises: 0022
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

KINDS = ("rewritten_files", "added_files", "removed_delete_files", "added_delete_files")
ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    files = op.create_table(
        "process_file",
        sa.Column("file_id", ID, primary_key=True, autoincrement=True),
        sa.Column("process_id", ID, sa.ForeignKey("optimizing_process.process_id"), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
    )
    op.create_index("ix_process_file_process_kind", "process_file", ["process_id", "kind", "file_id"])
    _move_lists(files)


def _move_lists(files: Any) -> None:
    """Each task's listed files into rows; the lists out of the tasks' outputs and the processes' summaries."""
    bind = op.get_bind()
    tasks = sa.table("optimizing_task", sa.column("process_id"), sa.column("task_id"), sa.column("output", sa.JSON))
    processes = sa.table("optimizing_process", sa.column("process_id"), sa.column("summary", sa.JSON))
    for process_id, task_id, output in bind.execute(sa.select(tasks).where(tasks.c.output.is_not(None))).all():
        if not isinstance(output, dict) or not any(k in output for k in KINDS):
            continue
        rows = [
            {"process_id": process_id, "task_id": task_id, "kind": kind, "path": path}
            for kind in KINDS
            for path in output.get(kind) or []
        ]
        if rows:
            bind.execute(sa.insert(files), rows)
        kept = {k: v for k, v in output.items() if k not in KINDS}
        bind.execute(
            sa.update(tasks).where(tasks.c.process_id == process_id, tasks.c.task_id == task_id).values(output=kept)
        )
    for process_id, summary in bind.execute(sa.select(processes).where(processes.c.summary.is_not(None))).all():
        if isinstance(summary, dict) and any(k in summary for k in KINDS):
            kept = {k: v for k, v in summary.items() if k not in KINDS}
            bind.execute(sa.update(processes).where(processes.c.process_id == process_id).values(summary=kept))


def downgrade() -> None:
    op.drop_index("ix_process_file_process_kind", "process_file")
    op.drop_table("process_file")
