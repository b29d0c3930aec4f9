"""Table runtime state: compare-and-swap status transitions and the evaluator's verdicts. Flush, never commit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from lakewarden.domain.states import check_table
from lakewarden.domain.tables import TableStatus
from lakewarden.store.database import as_utc, utcnow
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


def next_evaluations(session: Session, table_ids: list[int]) -> dict[int, datetime | None]:
    """When each table is due for its next verdict, as stored now."""
    rows = session.execute(
        select(TableRuntimeRow.table_id, TableRuntimeRow.next_evaluation_at).where(
            TableRuntimeRow.table_id.in_(table_ids)
        )
    )
    return {table_id: None if due is None else as_utc(due) for table_id, due in rows}


def save_evaluations(session: Session, verdicts: list[tuple[int, int | None, dict[str, Any], datetime | None]]) -> None:
    """`save_evaluation` for many tables: (table id, snapshot id, verdict, next evaluation), one executemany."""
    if not verdicts:
        return
    now = utcnow()
    session.execute(
        update(TableRuntimeRow),
        [
            {
                "table_id": table_id,
                "evaluated_snapshot_id": snapshot_id,
                "evaluated_at": now,
                "evaluation": evaluation,
                "next_evaluation_at": again,
            }
            for table_id, snapshot_id, evaluation, again in verdicts
        ],
    )
    session.flush()


def save_evaluation(
    session: Session,
    table_id: int,
    snapshot_id: int | None,
    evaluation: dict[str, Any],
    next_evaluation_at: datetime | None = None,
) -> None:
    """The verdict on `snapshot_id`, and when to evaluate again if nothing else changes (None: never)."""
    session.execute(
        update(TableRuntimeRow)
        .where(TableRuntimeRow.table_id == table_id)
        .values(
            evaluated_snapshot_id=snapshot_id,
            evaluated_at=utcnow(),
            evaluation=evaluation,
            next_evaluation_at=next_evaluation_at,
        )
        .execution_options(synchronize_session=False)
    )
    session.flush()
