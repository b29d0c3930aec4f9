"""The maintenance trigger reads only the tables whose maintenance can be due (`table_runtime.next_maintenance_at`,
migration 0021): a table that does not change is not loaded again until a time-based trigger can fire; a new
snapshot makes its actions due once their interval has passed; changed schedules make every table due once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakewarden.api.context import ServerContext
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.maintenance import AutoTagConfig, next_tag_trigger
from lakewarden.domain.processes import Action
from lakewarden.domain.retention import Policy, Ref, Snapshot, next_expiry_at, plan_expiry
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.store import processes as process_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import utcnow
from lakewarden.store.models import TableRuntimeRow
from lakewarden.store.tables import TableRecord

HOUR_MS = 3600_000


def test_the_next_expiry_is_when_the_first_unkept_snapshot_ages_past_the_keep_duration() -> None:
    s = [Snapshot(1, None, 1000), Snapshot(2, 1, 2000), Snapshot(3, 2, 5000), Snapshot(4, 3, 9000)]
    keep_two = Policy(keep_ms=HOUR_MS, min_count=2)
    main, tag = Ref("main", 4), Ref("t", 1, branch=False)
    year = 365 * 24 * HOUR_MS
    # main at 4, keeping the newest 2 ancestors (4, 3): 1 and 2 may go, 1 first
    at = next_expiry_at(s, [main], keep_two, 0, year)
    assert at == 1000 + HOUR_MS + 1
    assert plan_expiry(s, [main], keep_two, at - 1).expired == []  # not a millisecond before
    assert plan_expiry(s, [main], keep_two, at).expired == [1]
    # a tag's head is never expired: 2 is next
    assert next_expiry_at(s, [main, tag], keep_two, 0, year) == 2000 + HOUR_MS + 1
    # everything kept (refs and min-count): only a change can bring an expiry
    assert next_expiry_at(s, [main, tag], Policy(keep_ms=HOUR_MS, min_count=3), 0, year) is None
    assert next_expiry_at([Snapshot(9, None, 1)], [Ref("main", 9)], keep_two, 0, year) is None
    assert next_expiry_at([], [], keep_two, 0, year) is None
    # nothing is looked for past the horizon
    assert next_expiry_at(s, [main], keep_two, 0, HOUR_MS) is None


def test_the_next_tag_trigger_follows_the_period_and_offset() -> None:
    hourly = AutoTagConfig("hourly", timedelta(minutes=10), timedelta(0), -1, "'tag-'yyyyMMddHH")
    assert next_tag_trigger(hourly, datetime(2026, 11, 25, 6, 9, 59, tzinfo=UTC)) == datetime(
        2026, 11, 25, 6, 10, tzinfo=UTC
    )
    assert next_tag_trigger(hourly, datetime(2026, 11, 25, 6, 10, tzinfo=UTC)) == datetime(
        2026, 11, 25, 7, 10, tzinfo=UTC
    )
    daily = AutoTagConfig("daily", timedelta(0), timedelta(0), -1, "'tag-'yyyyMMdd")
    assert next_tag_trigger(daily, datetime(2026, 11, 25, 23, 59, tzinfo=UTC)) == datetime(2026, 11, 26, tzinfo=UTC)


@dataclass
class Lake:
    client: TestClient
    ctx: ServerContext
    catalog: Any
    spec: CatalogSpec
    loads: list[str]

    def name(self, table: str) -> TableIdentifier:
        return TableIdentifier(self.spec.name, "db", table)

    def append(self, table: str, *ids: int) -> None:
        self.catalog.load_table(f"db.{table}").append(pa.table({"id": pa.array(ids, pa.int64())}))

    def refresh(self) -> None:
        assert self.client.post(f"/api/v1/catalogs/{self.spec.name}/refresh").status_code < 300

    def runtime(self, table: str) -> TableRuntimeRow:
        with self.ctx.db.read() as session:
            return table_store.get_table(session, self.name(table)).runtime

    def processes(self, table: str) -> list[str]:
        with self.ctx.db.read() as session:
            rec = table_store.get_table(session, self.name(table))
            return [p.action for p in process_store.list_processes(session, table_id=rec.runtime.table_id)]

    def look(self) -> list[str]:
        """One pass of the trigger; the tables it loaded."""
        self.loads.clear()
        self.ctx.trigger.run_once()
        return sorted(self.loads)


@pytest.fixture
def lake(client: TestClient, sql_catalog: CatalogSpec, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    iceberg = open_catalog(sql_catalog, initialize=True)
    iceberg.create_namespace("db")
    body = {"name": sql_catalog.name, "type": "sql", "properties": dict(sql_catalog.properties)}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    loads: list[str] = []
    load = ctx.engine.load

    def counted(rec: TableRecord, spec: CatalogSpec) -> Any:
        loads.append(rec.identifier.table_name)
        return load(rec, spec)

    monkeypatch.setattr(ctx.engine, "load", counted)
    ctx.trigger.schedules = {
        Action.EXPIRE_SNAPSHOTS: (True, timedelta(0)),
        Action.REWRITE_MANIFESTS: (True, timedelta(0)),
        Action.CLEAN_DANGLING_DELETE_FILES: (True, timedelta(0)),
    }
    yield Lake(client, ctx, iceberg, sql_catalog, loads)


def _table(lake: Lake, name: str, **properties: str) -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    lake.catalog.create_table(f"db.{name}", schema, properties={"rewrite-manifests.enabled": "false", **properties})


def test_a_table_that_does_not_change_is_not_read_again(lake: Lake) -> None:
    _table(lake, "quiet")
    lake.append("quiet", 1)
    lake.refresh()
    assert lake.look() == ["quiet"]  # new: looked at once, one load for all its actions
    runtime = lake.runtime("quiet")
    assert runtime.next_maintenance_at is None  # one snapshot, no deletes: only a change can bring work
    assert set(runtime.maintenance or {}) == {"expire-snapshots", "clean-dangling-delete-files"}
    assert lake.look() == [] and lake.look() == []
    assert lake.processes("quiet") == []
    lake.refresh()  # nothing moved: still nothing to read
    assert lake.look() == []


def test_a_new_snapshot_makes_its_actions_due_and_a_process_follows(lake: Lake) -> None:
    _table(lake, "busy", **{"snapshot.keep.duration": "0min"})
    lake.append("busy", 1)
    lake.refresh()
    assert lake.look() == ["busy"]
    assert lake.processes("busy") == []
    lake.append("busy", 2)
    lake.refresh()  # the explorer records the new snapshot
    assert lake.runtime("busy").next_maintenance_at is not None
    assert lake.look() == ["busy"]
    assert lake.processes("busy") == ["expire-snapshots"]  # the first snapshot is expirable at once


def test_an_expiry_is_due_when_the_oldest_snapshot_ages_past_the_keep_duration(lake: Lake) -> None:
    _table(lake, "aging", **{"snapshot.keep.duration": "1h"})
    lake.append("aging", 1)
    lake.append("aging", 2)
    lake.refresh()
    assert lake.look() == ["aging"]
    assert lake.processes("aging") == []
    first = min(s.timestamp_ms for s in lake.catalog.load_table("db.aging").metadata.snapshots)
    due = lake.runtime("aging").next_maintenance_at
    assert due is not None
    assert due.replace(tzinfo=UTC) == datetime.fromtimestamp((first + HOUR_MS + 1) / 1000, UTC)
    assert lake.look() == []  # not before
    page = lake.client.get(f"/api/v1/tables/{lake.spec.name}/db/aging").json()
    shown = {m["action"]: m for m in page["maintenance"]}["expire-snapshots"]
    assert datetime.fromisoformat(shown["work_expected_at"]) == due.replace(tzinfo=UTC)
    assert shown["checked_at"] is not None


def test_the_interval_since_the_last_look_holds_for_a_changing_table(lake: Lake) -> None:
    lake.ctx.trigger.schedules = {Action.EXPIRE_SNAPSHOTS: (True, timedelta(hours=1))}
    _table(lake, "stream", **{"snapshot.keep.duration": "0min"})
    lake.append("stream", 1)
    lake.refresh()
    assert lake.look() == ["stream"]
    lake.append("stream", 2)
    lake.refresh()
    assert lake.look() == []  # changed, but looked at within the hour
    due = lake.runtime("stream").next_maintenance_at
    assert due is not None and timedelta(minutes=59) < due.replace(tzinfo=UTC) - datetime.now(UTC) <= timedelta(hours=1)


def test_a_change_while_the_trigger_looks_is_not_lost(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    _table(lake, "racy")
    lake.append("racy", 1)
    lake.refresh()
    load = lake.ctx.engine.load

    def load_then_commit(rec: TableRecord, spec: CatalogSpec) -> Any:
        table = load(rec, spec)
        lake.append("racy", 2)  # a writer commits while the trigger inspects the old metadata
        lake.refresh()
        return table

    monkeypatch.setattr(lake.ctx.engine, "load", load_then_commit)
    lake.ctx.trigger.run_once()
    runtime = lake.runtime("racy")
    assert runtime.next_maintenance_at is not None, "the new snapshot's look was dropped"
    assert all(entry["next"] == entry["checked"] for entry in (runtime.maintenance or {}).values())


def test_changed_schedules_make_every_table_due_once(lake: Lake) -> None:
    lake.ctx.trigger.schedules = {Action.EXPIRE_SNAPSHOTS: (True, timedelta(0))}
    _table(lake, "a")
    _table(lake, "b")
    lake.append("a", 1)
    lake.append("b", 1)
    lake.refresh()
    assert lake.look() == ["a", "b"]
    assert lake.look() == []
    trigger = type(lake.ctx.trigger)(lake.ctx.db, lake.ctx.engine, dict(lake.ctx.trigger.schedules))
    lake.ctx.trigger = trigger  # a restart with the same schedules: nothing to read
    assert lake.look() == []
    turned_on = {**trigger.schedules, Action.CLEAN_DANGLING_DELETE_FILES: (True, timedelta(hours=2))}
    lake.ctx.trigger = type(trigger)(lake.ctx.db, lake.ctx.engine, turned_on)
    assert lake.look() == ["a", "b"]
    assert lake.look() == []


def _set_status(lake: Lake, table: str, status: TableStatus) -> None:
    with lake.ctx.db.write() as session:
        table_store.get_table(session, lake.name(table)).runtime.status_code = int(status)


def _set_evaluated(lake: Lake, table: str) -> None:
    with lake.ctx.db.write() as session:
        runtime = table_store.get_table(session, lake.name(table)).runtime
        runtime.evaluated_at = utcnow()
        runtime.evaluated_snapshot_id = runtime.current_snapshot_id


def test_manifests_are_not_rewritten_while_self_optimizing_runs_on_the_table(lake: Lake) -> None:
    lake.ctx.trigger.schedules = {Action.REWRITE_MANIFESTS: (True, timedelta(0))}
    _table(lake, "merging", **{"rewrite-manifests.enabled": "true", "rewrite-manifests.trigger.manifest-count": "2"})
    lake.append("merging", 1)
    lake.append("merging", 2)
    lake.refresh()
    assert lake.look() == ["merging"]
    assert lake.processes("merging") == []  # new to lakewarden: its first verdict may make it pending
    _set_evaluated(lake, "merging")
    _set_status(lake, "merging", TableStatus.MINOR_OPTIMIZING)
    assert lake.look() == ["merging"]
    assert lake.processes("merging") == []  # its commit would make the optimizing commit start over
    _set_status(lake, "merging", TableStatus.PENDING)  # planned by nobody yet: nothing to conflict with
    assert lake.look() == ["merging"]
    assert lake.processes("merging") == ["rewrite-manifests"]
