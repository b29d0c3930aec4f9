"""Views of the internal catalogs: a pointer per view, moved by compare-and-swap as tables' are.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "iceberg_view",
        sa.Column("catalog_name", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(1024), primary_key=True),
        sa.Column("view_name", sa.String(255), primary_key=True),
        sa.Column("metadata_location", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("iceberg_view")
