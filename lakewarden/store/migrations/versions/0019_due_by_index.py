"""A table's evaluation is due when `next_evaluation_at` has come, and whatever deserves a new verdict (a new
snapshot or configuration) sets it: the evaluator's pass reads a range of that index instead of every table.
Tables that were waiting on the old conditions (never evaluated, or evaluated on another snapshot than their
current one) are due now.

Revision ID: 0019
Revises: 0018
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE table_runtime SET next_evaluation_at = CURRENT_TIMESTAMP WHERE evaluated_at IS NULL"
        " OR evaluated_snapshot_id <> current_snapshot_id"
        " OR (evaluated_snapshot_id IS NULL AND current_snapshot_id IS NOT NULL)"
        " OR (evaluated_snapshot_id IS NOT NULL AND current_snapshot_id IS NULL)"
    )


def downgrade() -> None:
    pass  # the old conditions hold as they are
