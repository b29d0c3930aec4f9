"""Scans and commits reported to the REST catalog (and the server's own plans) are kept per table
(`table_read`): how a table is read.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "table_read",
        sa.Column("read_id", ID, primary_key=True, autoincrement=True),
        sa.Column("catalog_name", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("data_files", sa.BigInteger(), nullable=False),
        sa.Column("delete_files", sa.BigInteger(), nullable=False),
        sa.Column("data_bytes", sa.BigInteger(), nullable=False),
        sa.Column("delete_bytes", sa.BigInteger(), nullable=False),
        sa.Column("manifests", sa.Integer(), nullable=False),
        sa.Column("planning_ms", sa.Float(), nullable=False),
        sa.Column("partition", sa.String(1024), nullable=True),
        sa.Column("filter", sa.Text(), nullable=True),
        sa.Column("engine", sa.String(64), nullable=True),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("operation", sa.String(64), nullable=True),
    )
    op.create_index("ix_table_read_table", "table_read", ["catalog_name", "namespace", "table_name", "reported_at"])


def downgrade() -> None:
    op.drop_index("ix_table_read_table", "table_read")
    op.drop_table("table_read")
