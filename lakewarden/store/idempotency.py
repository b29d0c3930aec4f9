"""Idempotency keys of the REST catalog (api/idempotency.py): claimed, finalized with the answer, replayed."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from lakewarden.store.database import as_utc, utcnow
from lakewarden.store.models import IdempotencyRow


def claim(
    session: Session, key: str, principal: str, method: str, path: str, abandoned_after: timedelta
) -> IdempotencyRow | None:
    """Claim the key for a request about to run (None), or the row of the request that has it: finalized
    (replay its answer) or still running. A claim older than `abandoned_after` with no answer was left by a
    server that died: it is taken over."""
    existing = session.get(IdempotencyRow, key)
    if existing is not None:
        if existing.status is None and utcnow() - as_utc(existing.created_at) > abandoned_after:
            existing.principal, existing.method, existing.path, existing.created_at = principal, method, path, utcnow()
            return None
        return existing
    try:
        with session.begin_nested():
            session.add(IdempotencyRow(key=key, principal=principal, method=method, path=path, created_at=utcnow()))
    except IntegrityError:  # claimed at the same moment by another request
        return session.get(IdempotencyRow, key)
    return None


def finalize(session: Session, key: str, status: int, content_type: str | None, body: str) -> None:
    row = session.get(IdempotencyRow, key)
    if row is not None:
        row.status, row.content_type, row.body = status, content_type, body


def release(session: Session, key: str) -> None:
    """The request ended without a final answer (5xx): a retry runs it again."""
    row = session.get(IdempotencyRow, key)
    if row is not None and row.status is None:
        session.delete(row)


def expire(session: Session, lifetime: timedelta) -> int:
    result = session.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < utcnow() - lifetime))
    return int(result.rowcount)  # type: ignore[attr-defined]
