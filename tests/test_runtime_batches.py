"""The evaluator stores a batch of verdicts in a few statements (store/runtime.py, store/shapes.py): each batched
write must do exactly what its one-table form does, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import shapes
from lakewarden.store import tables as table_store
from lakewarden.store.models import TableRuntimeRow
from lakewarden.store.runtime import Verdict
from lakewarden.store.shapes import Shape
from tests.test_scheduling import ctx_of


def _tables(client: TestClient, count: int) -> list[int]:
    with ctx_of(client).db.write() as session:
        if not catalog_store.catalog_exists(session, "c"):
            catalog_store.create_catalog(session, CatalogSpec("c", "sql", {"uri": "sqlite:////x.db"}))
        return [
            table_store.add_table(session, TableIdentifier("c", "db", f"t{i}_{count}"), "default", {}).runtime.table_id
            for i in range(count)
        ]


def test_a_batch_transition_moves_only_the_tables_still_in_the_expected_status(client: TestClient) -> None:
    ids = _tables(client, 6)
    db = ctx_of(client).db
    with db.write() as session:
        assert runtime_store.transition_tables(session, ids[:2], TableStatus.IDLE, TableStatus.PENDING) == set(ids[:2])
        # two moved on meanwhile (one pending, one planning): a batch from idle leaves them alone
        assert runtime_store.transition_table(session, ids[2], TableStatus.IDLE, TableStatus.PENDING)
        moved = runtime_store.transition_tables(session, ids[:4], TableStatus.PENDING, TableStatus.IDLE)
        assert moved == {ids[0], ids[1], ids[2]}
        assert runtime_store.transition_tables(session, [], TableStatus.IDLE, TableStatus.PENDING) == set()
    with db.read() as session:
        statuses = {i: session.get(TableRuntimeRow, i).status_code for i in ids}  # type: ignore[union-attr]
    assert set(statuses.values()) == {int(TableStatus.IDLE)}


def test_a_batch_of_verdicts_is_saved_per_table(client: TestClient) -> None:
    ids = _tables(client, 3)
    later = datetime.now(UTC) + timedelta(hours=1)
    db = ctx_of(client).db
    with db.write() as session:
        runtime_store.save_evaluations(
            session,
            [
                Verdict(ids[0], 11, {"type": None, "n": 0}, None, datetime.now(UTC)),
                Verdict(ids[2], 33, {"type": 1, "n": 2}, later, datetime.now(UTC)),
            ],
        )
    with db.read() as session:
        rows = [session.get(TableRuntimeRow, i) for i in ids]
        assert [(r.evaluated_snapshot_id, r.evaluation) for r in rows if r] == [
            (11, {"type": None, "n": 0}),
            (None, None),
            (33, {"type": 1, "n": 2}),
        ]
        assert rows[0] is not None and rows[0].next_evaluation_at is None
        assert rows[2] is not None and rows[2].next_evaluation_at is not None
        assert abs(rows[2].next_evaluation_at.replace(tzinfo=UTC) - later) < timedelta(seconds=1)


def test_a_verdict_keeps_a_due_moment_stored_after_its_record_was_read(client: TestClient) -> None:
    """A change stored while a verdict was being made (a due moment later than the record's read) stays due unless
    the verdict's own moment is earlier; a due moment from before the read is the verdict's to replace."""
    ids = _tables(client, 5)
    db = ctx_of(client).db
    read_at = datetime.now(UTC)
    before, after = read_at - timedelta(seconds=5), read_at + timedelta(seconds=5)
    own = read_at + timedelta(hours=1)
    stored = {ids[0]: after, ids[1]: after, ids[2]: before, ids[3]: before, ids[4]: own + timedelta(seconds=1)}
    with db.write() as session:
        for table_id, due in stored.items():
            row = session.get(TableRuntimeRow, table_id)
            assert row is not None
            row.next_evaluation_at = due
    verdicts = {ids[0]: own, ids[1]: None, ids[2]: own, ids[3]: None, ids[4]: own}
    with db.write() as session:
        runtime_store.save_evaluations(
            session, [Verdict(table_id, 1, {"type": None}, again, read_at) for table_id, again in verdicts.items()]
        )
    with db.read() as session:
        found = {}
        for table_id in ids:
            row = session.get(TableRuntimeRow, table_id)
            assert row is not None
            found[table_id] = None if row.next_evaluation_at is None else row.next_evaluation_at.replace(tzinfo=UTC)
    assert found == {ids[0]: after, ids[1]: after, ids[2]: own, ids[3]: None, ids[4]: own}


def test_a_batch_of_shapes_samples_as_one_table_at_a_time_does(client: TestClient) -> None:
    ids = _tables(client, 3)
    db = ctx_of(client).db

    def shape(snapshot: int, files: int) -> Shape:
        return Shape(snapshot, files, 0, 0, files * 100, "good")

    with db.write() as session:  # table 0 has a sample; table 1 has one from long ago; table 2 has none
        assert shapes.sample_table_shape(session, ids[0], shape(1, 5), timedelta(hours=1)).sampled
        assert shapes.sample_table_shape(session, ids[1], shape(1, 5), timedelta(0)).sampled
    with db.write() as session:
        found = shapes.sample_table_shapes(
            session, {ids[0]: shape(2, 6), ids[1]: shape(1, 5), ids[2]: shape(7, 1)}, timedelta(hours=1)
        )
    assert found[ids[0]].sampled is False and found[ids[0]].deferred_until is not None  # changed, too soon
    assert found[ids[1]].sampled is False and found[ids[1]].deferred_until is None  # unchanged
    assert found[ids[2]].sampled is True
    with db.read() as session:
        assert [len(shapes.table_shapes(session, i, 10)) for i in ids] == [1, 1, 1]
