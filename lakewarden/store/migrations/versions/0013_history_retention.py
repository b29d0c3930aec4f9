"""History is pruned (services/tables/history.py); what pruned processes counted is kept per table, action, type and
status, so that the metrics' process counters never go down.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pruned_process_totals",
        sa.Column("catalog_name", sa.String(64), primary_key=True),
        sa.Column("db_name", sa.String(255), primary_key=True),
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("action", sa.String(32), primary_key=True),
        sa.Column("type", sa.String(16), primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("sums", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pruned_process_totals")
