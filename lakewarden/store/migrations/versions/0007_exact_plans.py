"""Exact optimizing plans: tasks name their files, and a process's tasks run in stages.

Why: an optimizing task used to hand a whole partition to Iceberg's rewrite with size options, and
Iceberg chose the files again; now the planner names every file a task rewrites and every delete file
its commit removes. A delete file shared by several tasks is removed by a last task that may only run
once the others succeeded: `stage` orders a process's tasks. Optimizing processes still running were
planned the old way, which optimizers no longer run: they are canceled, and their tables go back to
idle to be evaluated and planned again. `table_runtime.unreduced` remembers, per partition, the files a
rewrite wrote without reducing their number, so that the partition is not planned again until its files
change.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

REASON = "planned by an older lakewarden whose task inputs optimizers no longer run; planned again"


def upgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.add_column(sa.Column("stage", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("table_runtime") as batch:
        batch.add_column(sa.Column("unreduced", sa.JSON(), nullable=True))
    running = "SELECT process_id FROM optimizing_process WHERE action = 'optimizing' AND status = 'running'"
    op.execute(
        "UPDATE optimizing_task SET status = 'canceled', ended_at = CURRENT_TIMESTAMP "
        f"WHERE status NOT IN ('success', 'canceled') AND process_id IN ({running})"
    )
    op.execute(
        "UPDATE table_runtime SET status_code = 700, optimizing_process_id = NULL, "
        f"status_changed_at = CURRENT_TIMESTAMP WHERE optimizing_process_id IN ({running})"
    )
    op.execute(
        sa.text(
            "UPDATE optimizing_process SET status = 'canceled', end_time = CURRENT_TIMESTAMP, fail_reason = :reason "
            "WHERE action = 'optimizing' AND status = 'running'"
        ).bindparams(reason=REASON)
    )


def downgrade() -> None:
    with op.batch_alter_table("table_runtime") as batch:
        batch.drop_column("unreduced")
    with op.batch_alter_table("optimizing_task") as batch:
        batch.drop_column("stage")
