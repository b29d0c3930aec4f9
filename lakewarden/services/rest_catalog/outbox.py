"""The REST catalog's events: every change (a namespace or table created, committed, renamed, dropped; a view's)
is written into the outbox in the transaction that makes it, and handed to the in-process subscribers once that
transaction committed. Other nodes and outside listeners read the outbox itself (services/tables/changes.py's
OutboxTail, `GET /api/v1/events`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.store import rest_catalog as store

log = logging.getLogger(__name__)
Subscriber = Callable[[CatalogEvent], None]


class Outbox:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    @staticmethod
    def write(
        session: Session, kind: EventType, catalog: str, namespace: str, table: str | None, payload: dict[str, Any]
    ) -> CatalogEvent:
        """An event written in the caller's transaction, once its type and payload checked (InvalidEvent);
        `publish` it once that transaction committed."""
        return store.add_event(session, kind, catalog, namespace, table, payload)

    def publish(self, events: Sequence[CatalogEvent]) -> None:
        """Hand events, once their transaction committed, to the in-process subscribers (a failing subscriber is
        logged, and the others still hear of the event)."""
        for event in events:
            for subscriber in self._subscribers:
                try:
                    subscriber(event)
                except Exception:
                    log.exception("event subscriber failed on %s", event.type)
