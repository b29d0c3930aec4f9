"""What Spark measured of a task's attempts and their cost (domain/costs.py); a failed task's diagnosis.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.add_column(sa.Column("usage", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("diagnosis", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.drop_column("diagnosis")
        batch.drop_column("usage")
