"""Metadata service: namespaces and table pointers of internal catalogs, the commit timeline, the event outbox.

Why: lakewarden serves its own Iceberg REST catalog. The pointer to each table's current metadata
file lives here and moves by compare-and-swap; every successful commit is recorded on a per-table
timeline, and an event is written to the outbox in the same transaction as the swap.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "iceberg_namespace",
        sa.Column("catalog_name", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(1024), primary_key=True),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "iceberg_table",
        sa.Column("catalog_name", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(1024), primary_key=True),
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("metadata_location", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "commit_timeline",
        sa.Column("commit_id", ID, primary_key=True, autoincrement=True),
        sa.Column("catalog_name", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("parent_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("metadata_location", sa.Text(), nullable=False),
        sa.Column("client", sa.String(255), nullable=True),
        sa.Column("committed_at", TS, nullable=False),
    )
    op.create_index("ix_commit_timeline_table", "commit_timeline", ["catalog_name", "namespace", "table_name"])
    op.create_table(
        "event_outbox",
        sa.Column("event_id", ID, primary_key=True, autoincrement=True),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("catalog_name", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("table_name", sa.String(255), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("event_outbox")
    op.drop_index("ix_commit_timeline_table", "commit_timeline")
    op.drop_table("commit_timeline")
    op.drop_table("iceberg_table")
    op.drop_table("iceberg_namespace")
