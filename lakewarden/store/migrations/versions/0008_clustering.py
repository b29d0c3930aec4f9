"""Clustering: full optimizing that sorts or z-orders a partition's rows.

Why: whether a partition is clustered cannot be read from its files (Spark's rewrites record no sort order
id), so `table_runtime.clustered` remembers, per partition, the files its last clustering rewrite wrote and
under which clustering ({"<spec id>:<path>": {"by": label, "files": [...]}}).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("table_runtime") as batch:
        batch.add_column(sa.Column("clustered", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("table_runtime") as batch:
        batch.drop_column("clustered")
