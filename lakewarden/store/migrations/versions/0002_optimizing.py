"""Self-optimizing: evaluation results on the table runtime, optimizers, processes and tasks.

Why: the evaluator persists its verdict (with reasons) so the API can say why a table is pending;
processes and tasks persist every state so nothing is lost or stuck across a server restart.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("table_runtime") as batch:
        batch.add_column(sa.Column("evaluated_snapshot_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("evaluated_at", TS, nullable=True))
        batch.add_column(sa.Column("evaluation", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("last_minor_optimizing_at", TS, nullable=True))
        batch.add_column(sa.Column("last_major_optimizing_at", TS, nullable=True))
        batch.add_column(sa.Column("last_full_optimizing_at", TS, nullable=True))
        batch.add_column(sa.Column("last_planned_at", TS, nullable=True))
        batch.add_column(sa.Column("optimizing_process_id", sa.BigInteger(), nullable=True))

    op.create_table(
        "optimizer",
        sa.Column("token", sa.String(64), primary_key=True),
        sa.Column("group_name", sa.String(64), nullable=False, index=True),
        sa.Column("container", sa.String(64), nullable=True),
        sa.Column("resource_id", sa.String(128), nullable=True),
        sa.Column("parallelism", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("registered_at", TS, nullable=False),
        sa.Column("last_heartbeat_at", TS, nullable=False),
    )
    op.create_table(
        "optimizing_process",
        sa.Column("process_id", ID, primary_key=True, autoincrement=True),
        sa.Column("table_id", sa.Integer(), nullable=False, index=True),
        sa.Column("catalog_name", sa.String(64), nullable=False),
        sa.Column("db_name", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("group_name", sa.String(64), nullable=False, index=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("target_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("plan_time", TS, nullable=False),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("fail_reason", sa.Text(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=False),
    )
    op.create_table(
        "optimizing_task",
        sa.Column("process_id", ID, sa.ForeignKey("optimizing_process.process_id"), primary_key=True),
        sa.Column("task_id", sa.Integer(), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("retry_count", sa.Integer(), nullable=False),
        sa.Column("optimizer_token", sa.String(64), nullable=True, index=True),
        sa.Column("thread_id", sa.Integer(), nullable=True),
        sa.Column("partitions", sa.JSON(), nullable=False),
        sa.Column("input", sa.JSON(), nullable=False),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cost_bytes", sa.BigInteger(), nullable=False),
        sa.Column("scheduled_at", TS, nullable=True),
        sa.Column("acked_at", TS, nullable=True),
        sa.Column("ended_at", TS, nullable=True),
    )


NEW_RUNTIME_COLUMNS = (
    "optimizing_process_id",
    "last_planned_at",
    "last_full_optimizing_at",
    "last_major_optimizing_at",
    "last_minor_optimizing_at",
    "evaluation",
    "evaluated_at",
    "evaluated_snapshot_id",
)


def downgrade() -> None:
    op.drop_table("optimizing_task")
    op.drop_table("optimizing_process")
    op.drop_table("optimizer")
    with op.batch_alter_table("table_runtime") as batch:
        for column in NEW_RUNTIME_COLUMNS:
            batch.drop_column(column)
