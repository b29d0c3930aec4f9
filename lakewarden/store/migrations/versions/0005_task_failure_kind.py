"""Task failures by kind: a conflict, a transient failure or a final one.

Why: a compaction that lost a race with a streaming writer waited out a back-off that doubled with each
retry, minutes long after a few, although waiting does not make winning likelier. The optimizer now
says which kind a failure is; a conflict is retried after the base back-off, a transient failure after
a growing one, a final one not at all. `retryable` becomes `failure` (true: transient, false: final).

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.add_column(sa.Column("failure", sa.String(16), nullable=True))
    op.execute(
        "UPDATE optimizing_task SET failure = CASE WHEN retryable THEN 'transient' ELSE 'final' END "
        "WHERE retryable IS NOT NULL"
    )
    with op.batch_alter_table("optimizing_task") as batch:
        batch.drop_column("retryable")


def downgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.add_column(sa.Column("retryable", sa.Boolean(), nullable=True))
    op.execute("UPDATE optimizing_task SET retryable = (failure <> 'final') WHERE failure IS NOT NULL")
    with op.batch_alter_table("optimizing_task") as batch:
        batch.drop_column("failure")
