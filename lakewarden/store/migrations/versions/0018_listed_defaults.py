"""The table defaults a catalog's tables were last all loaded with: a refresh that lists each table's metadata
location (SQL and internal catalogs) loads only moved tables, unless these defaults changed since, also across a
restart. Unknown after the upgrade: the first refresh loads every table once.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


# plain ALTER TABLE on both databases: a batch (copy and rename) of catalog_meta would break the foreign keys
# of the tables that name it, on SQLite
def upgrade() -> None:
    op.add_column("catalog_meta", sa.Column("loaded_defaults", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("catalog_meta", "loaded_defaults")
