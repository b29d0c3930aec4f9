"""Table runtime state: compare-and-swap status transitions and the evaluator's verdicts. Flush, never commit."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, Update, and_, bindparam, case, null, update
from sqlalchemy.orm import Session

from lakewarden.domain.states import check_table
from lakewarden.domain.tables import TableStatus
from lakewarden.store.database import utcnow
from lakewarden.store.models import TableRuntimeRow


def transition_table(session: Session, table_id: int, expected: TableStatus, new: TableStatus, **fields: Any) -> bool:
    """Move a table from `expected` to `new`; False (and nothing written) when it is no longer in `expected`."""
    check_table(expected, new)
    result = session.execute(
        update(TableRuntimeRow)
        .where(TableRuntimeRow.table_id == table_id, TableRuntimeRow.status_code == int(expected))
        .values(status_code=int(new), status_changed_at=utcnow(), **fields)
        .execution_options(synchronize_session=False)
    )
    session.flush()
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def transition_tables(session: Session, table_ids: list[int], expected: TableStatus, new: TableStatus) -> set[int]:
    """`transition_table` for many tables in one statement: the ids of those that were in `expected` and moved."""
    check_table(expected, new)
    if not table_ids:
        return set()
    statement = (
        update(TableRuntimeRow)
        .where(TableRuntimeRow.table_id.in_(table_ids), TableRuntimeRow.status_code == int(expected))
        .values(status_code=int(new), status_changed_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if session.get_bind().dialect.update_returning:
        moved = set(session.scalars(statement.returning(TableRuntimeRow.table_id)))
    else:  # one by one, each a compare-and-swap
        moved = {table_id for table_id in table_ids if transition_table(session, table_id, expected, new)}
    session.flush()
    return moved


class Verdict(NamedTuple):
    """The evaluator's verdict on a table, to store: of `snapshot_id`, due again at `next_evaluation_at` (None:
    only when the table or its configuration changes), made from the table's record as read at `read_at`."""

    table_id: int
    snapshot_id: int | None
    evaluation: dict[str, Any]
    next_evaluation_at: datetime | None
    read_at: datetime


def _verdict_statement(again: bool) -> Update:
    """One verdict's UPDATE, for an executemany. A commit or a process's end stored after the verdict's record
    was read set the table due anew (a moment later than `read_at`); the verdict is of the table as read, so it
    keeps that moment when it is earlier than its own rather than pushing the change back to a recheck."""
    table = cast(Table, TableRuntimeRow.__table__)
    stored = table.c.next_evaluation_at
    moment = stored.type
    read_at = bindparam("b_read_at", type_=moment)
    changed_since = stored > read_at
    if again:
        own = bindparam("b_again", type_=moment)
        due = case((and_(changed_since, stored < own), stored), else_=own)
    else:
        due = case((changed_since, stored), else_=null())
    return (
        update(table)
        .where(table.c.table_id == bindparam("b_table_id"))
        .values(
            evaluated_snapshot_id=bindparam("b_snapshot_id"),
            evaluated_at=bindparam("b_now", type_=moment),
            evaluation=bindparam("b_evaluation", type_=table.c.evaluation.type),
            next_evaluation_at=due,
        )
    )


_VERDICT_WITH_AGAIN = _verdict_statement(again=True)
_VERDICT_WITHOUT = _verdict_statement(again=False)


def save_evaluations(session: Session, verdicts: list[Verdict]) -> None:
    """Store verdicts: at most two executemany statements, one for those due again at a moment, one for those due
    only on a change."""
    now = utcnow()

    def row(verdict: Verdict) -> dict[str, object]:
        return {
            "b_table_id": verdict.table_id,
            "b_snapshot_id": verdict.snapshot_id,
            "b_now": now,
            "b_evaluation": verdict.evaluation,
            "b_read_at": verdict.read_at,
        }

    with_again = [{**row(v), "b_again": v.next_evaluation_at} for v in verdicts if v.next_evaluation_at is not None]
    without = [row(v) for v in verdicts if v.next_evaluation_at is None]
    for statement, batch in ((_VERDICT_WITH_AGAIN, with_again), (_VERDICT_WITHOUT, without)):
        if batch:
            session.execute(statement, batch)
    session.flush()
