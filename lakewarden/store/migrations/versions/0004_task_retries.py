"""Task retries: whether a failure may pass on a retry, and when a retried task may run again.

Why: a deterministic refusal (an invalid argument, a forbidden table setting) used to be retried
execute.num-retries times within seconds. The optimizer now says whether a failure is retryable; a
final one fails its process at once, and a retryable one waits out a growing back-off.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.add_column(sa.Column("retryable", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("retry_after", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.drop_column("retry_after")
        batch.drop_column("retryable")
