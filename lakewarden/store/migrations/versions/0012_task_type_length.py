"""A task's type holds its action's name, and maintenance actions have longer names than 16 characters
(`clean-orphan-files`, `clean-dangling-delete-files`, `rewrite-manifests`): PostgreSQL refused those tasks.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.alter_column("type", existing_type=sa.String(16), type_=sa.String(32), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("optimizing_task") as batch:
        batch.alter_column("type", existing_type=sa.String(32), type_=sa.String(16), existing_nullable=False)
