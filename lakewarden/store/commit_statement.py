"""A single table's commit in the fewest steps each system database allows: the pointer's compare-and-swap, its
timeline entry, its outbox event (and, on PostgreSQL, the other nodes' notification). TableCommits._swap_all
runs it when one table changes; multi-table commits and staged creates are a transaction of store/rest_catalog.py's
functions. Both write the same rows.

- PostgreSQL: one statement in autocommit (`_swap_and_record_statement`), one round trip.
- SQLite: three statements in one transaction on the driver's connection itself (`_driver_statements`,
  Driver.write, store/driver.py): SQLAlchemy's Session and Connection cost a single-row write several times the
  write itself.
"""

from __future__ import annotations

import functools
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    Select,
    String,
    Table,
    Text,
    bindparam,
    cast,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.sql.dml import Insert, Update

from lakewarden.domain.errors import WouldWait
from lakewarden.domain.events import CatalogEvent, EventType, checked
from lakewarden.store.database import Database, utcnow
from lakewarden.store.models import CommitRow, EventRow, IcebergTableRow
from lakewarden.store.rest_catalog import EVENTS_CHANNEL, event

_COMMITS = typed(Table, CommitRow.__table__)
_EVENTS = typed(Table, EventRow.__table__)

_COMMIT_FIELDS = ("operation", "snapshot_id", "parent_snapshot_id", "summary")


@functools.cache
def _swap_and_record_statement() -> Select[Any]:
    """A table's pointer compare-and-swapped, its timeline entry and its event written, and the other nodes
    notified, as one PostgreSQL statement: the swap is a data-modifying CTE that the two inserts select from,
    so they write a row only when the swap matched one. In autocommit it is its own transaction: one round trip
    where the same work in a transaction takes seven (BEGIN, the swap, two inserts, the notify, COMMIT and the
    pool's ping). Returns the event's id, or no row when another commit won the swap. Its parameters are named
    as no column is (k_: the row swapped, v_: values): an UPDATE takes a parameter named as one of its table's
    columns for a value to set."""
    pointers = typed(Table, IcebergTableRow.__table__)
    key = (
        pointers.c.catalog_name == bindparam("k_catalog", type_=String),
        pointers.c.namespace == bindparam("k_namespace", type_=String),
        pointers.c.table_name == bindparam("k_table", type_=String),
    )
    now = bindparam("v_now", type_=DateTime(timezone=True))
    swapped = (
        update(pointers)
        .where(*key, pointers.c.metadata_location == bindparam("k_expected", type_=Text))
        .where(pointers.c.version == bindparam("k_version", type_=Integer))
        .values(metadata_location=bindparam("v_location", type_=Text), version=bindparam("v_version"), updated_at=now)
        .returning(pointers.c.version)
        .cte("swapped")
    )
    same = (
        bindparam("k_catalog", type_=String),
        bindparam("k_namespace", type_=String),
        bindparam("k_table", type_=String),
    )
    entry = select(
        *same,
        swapped.c.version,
        bindparam("v_operation", type_=String),
        bindparam("v_snapshot", type_=BigInteger),
        bindparam("v_parent", type_=BigInteger),
        bindparam("v_summary", type_=_COMMITS.c.summary.type),
        bindparam("v_location", type_=Text),
        bindparam("v_client", type_=String),
        now,
    )
    columns = ["catalog_name", "namespace", "table_name", "version", *_COMMIT_FIELDS, "metadata_location", "client"]
    timeline = insert(_COMMITS).from_select([*columns, "committed_at"], entry).cte("timeline")
    announced = select(
        bindparam("v_type", type_=String), *same, bindparam("v_payload", type_=_EVENTS.c.payload.type), now
    ).select_from(swapped)
    event = (
        insert(_EVENTS)
        .from_select(["type", "catalog_name", "namespace", "table_name", "payload", "created_at"], announced)
        .returning(_EVENTS.c.event_id)
        .cte("event")
    )
    notified = func.pg_notify(EVENTS_CHANNEL, cast(event.c.event_id, Text))
    return select(event.c.event_id, cast(notified, Text)).add_cte(timeline)


