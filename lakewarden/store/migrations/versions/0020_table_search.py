"""Finding tables by a part of their name among a million (`GET /api/v1/tables?name=`) by a trigram index.

SQLite: an FTS5 table `table_search` with the trigram tokenizer, one row per managed table (rowid = table_id,
the text `catalog.database.table`), kept equal to `table_identifier` by triggers. PostgreSQL: a GIN index of
pg_trgm over the same text, lower-cased. Where neither can be made (SQLite built without FTS5's trigram
tokenizer, before 3.34; PostgreSQL without the pg_trgm extension or the right to create it) nothing is made and
the filter walks every table, as before.

A later migration that rebuilds `table_identifier` on SQLite (a batch: copy and rename) drops these triggers: it
must make them again (tests/test_table_search.py would fail).

Revision ID: 0020
Revises: 0019
"""

import logging

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)
FULL_NAME = "{0}catalog_name || '.' || {0}db_name || '.' || {0}table_name"
SQLITE = [
    "CREATE VIRTUAL TABLE table_search USING fts5(name, tokenize='trigram', detail='none')",
    f"INSERT INTO table_search(rowid, name) SELECT table_id, {FULL_NAME.format('')} FROM table_identifier",
    "CREATE TRIGGER table_search_insert AFTER INSERT ON table_identifier BEGIN"
    f" INSERT INTO table_search(rowid, name) VALUES (new.table_id, {FULL_NAME.format('new.')}); END",
    "CREATE TRIGGER table_search_delete AFTER DELETE ON table_identifier BEGIN"
    " DELETE FROM table_search WHERE rowid = old.table_id; END",
    "CREATE TRIGGER table_search_update AFTER UPDATE OF catalog_name, db_name, table_name ON table_identifier BEGIN"
    f" UPDATE table_search SET name = {FULL_NAME.format('new.')} WHERE rowid = old.table_id; END",
]
POSTGRESQL_INDEX = (
    "CREATE INDEX ix_table_identifier_name_trgm ON table_identifier"
    f" USING gin (lower({FULL_NAME.format('')}) gin_trgm_ops)"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        try:
            bind.exec_driver_sql("CREATE VIRTUAL TABLE temp.trigram_probe USING fts5(x, tokenize='trigram')")
            bind.exec_driver_sql("DROP TABLE temp.trigram_probe")
        except sa.exc.OperationalError as exc:
            log.warning("no trigram index of table names (this SQLite has no FTS5 trigram tokenizer): %s", exc)
            return
        for statement in SQLITE:
            bind.exec_driver_sql(statement)
    elif bind.dialect.name == "postgresql":
        try:
            with bind.begin_nested():
                bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        except sa.exc.DBAPIError as exc:
            log.warning("no trigram index of table names (the pg_trgm extension cannot be created): %s", exc)
            return
        bind.exec_driver_sql(POSTGRESQL_INDEX)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for name in ("insert", "delete", "update"):
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS table_search_{name}")
        bind.exec_driver_sql("DROP TABLE IF EXISTS table_search")
    elif bind.dialect.name == "postgresql":
        bind.exec_driver_sql("DROP INDEX IF EXISTS ix_table_identifier_name_trgm")
