"""An audit row's action (`audit_log.action`: the method and the route's template) holds 255 characters, not 64:
some routes' actions are longer (`DELETE /iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}` is 65), and
PostgreSQL refused their rows, so a table dropped through the REST catalog answered 204 and was not audited.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:  # SQLite: a copy of the table (lengths are not kept there)
        batch.alter_column("action", type_=sa.String(255), existing_type=sa.String(64), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.alter_column("action", type_=sa.String(64), existing_type=sa.String(255), existing_nullable=False)
