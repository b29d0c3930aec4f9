"""Samples of each table's shape and each group's load over time, for the dashboard's charts.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "table_shape",
        sa.Column("sample_id", ID, primary_key=True, autoincrement=True),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("data_files", sa.BigInteger(), nullable=False),
        sa.Column("delete_files", sa.BigInteger(), nullable=False),
        sa.Column("small_files", sa.BigInteger(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
    )
    op.create_index("ix_table_shape_table", "table_shape", ["table_id", "sample_id"])
    op.create_table(
        "group_load",
        sa.Column("sample_id", ID, primary_key=True, autoincrement=True),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("optimizers", sa.Integer(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("busy", sa.Integer(), nullable=False),
        sa.Column("queued", sa.Integer(), nullable=False),
        sa.Column("pending_tables", sa.Integer(), nullable=False),
    )
    op.create_index("ix_group_load_group", "group_load", ["group_name", "sample_id"])


def downgrade() -> None:
    op.drop_index("ix_group_load_group", "group_load")
    op.drop_table("group_load")
    op.drop_index("ix_table_shape_table", "table_shape")
    op.drop_table("table_shape")
