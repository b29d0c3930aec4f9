"""What a service remembers across restarts and nodes: one JSON value per name."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from lakewarden.store.database import utcnow
from lakewarden.store.models import ServiceStateRow


def get_state(session: Session, name: str) -> dict[str, Any] | None:
    row = session.get(ServiceStateRow, name)
    return None if row is None else dict(row.value)


def put_state(session: Session, name: str, value: dict[str, Any]) -> None:
    row = session.get(ServiceStateRow, name)
    if row is None:
        session.add(ServiceStateRow(name=name, value=value, updated_at=utcnow()))
    else:
        row.value, row.updated_at = value, utcnow()
    session.flush()
