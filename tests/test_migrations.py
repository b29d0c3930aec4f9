"""The schema comes from migrations alone: one head, and the models match what the migrations build."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from lakewarden.config import Config
from lakewarden.store.database import Database, migration_heads
from lakewarden.store.models import Base


def test_single_head() -> None:
    assert len(migration_heads()) == 1


def test_models_match_migrations(config: Config) -> None:
    db = Database(config.database_url)
    try:
        db.migrate()
        db.migrate()  # idempotent
        assert db.current_revision() == migration_heads()[0]
        with db.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
    finally:
        db.dispose()
