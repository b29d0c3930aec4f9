"""When each table's verdict may next change with no new snapshot: the evaluator reads a table that does not
change only then (a minor or full interval passes, a process ends, a chart's sample is due), instead of every
`recheck-interval`. Every table is due once after the upgrade, which sets it from its verdict.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("table_runtime") as batch:
        batch.add_column(sa.Column("next_evaluation_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_table_runtime_next_evaluation_at", ["next_evaluation_at"])
    op.execute("UPDATE table_runtime SET next_evaluation_at = CURRENT_TIMESTAMP")


def downgrade() -> None:
    with op.batch_alter_table("table_runtime") as batch:
        batch.drop_index("ix_table_runtime_next_evaluation_at")
        batch.drop_column("next_evaluation_at")
