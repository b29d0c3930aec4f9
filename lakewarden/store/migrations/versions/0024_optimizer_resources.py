"""Optimizers a container started are recorded (`optimizer_resource`), so that a new leader adopts or releases
what the last one started (dynamic allocation, failover).

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "optimizer_resource",
        sa.Column("resource_id", sa.String(128), primary_key=True),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("container", sa.String(64), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("started_by", sa.String(255), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_optimizer_resource_group_name", "optimizer_resource", ["group_name"])


def downgrade() -> None:
    op.drop_index("ix_optimizer_resource_group_name", "optimizer_resource")
    op.drop_table("optimizer_resource")
