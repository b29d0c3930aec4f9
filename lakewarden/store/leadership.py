"""The leader's lease and the nodes (high availability on PostgreSQL; services/leadership.py).

Times are the database's, so the nodes' clocks do not matter. The lease row is locked FOR UPDATE while it is taken
over or renewed and FOR SHARE while a leader's write is checked: a takeover waits for the old leader's checked
transactions, and later ones see the new epoch and are refused. A transaction holding the row may idle for at most
a lease, so a leader paused inside one cannot hold the lock for good."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from lakewarden.store.database import as_utc
from lakewarden.store.models import LeaseRow, NodeRow

LEASE = "ams"


@dataclass(frozen=True)
class Lease:
    holder: str
    epoch: int
    expires_at: datetime
    now: datetime  # the database's time when it was read

    @property
    def live(self) -> bool:
        return self.expires_at > self.now


def _now(session: Session) -> datetime:
    """The database's time (PostgreSQL's now(): the transaction's start)."""
    now = session.scalar(select(func.now()))
    assert now is not None
    return as_utc(now)


def bound_idle(session: Session, lease: timedelta) -> None:
    """The server ends this transaction (and its connection) if it idles longer than a lease: its lock on the
    lease row cannot outlive a paused holder by more than that. A leader's transaction idle that long has lost
    its lease anyway (its own renewal waits on the same row)."""
    if session.get_bind().dialect.name == "postgresql":
        millis = str(int(lease.total_seconds() * 1000))
        session.execute(select(func.set_config("idle_in_transaction_session_timeout", millis, True)))


def acquire_or_renew(session: Session, node_id: str, epoch: int | None, lease: timedelta) -> int | None:
    """Renew this node's lease (held with `epoch`), or take it if it expired; the epoch it holds now, or None
    when another node holds a live lease (or took it over: the caller is deposed)."""
    bound_idle(session, lease)
    now = _now(session)
    row = session.scalars(select(LeaseRow).where(LeaseRow.name == LEASE).with_for_update()).first()
    if row is None:
        try:
            with session.begin_nested():
                session.add(LeaseRow(name=LEASE, holder=node_id, epoch=1, expires_at=now + lease, acquired_at=now))
        except IntegrityError:  # another node created it first
            return None
        return 1
    if row.holder == node_id and row.epoch == epoch:
        row.expires_at = now + lease
        return epoch
    if as_utc(row.expires_at) > as_utc(now):
        return None
    row.holder, row.epoch, row.expires_at, row.acquired_at = node_id, row.epoch + 1, now + lease, now
    session.flush()
    return row.epoch


def release(session: Session, node_id: str, epoch: int) -> None:
    """A leader stopping gives its lease up at once, so another node need not wait for it to expire."""
    row = session.scalars(select(LeaseRow).where(LeaseRow.name == LEASE).with_for_update()).first()
    if row is not None and row.holder == node_id and row.epoch == epoch:
        row.expires_at = _now(session)


def fencing_epoch(session: Session, lease: timedelta) -> int | None:
    """The current epoch, with the lease row share-locked until the transaction ends."""
    bound_idle(session, lease)
    return session.scalar(select(LeaseRow.epoch).where(LeaseRow.name == LEASE).with_for_update(read=True))


def current_lease(session: Session) -> Lease | None:
    row = session.get(LeaseRow, LEASE)
    if row is None:
        return None
    return Lease(row.holder, row.epoch, as_utc(row.expires_at), as_utc(_now(session)))


def announce(session: Session, node_id: str, url: str, started_at: datetime) -> None:
    row = session.get(NodeRow, node_id)
    now = _now(session)
    if row is None:
        session.add(NodeRow(node_id=node_id, url=url, started_at=started_at, last_seen_at=now))
    else:
        row.url, row.last_seen_at = url, now
    session.flush()


def leave(session: Session, node_id: str) -> None:
    row = session.get(NodeRow, node_id)
    if row is not None:
        session.delete(row)


def nodes(session: Session, seen_within: timedelta) -> list[NodeRow]:
    """The nodes that announced themselves lately, oldest first."""
    since = _now(session) - seen_within
    query = select(NodeRow).where(NodeRow.last_seen_at >= since).order_by(NodeRow.started_at)
    return list(session.scalars(query))


def node_url(session: Session, node_id: str) -> str | None:
    row = session.get(NodeRow, node_id)
    return None if row is None else row.url