@functools.cache
def _driver_statements() -> tuple[Update, Insert, Insert]:
    """SQLite: the swap, the timeline entry and the event as three statements of one transaction, with the same
    parameters as `_swap_and_record_statement`'s (the timeline's version is the swap's new one, known here)."""
    pointers = typed(Table, IcebergTableRow.__table__)
    now = bindparam("v_now", type_=DateTime(timezone=True))
    catalog, namespace, table = (bindparam(f"k_{k}", type_=String) for k in ("catalog", "namespace", "table"))
    swap = (
        update(pointers)
        .where(pointers.c.catalog_name == catalog, pointers.c.namespace == namespace, pointers.c.table_name == table)
        .where(pointers.c.metadata_location == bindparam("k_expected", type_=Text))
        .where(pointers.c.version == bindparam("k_version", type_=Integer))
        .values(
            metadata_location=bindparam("v_location", type_=Text),
            version=bindparam("v_version", type_=Integer),
            updated_at=now,
        )
    )
    timeline = insert(_COMMITS).values(
        catalog_name=catalog,
        namespace=namespace,
        table_name=table,
        version=bindparam("v_version", type_=Integer),
        operation=bindparam("v_operation", type_=String),
        snapshot_id=bindparam("v_snapshot", type_=BigInteger),
        parent_snapshot_id=bindparam("v_parent", type_=BigInteger),
        summary=bindparam("v_summary", type_=_COMMITS.c.summary.type),
        metadata_location=bindparam("v_location", type_=Text),
        client=bindparam("v_client", type_=String),
        committed_at=now,
    )
    event = insert(_EVENTS).values(
        type=bindparam("v_type", type_=String),
        catalog_name=catalog,
        namespace=namespace,
        table_name=table,
        payload=bindparam("v_payload", type_=_EVENTS.c.payload.type),
        created_at=now,
    )
    return swap, timeline, event


def swap_and_record(
    db: Database,
    key: tuple[str, str, str],
    expected: str,
    version: int,
    new: str,
    client: str | None,
    details: dict[str, Any],
    wait: bool = True,
) -> CatalogEvent | None:
    """A single table's commit: the event it wrote, to publish, or None when another commit won the swap
    (nothing was written). `details`: the timeline entry's fields. Without `wait` it runs only where it cannot
    wait (SQLite, Driver.write), and raises WouldWait having written nothing otherwise."""
    catalog, namespace, table = key
    now = utcnow()
    payload = {"metadata_location": new, "version": version + 1, **details}
    checked(EventType.TABLE_COMMITTED, payload)
    arguments: dict[str, Any] = {
        "k_catalog": catalog,
        "k_namespace": namespace,
        "k_table": table,
        "k_expected": expected,
    }
    arguments |= {"k_version": version, "v_location": new, "v_version": version + 1, "v_now": now, "v_client": client}
    arguments |= {"v_type": "table-committed", "v_payload": payload, "v_operation": details["operation"]}
    arguments |= {"v_snapshot": details["snapshot_id"], "v_parent": details["parent_snapshot_id"]}
    arguments |= {"v_summary": details["summary"]}
    if db.driver.one_statements:
        if not wait:
            raise WouldWait("a PostgreSQL statement waits for its round trip")
        row = db.driver.one_statement(_swap_and_record_statement(), arguments)
        if row is None:
            return None
        event_id = row[0]
    else:
        swap, timeline, announce = _driver_statements()
        with db.driver.write(wait) as transaction:
            if transaction.execute(swap, arguments).rowcount != 1:
                transaction.abort()  # another commit won: nothing is written
                return None
            transaction.execute(timeline, arguments)
            event_id = transaction.execute(announce, arguments).lastrowid
    return event(event_id, "table-committed", catalog, namespace, table, payload)
