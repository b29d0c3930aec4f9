"""The schema comes from migrations alone: one head, and the models match what the migrations build."""

from __future__ import annotations

import json

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from lakewarden.config import Config
from lakewarden.store.database import Database, alembic_config, migration_heads
from lakewarden.store.models import Base, mapped_name


def test_single_head() -> None:
    assert len(migration_heads()) == 1


def test_models_match_migrations(config: Config) -> None:
    db = Database(config.database_url)
    try:
        db.migrate()
        db.migrate()  # idempotent
        assert db.current_revision() == migration_heads()[0]
        with db.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"include_name": mapped_name}), Base.metadata)
        assert diff == []
    finally:
        db.dispose()


def _alembic(db: Database, *step: str) -> None:
    with db.engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        getattr(command, step[0])(cfg, step[1])


def test_process_totals_take_over_the_pruned_totals_and_the_ended_processes(config: Config) -> None:
    """0016: the running totals start as what pruning had folded (by the table's group now) plus every ended
    process still kept; running processes are not in them; each table's failures in a row start from the kept
    processes; the downgrade gives the pruned part back."""
    db = Database(config.database_url)
    try:
        _alembic(db, "upgrade", "0015")
        keys = "catalog_name, db_name, table_name, action, type, status"
        process = (
            f"INSERT INTO optimizing_process (table_id, {keys}, group_name, plan_time, summary) "
            "VALUES (1, 'lake', 'db', 't', 'optimizing', 'minor', :status, :group_name, CURRENT_TIMESTAMP, :summary)"
        )
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO catalog_meta (name, type, properties, health, created_at, updated_at) "
                    "VALUES ('lake', 'internal', '{}', 'ok', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO table_identifier (table_id, catalog_name, db_name, table_name, format, created_at) "
                    "VALUES (1, 'lake', 'db', 't', 'iceberg', CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO table_runtime "
                    "(table_id, status_code, status_changed_at, optimizing_group, config, summary) "
                    "VALUES (1, 700, CURRENT_TIMESTAMP, 'now', '{}', '{}')"
                )
            )
            conn.execute(
                text(
                    f"INSERT INTO pruned_process_totals ({keys}, count, sums) "
                    "VALUES ('lake', 'db', 't', 'optimizing', 'minor', 'success', 3, :sums)"
                ),
                {"sums": json.dumps({"files_in": 30, "cost": 0.5})},
            )
            ran = (
                ("failed", "a", 1),
                ("success", "a", 5),
                ("failed", "b", 7),
                ("failed", "a", 2),
                ("running", "a", 100),
            )
            for status, group, files_in in ran:
                summary = json.dumps({"files_in": files_in, "scheduling": {"why": "x"}})
                conn.execute(text(process), {"status": status, "group_name": group, "summary": summary})
        _alembic(db, "upgrade", "head")
        query = "SELECT group_name, status, count, sums FROM process_totals ORDER BY group_name, status"
        with db.engine.connect() as conn:
            rows = [(g, st, n, json.loads(s) if isinstance(s, str) else s) for g, st, n, s in conn.execute(text(query))]
            streak = conn.execute(text("SELECT table_id, action, failed_in_a_row FROM process_streak")).all()
        assert rows == [
            ("a", "failed", 2, {"files_in": 3}),
            ("a", "success", 1, {"files_in": 5}),
            ("b", "failed", 1, {"files_in": 7}),
            ("now", "success", 3, {"files_in": 30, "cost": 0.5}),
        ]
        assert [tuple(r) for r in streak] == [(1, "optimizing", 2)]  # failed, failed after the success
        _alembic(db, "downgrade", "0015")
        with db.engine.connect() as conn:
            back = conn.execute(text("SELECT status, count, sums FROM pruned_process_totals")).all()
        assert [(s, n, json.loads(j) if isinstance(j, str) else j) for s, n, j in back] == [
            ("success", 3, {"files_in": 30, "cost": 0.5})
        ]
    finally:
        db.dispose()


def test_process_file_lists_move_out_of_summaries_and_outputs(config: Config) -> None:
    """0023: the files listed in tasks' outputs become rows of `process_file`; outputs and summaries keep their
    counts, not the lists; a maintenance process's examples stay where they were."""
    db = Database(config.database_url)
    try:
        _alembic(db, "upgrade", "0022")
        keys = "table_id, catalog_name, db_name, table_name, group_name, action, type, status, plan_time, summary"
        task_keys = "process_id, task_id, status, type, attempt, retry_count, partitions, input, output, cost_bytes"
        listed = {"files_in": 2, "rewritten_files": ["a", "b"], "added_files": ["c"]}
        with db.engine.begin() as conn:
            for action, summary in (("optimizing", listed), ("clean-orphan-files", {"files": ["o"]})):
                conn.execute(
                    text(
                        f"INSERT INTO optimizing_process ({keys}) VALUES (1, 'lake', 'db', 't', 'g', :action, "
                        "'minor', 'success', CURRENT_TIMESTAMP, :summary)"
                    ),
                    {"action": action, "summary": json.dumps(summary)},
                )
            conn.execute(
                text(
                    f"INSERT INTO optimizing_task ({task_keys}) "
                    "VALUES (1, 1, 'success', 'minor', 1, 0, '[]', '{}', :output, 0)"
                ),
                {"output": json.dumps(listed)},
            )
        _alembic(db, "upgrade", "head")
        with db.engine.connect() as conn:
            files = conn.execute(text("SELECT process_id, task_id, kind, path FROM process_file ORDER BY path")).all()
            output = conn.execute(text("SELECT output FROM optimizing_task")).scalar_one()
            summaries = conn.execute(text("SELECT summary FROM optimizing_process ORDER BY process_id")).scalars().all()
        assert [tuple(f) for f in files] == [
            (1, 1, "rewritten_files", "a"),
            (1, 1, "rewritten_files", "b"),
            (1, 1, "added_files", "c"),
        ]
        loaded = [json.loads(s) if isinstance(s, str) else s for s in (output, *summaries)]
        assert loaded == [{"files_in": 2}, {"files_in": 2}, {"files": ["o"]}]
    finally:
        db.dispose()
