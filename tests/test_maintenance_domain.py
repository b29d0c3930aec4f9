"""Maintenance decisions from metadata alone (no Spark), the configuration, and the API's validation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from lakewarden.config import Config
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.durations import parse_duration
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey
from lakewarden.domain.maintenance import (
    MAINTENANCE_ACTIONS,
    MAINTENANCE_YIELDS,
    YIELD_WINDOW,
    AutoTagConfig,
    DataExpireConfig,
    ExpireSnapshotsConfig,
    MaintenanceState,
    OrphanFilesConfig,
    after_failures,
    dangling_delete_files,
    enabled,
    forbidding_setting,
    format_datetime,
    interval_override,
    maintenance_states,
    tag_due,
)
from lakewarden.domain.processes import Action
from lakewarden.domain.retention import Policy, Ref, Snapshot, plan_expiry
from lakewarden.domain.tables import TABLE_DEFAULTS

HOUR_MS = 3_600_000


def chain(*timestamps_h: int) -> list[Snapshot]:
    """Snapshots 1, 2, … each the parent of the next, committed at the given hours."""
    return [Snapshot(i + 1, i or None, t * HOUR_MS) for i, t in enumerate(timestamps_h)]


def test_expirable_snapshots_respect_cutoff_min_count_refs_and_protection() -> None:
    snapshots = chain(1, 2, 3, 4, 5)
    main = Ref("main", 5)

    def expired(refs: list[Ref], cutoff_h: int, min_count: int, bases: dict[int, str] | None = None) -> list[int]:
        return plan_expiry(snapshots, refs, Policy(keep_ms=0, min_count=min_count), cutoff_h * HOUR_MS, bases).expired

    assert expired([main], 4, 1) == [1, 2, 3]
    assert expired([main], 10, 3) == [1, 2]  # the newest 3 stay
    assert expired([main, Ref("t", 2, branch=False)], 10, 1) == [1, 3, 4]  # a tag
    assert expired([main], 10, 1, {3: "process 7"}) == [1, 2]  # a process's base, and everything newer
    assert expired([main], 0, 1) == []


def test_the_yield_window_is_read_and_turned_off_with_yielding() -> None:
    off = {MAINTENANCE_YIELDS: "false"}
    assert ExpireSnapshotsConfig.of(off).policy().yield_window_ms == 0
    assert ExpireSnapshotsConfig.of({YIELD_WINDOW: "15min"}).policy().yield_window_ms == 15 * 60_000
    # orphan cleanup keeps its own minimum age: the files of a kept base are referenced, so never orphans
    assert OrphanFilesConfig.of({"clean-orphan-file.min-existing-time-minutes": "10"}).min_existing == timedelta(
        minutes=10
    )


def test_amoro_defaults_and_bad_values_name_the_property() -> None:
    assert TABLE_DEFAULTS["snapshot.keep.duration"] == "720min" and TABLE_DEFAULTS["table-expire.enabled"] == "true"
    assert TABLE_DEFAULTS["clean-orphan-file.min-existing-time-minutes"] == "2880"
    assert TABLE_DEFAULTS["clean-orphan-file.enabled"] == "false" and TABLE_DEFAULTS["data-expire.level"] == "partition"
    assert ExpireSnapshotsConfig.of(TABLE_DEFAULTS) == ExpireSnapshotsConfig(
        timedelta(hours=12), 1, yield_window=timedelta(hours=1)
    )
    assert enabled(TABLE_DEFAULTS, Action.CLEAN_DANGLING_DELETE_FILES)
    assert not enabled(TABLE_DEFAULTS, Action.AUTO_CREATE_TAGS)
    assert interval_override({"table-expire.interval": "10min"}, Action.EXPIRE_SNAPSHOTS) == timedelta(minutes=10)
    assert interval_override({}, Action.EXPIRE_SNAPSHOTS) is None
    assert parse_duration("30d") == timedelta(days=30) and parse_duration("1500") == timedelta(seconds=1.5)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: ExpireSnapshotsConfig.of({"snapshot.keep.duration": "soon"}), "snapshot.keep.duration"),
        (lambda: ExpireSnapshotsConfig.of({"snapshot.keep.min-count": "0"}), "snapshot.keep.min-count"),
        (lambda: ExpireSnapshotsConfig.of({YIELD_WINDOW: "a while"}), YIELD_WINDOW),
        (lambda: ExpireSnapshotsConfig.of({MAINTENANCE_YIELDS: "maybe"}), MAINTENANCE_YIELDS),
        (lambda: enabled({"table-expire.enabled": "yes"}, Action.EXPIRE_SNAPSHOTS), "table-expire.enabled"),
        (lambda: DataExpireConfig.of({}), "data-expire.field"),
        (lambda: DataExpireConfig.of({"data-expire.field": "ts"}), "data-expire.retention-time"),
        (
            lambda: DataExpireConfig.of(
                {"data-expire.field": "ts", "data-expire.retention-time": "1d", "data-expire.level": "row"}
            ),
            "data-expire.level",
        ),
        (lambda: AutoTagConfig.of({"tag.auto-create.trigger.period": "weekly"}), "tag.auto-create.trigger.period"),
        (lambda: AutoTagConfig.of({"tag.auto-create.tag-format": "'t-'QQ"}), "tag.auto-create.tag-format"),
    ]
    for build, field in cases:
        with pytest.raises(InvalidField) as caught:
            build()
        assert caught.value.field == field


def test_dangling_delete_files() -> None:
    a, b, c = (PartitionKey(0, f"p={x}", (x,)) for x in "abc")
    data = [DataFile("a1", a, 10, 1, sequence=5), DataFile("b1", b, 10, 1, sequence=3)]
    deletes = [
        DeleteFile("pos-old", a, False, 1, 1, sequence=4),  # older than every data file of a
        DeleteFile("pos-same", a, False, 1, 1, sequence=5),  # applies to a1
        DeleteFile("eq-same", a, True, 1, 1, sequence=5),  # equality deletes need a newer sequence
        DeleteFile("eq-new", b, True, 1, 1, sequence=4),
        DeleteFile("nothing-left", c, False, 1, 1, sequence=9),  # no data file in c at all
        DeleteFile("dv-gone", b, False, 1, 1, sequence=9, referenced_data_file="b0"),  # names a removed file
        DeleteFile("dv-live", b, False, 1, 1, sequence=9, referenced_data_file="b1"),
    ]
    assert [d.path for d in dangling_delete_files(data, deletes)] == ["pos-old", "eq-same", "nothing-left", "dv-gone"]


def test_tag_due_for_the_last_period_on_the_snapshot_current_at_trigger_time() -> None:
    daily = AutoTagConfig.of({})
    assert (
        daily.tag_format == "'tag-'yyyyMMdd"
        and AutoTagConfig.of({"tag.auto-create.trigger.period": "hourly"}).tag_format == "'tag-'yyyyMMddHH"
    )
    midnight = datetime(2026, 11, 21, tzinfo=UTC)
    ms = int(midnight.timestamp() * 1000)
    snapshots = [Snapshot(1, None, ms - 7200_000), Snapshot(2, 1, ms - 60_000), Snapshot(3, 2, ms + 60_000)]
    plan = tag_due(daily, snapshots, [3, 2, 1], {"main": 3}, midnight + timedelta(minutes=5))
    assert plan is not None and (plan.name, plan.snapshot_id) == ("tag-20261120", 2)
    assert tag_due(daily, snapshots, [3, 2, 1], {"main": 3, "tag-20261120": 2}, midnight + timedelta(minutes=5)) is None
    assert tag_due(daily, snapshots, [3, 2, 1], {"main": 3}, midnight + timedelta(minutes=61)) is None  # too late
    late = AutoTagConfig.of({"tag.auto-create.trigger.offset.minutes": "30"})
    assert tag_due(late, snapshots, [3, 2, 1], {"main": 3}, midnight + timedelta(minutes=5)) is None  # not yet…
    plan = tag_due(late, snapshots, [3, 2, 1], {"main": 3}, midnight + timedelta(minutes=31))
    assert plan is not None and plan.snapshot_id == 3  # …then on what was current at 00:30
    assert format_datetime("'v'yyyy-MM-dd'T'HH", midnight) == "v2026-11-21T00"


def test_maintenance_schedules_in_the_server_config() -> None:
    config = Config.model_validate(
        {"ams": {"clean-orphan-files": {"enabled": True}, "expire-snapshots": {"interval": "10min"}}}
    )
    assert config.ams.clean_orphan_files.interval == timedelta(days=1)  # the action's own default stays
    assert config.ams.expire_snapshots.interval == timedelta(minutes=10) and config.ams.expire_snapshots.enabled
    assert config.ams.auto_create_tags.interval == timedelta(minutes=1)


def test_run_action_and_process_filters_validate_input(client: TestClient) -> None:
    from tests.test_scheduling import add_table, ctx_of

    add_table(ctx_of(client), "t")
    bad = client.post("/api/v1/tables/c/db/t/actions/vacuum")
    assert bad.status_code == 400 and "action" in bad.json()["error"]["message"]
    bad = client.post("/api/v1/tables/c/db/t/actions/optimizing")
    assert bad.status_code == 400
    bad = client.post("/api/v1/tables/c/db/t/actions/expire-snapshots", json={"dry_run": True})
    assert bad.status_code == 400 and "dry_run" in bad.json()["error"]["message"]
    bad = client.post("/api/v1/tables/c/db/t/actions/clean-orphan-files", json={"dry": True})
    assert bad.status_code in (400, 422)
    assert client.post("/api/v1/tables/c/db/nope/actions/expire-snapshots").status_code == 404
    assert client.get("/api/v1/processes", params={"action": "vacuum"}).status_code == 400
    assert client.get("/api/v1/processes", params={"status": "done"}).status_code == 400
    assert client.get("/api/v1/processes", params={"action": "expire-snapshots", "status": "running"}).json() == []


@pytest.mark.parametrize(
    ("gc", "forbidden"),
    [(None, False), ("true", False), ("TRUE", False), ("false", True), ("False", True), ("no", True), ("", True)],
)
def test_gc_setting_forbids_what_deletes_files(gc: str | None, forbidden: bool) -> None:
    """As Iceberg reads gc.enabled (Java's Boolean.parseBoolean: only "true", in any case, is true)."""
    props = {} if gc is None else {"gc.enabled": gc}
    for action in MAINTENANCE_ACTIONS:
        why = forbidding_setting(props, action)
        if forbidden and action in (Action.EXPIRE_SNAPSHOTS, Action.CLEAN_ORPHAN_FILES):
            assert why is not None and why.startswith(f"gc.enabled={gc} on the table")
        else:
            assert why is None


def test_maintenance_states_say_what_blocks_each_action() -> None:
    states = {s.action: s for s in maintenance_states({"gc.enabled": "false", "rewrite-manifests.enabled": "maybe"})}
    assert states[Action.EXPIRE_SNAPSHOTS].enabled is True
    assert "Iceberg does not expire snapshots" in (states[Action.EXPIRE_SNAPSHOTS].blocked_by or "")
    assert states[Action.CLEAN_ORPHAN_FILES].enabled is False  # off by default, and forbidden anyway
    assert states[Action.REWRITE_MANIFESTS].blocked_by == "rewrite-manifests.enabled: 'maybe' must be true or false"
    assert states[Action.CLEAN_DANGLING_DELETE_FILES] == MaintenanceState(
        Action.CLEAN_DANGLING_DELETE_FILES, True, None
    )


def test_a_failing_action_backs_off_doubling_its_interval_up_to_a_day() -> None:
    hour = timedelta(hours=1)
    assert [after_failures(hour, n) for n in range(7)] == [
        hour,
        2 * hour,
        4 * hour,
        8 * hour,
        16 * hour,
        *[24 * hour] * 2,
    ]
    assert after_failures(timedelta(days=3), 5) == timedelta(days=3)  # never shorter than the interval itself
    assert after_failures(timedelta(minutes=1), 10_000) == timedelta(days=1)


def test_the_trigger_backs_off_a_failing_action_and_shows_it(client: TestClient, sql_catalog: CatalogSpec) -> None:
    """Scheduled orphan cleanup whose last processes failed is not retried every interval: the trigger waits
    the interval doubled per failure, and the table's page says so; a success ends the streak."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from lakewarden.api.context import ServerContext
    from lakewarden.domain.states import ProcessStatus
    from lakewarden.domain.tables import TableIdentifier
    from lakewarden.metadata.catalogs import open_catalog
    from lakewarden.store import processes as process_store
    from lakewarden.store import tables as table_store
    from lakewarden.store.models import ProcessRow, ProcessStreakRow, TableRuntimeRow, TaskRow

    ctx: ServerContext = client.app.state.context  # type: ignore[attr-defined]
    iceberg = open_catalog(sql_catalog, initialize=True)
    iceberg.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    iceberg.create_table("db.t", schema, properties={"clean-orphan-file.enabled": "true"})
    body = {"name": sql_catalog.name, "type": "sql", "properties": dict(sql_catalog.properties)}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    assert client.post(f"/api/v1/catalogs/{sql_catalog.name}/refresh").status_code < 300
    trigger = ctx.trigger
    trigger.schedules = {Action.CLEAN_ORPHAN_FILES: (True, timedelta(minutes=1))}
    name = TableIdentifier(sql_catalog.name, "db", "t")

    def history(*statuses_and_ages: tuple[ProcessStatus, float]) -> None:
        """Processes of the action on the table, oldest first, each planned `age` minutes ago."""
        with ctx.db.write() as session:
            rec = table_store.get_table(session, name)
            ids = [p.process_id for p in session.query(ProcessRow).filter(ProcessRow.table_id == rec.runtime.table_id)]
            session.query(TaskRow).filter(TaskRow.process_id.in_(ids)).delete()
            session.query(ProcessRow).filter(ProcessRow.process_id.in_(ids)).delete()
            session.query(ProcessStreakRow).filter(ProcessStreakRow.table_id == rec.runtime.table_id).delete()
            for status, age in statuses_and_ages:  # each ended as the engine ends processes, oldest first
                planned = datetime.now(UTC) - timedelta(minutes=age)
                row = ProcessRow(
                    table_id=rec.runtime.table_id,
                    catalog_name=name.catalog,
                    db_name="db",
                    table_name="t",
                    group_name="default",
                    action=Action.CLEAN_ORPHAN_FILES.value,
                    type="scheduled",
                    status=ProcessStatus.RUNNING.value,
                    plan_time=planned,
                    summary={},
                )
                session.add(row)
                session.flush()
                assert process_store.transition_process(
                    session, row.process_id, ProcessStatus.RUNNING, status, end_time=planned
                )

    def created() -> bool:
        with ctx.db.write() as session:  # the trigger's own last look is forgotten: only the processes count
            session.query(TableRuntimeRow).update({"maintenance": None, "next_maintenance_at": datetime.now(UTC)})
        trigger.run_once()
        with ctx.db.read() as session:
            return bool(process_store.running_processes(session))

    failed, ok = ProcessStatus.FAILED, ProcessStatus.SUCCESS
    history()  # never run: due at once
    assert created()
    history((ok, 60), (failed, 20), (failed, 3))  # two failures in a row: wait 4 minutes from the last
    assert not created()
    shown = {m["action"]: m for m in client.get(f"/api/v1/tables/{name.catalog}/db/t").json()["maintenance"]}
    assert shown["clean-orphan-files"]["failures"] == 2
    retry = datetime.fromisoformat(shown["clean-orphan-files"]["retry_after"])
    assert abs((retry - datetime.now(UTC)) - timedelta(minutes=1)) < timedelta(seconds=30)
    history((ok, 60), (failed, 20), (failed, 5))  # four minutes have passed: tried again
    assert created()
    history((failed, 20), (ok, 0.5))  # the newest succeeded: the plain interval again
    assert not created()
    history((failed, 20), (ok, 2), (failed, 1.5))  # one failure after a success: 2 minutes
    assert not created()
    shown = {m["action"]: m for m in client.get(f"/api/v1/tables/{name.catalog}/db/t").json()["maintenance"]}
    assert shown["clean-orphan-files"]["failures"] == 1
    history((ok, 20), (failed, 2.5))
    assert created()
