"""Foundation: registered catalogs, resource groups, discovered tables and their runtimes.

Why: every later feature (optimizing, maintenance, the REST catalog) hangs off a table identifier
and its runtime, and off the catalog and group it belongs to.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "catalog_meta",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("last_refresh_at", TS, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "resource_group",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("container", sa.String(64), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "table_identifier",
        sa.Column("table_id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("catalog_name", sa.String(64), sa.ForeignKey("catalog_meta.name"), nullable=False),
        sa.Column("db_name", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("catalog_name", "db_name", "table_name", name="uq_table_identifier"),
    )
    op.create_index("ix_table_identifier_catalog_name", "table_identifier", ["catalog_name"])
    op.create_table(
        "table_runtime",
        sa.Column("table_id", sa.Integer(), sa.ForeignKey("table_identifier.table_id"), primary_key=True),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("status_changed_at", TS, nullable=False),
        sa.Column("optimizing_group", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("metadata_location", sa.Text(), nullable=True),
        sa.Column("current_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("last_refreshed_at", TS, nullable=True),
        sa.Column("refresh_error", sa.Text(), nullable=True),
    )
    op.create_index("ix_table_runtime_status_code", "table_runtime", ["status_code"])
    op.create_index("ix_table_runtime_optimizing_group", "table_runtime", ["optimizing_group"])


def downgrade() -> None:
    op.drop_table("table_runtime")
    op.drop_table("table_identifier")
    op.drop_table("resource_group")
    op.drop_table("catalog_meta")
