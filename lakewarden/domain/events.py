"""The REST catalog's events: what a change of a namespace, table or view tells its listeners.

An event is written into the outbox in the transaction of its change and read back by every listener (the
in-process subscribers, the leader's outbox tail, `GET /api/v1/events`). One type on both sides means a kind or a
payload key that one side does not know fails where it is made, not silently in a listener.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict


class EventType(StrEnum):
    NAMESPACE_CREATED = "namespace-created"
    NAMESPACE_UPDATED = "namespace-updated"
    NAMESPACE_DROPPED = "namespace-dropped"
    TABLE_CREATED = "table-created"
    TABLE_COMMITTED = "table-committed"
    TABLE_RENAMED = "table-renamed"
    TABLE_DROPPED = "table-dropped"
    VIEW_CREATED = "view-created"
    VIEW_REPLACED = "view-replaced"
    VIEW_RENAMED = "view-renamed"
    VIEW_DROPPED = "view-dropped"


class MovedFrom(TypedDict, total=False):
    """A rename's old name: the namespace's levels and the table's or the view's name."""

    namespace: list[str]
    table: str
    view: str


# What an event carries beyond its names; keys absent are unknown, not empty. The functional form because a
# rename's old name is stored as `from`, the key listeners have always read.
EventPayload = TypedDict(
    "EventPayload",
    {
        "metadata_location": str | None,  # the table's or view's metadata after the change
        "version": int,  # its version on the timeline
        "operation": str,  # the commit's operation: create, append, overwrite, replace, delete, ...
        "snapshot_id": int | None,
        "parent_snapshot_id": int | None,
        "summary": dict[str, Any],  # the new snapshot's summary
        "registered": bool,  # a table registered from an existing metadata file
        "forwarded": bool,  # a change made in the catalog of record of a forwarded catalog
        "purge": bool,  # a dropped table whose files are purged
        "properties": dict[str, str],  # a namespace's properties as created
        "updated": list[str],  # a namespace's property keys set
        "removed": list[str],  # a namespace's property keys removed
        "from": MovedFrom,  # a rename's old name
    },
    total=False,
)
PAYLOAD_KEYS = frozenset(EventPayload.__annotations__)


class InvalidEvent(ValueError):
    """An event of a kind, or with a payload key, that the events' type does not know."""


@dataclass(frozen=True, slots=True)
class CatalogEvent:
    """One change as its listeners hear of it. `event_id` is the outbox's; `namespace` the levels. Made by
    `event_of`, which checks it."""

    event_id: int
    type: EventType
    catalog: str
    namespace: tuple[str, ...]
    table: str | None  # the table's or view's name; None for a namespace's event
    payload: EventPayload

    @property
    def is_table(self) -> bool:
        return self.type.startswith("table-")


def checked(kind: str, payload: dict[str, Any]) -> EventType:
    """The type of an event about to be written, once its kind and payload keys are known ones."""
    try:
        event_type = EventType(kind)
    except ValueError:
        raise InvalidEvent(f"event type {kind!r} is none of {', '.join(EventType)}") from None
    unknown = payload.keys() - PAYLOAD_KEYS
    if unknown:
        raise InvalidEvent(f"event payload keys {sorted(unknown)} are not part of an event")
    return event_type


def event_of(
    event_id: int, kind: str, catalog: str, namespace: tuple[str, ...], table: str | None, payload: dict[str, Any]
) -> CatalogEvent:
    """An event from its stored form (a row of the outbox, or the values just written), checked."""
    return CatalogEvent(event_id, checked(kind, payload), catalog, namespace, table, typing.cast(EventPayload, payload))
