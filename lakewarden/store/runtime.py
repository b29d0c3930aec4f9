"""Table runtime state: compare-and-swap status transitions and the evaluator's verdicts. Flush, never commit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
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
