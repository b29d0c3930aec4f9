"""When the maintenance trigger next looks at each table (`table_runtime.next_maintenance_at`) and what it found
per action (`table_runtime.maintenance`): it reads a range of that index instead of every table each interval.
`service_state` keeps what a service must remember across restarts (here the maintenance schedules the due times
were computed with). Every table is due once after the upgrade; the processes' plan times keep each action to
its interval.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


# plain ALTER TABLE (no batch): a copy of table_runtime would take minutes with a million tables
def upgrade() -> None:
    op.add_column("table_runtime", sa.Column("next_maintenance_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("table_runtime", sa.Column("maintenance", sa.JSON(), nullable=True))
    op.create_index("ix_table_runtime_next_maintenance_at", "table_runtime", ["next_maintenance_at"])
    op.execute("UPDATE table_runtime SET next_maintenance_at = CURRENT_TIMESTAMP")
    op.create_table(
        "service_state",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("service_state")
    op.drop_index("ix_table_runtime_next_maintenance_at", "table_runtime")
    with op.batch_alter_table("table_runtime") as batch:
        batch.drop_column("maintenance")
        batch.drop_column("next_maintenance_at")
