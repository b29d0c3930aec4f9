"""High availability: the leader's lease with its fencing token, and the nodes.

Why: several servers share one PostgreSQL system database; the node holding `ha_lease` (until its
`expires_at`, by the database's clock) runs the loops, and `epoch` fences a deposed leader's late writes.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ha_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "ha_node",
        sa.Column("node_id", sa.String(64), primary_key=True),
        sa.Column("url", sa.String(1024), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ha_node")
    op.drop_table("ha_lease")
