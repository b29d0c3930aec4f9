"""Hudi tables in view (domain/hudi.py, metadata/hudi.py, api/routes/formats.py): a `hudi` catalog of tables
laid out as Hudi writes them (tests/hudi_tables.py), each read back by hudi-rs itself; their timeline, file
groups and what Hudi's table services would do, shown and judged, never optimized."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hudi as hudi_rs
import pytest
from fastapi.testclient import TestClient

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.groups import group_engines, validate_group
from lakewarden.domain.hudi import (
    COMPLETED,
    INFLIGHT,
    REQUESTED,
    FileSlice,
    HudiTableState,
    Instant,
    judge,
    parse_instant,
    slices_of,
    timeline_of,
    timeline_tail,
)
from lakewarden.domain.hudi_services import plan_services, write_options
from lakewarden.domain.service_runs import LastRun
from lakewarden.metadata.hudi import change_token, find_tables, read_properties, read_table
from tests.hudi_tables import HudiTable
from tests.test_explorer import listed, refresh

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


# ---- the timeline and file names, as Hudi names them


def test_instant_files_of_both_timeline_layouts_are_read() -> None:
    assert parse_instant("20261101080000000.commit") == Instant("20261101080000000", "commit", COMPLETED)
    assert parse_instant("20261101080000000.inflight") == Instant("20261101080000000", "commit", INFLIGHT)
    assert parse_instant("20261101080000000.deltacommit.requested") == Instant(
        "20261101080000000", "deltacommit", REQUESTED
    )
    # layout 2 (table version 8) names the completion time of a completed instant
    assert parse_instant("20261101080000000_20261101080005123.replacecommit") == Instant(
        "20261101080000000", "replacecommit", COMPLETED, "20261101080005123"
    )
    for other in ("hoodie.properties", "archived", "20261101080000000.commit.crc", "2026.commit", "x.clean"):
        assert parse_instant(other) is None
    assert Instant("20261101080000123", "clean", COMPLETED).time == datetime(2026, 11, 1, 8, 0, 0, 123000, tzinfo=UTC)


def test_the_timeline_keeps_each_instant_in_its_newest_state() -> None:
    names = [
        "20261101080000000.commit.requested",
        "20261101080000000.inflight",
        "20261101080000000.commit",
        "20261101080100000.compaction.requested",
        "20261101080200000.clean.requested",
        "20261101080200000.clean.inflight",
    ]
    assert [(i.timestamp[8:12], i.action, i.state) for i in timeline_of(names)] == [
        ("0800", "commit", COMPLETED),
        ("0801", "compaction", REQUESTED),
        ("0802", "clean", INFLIGHT),
    ]


def test_files_group_into_slices_by_file_id_and_base_instant() -> None:
    files = [
        ("abc-0_0-1-0_20261101080000000.parquet", 100),
        (".abc-0_20261101080000000.log.2_0-1-0", 7),
        (".abc-0_20261101080000000.log.1_0-1-0", 5),
        ("abc-0_0-2-0_20261101090000000.parquet", 120),
        (".hoodie_partition_metadata", 30),
        ("notes.txt", 1),
    ]
    assert slices_of("eu", files) == [
        FileSlice(
            "eu",
            "abc-0",
            "20261101080000000",
            "abc-0_0-1-0_20261101080000000.parquet",
            100,
            ((".abc-0_20261101080000000.log.1_0-1-0", 5), (".abc-0_20261101080000000.log.2_0-1-0", 7)),
        ),
        FileSlice("eu", "abc-0", "20261101090000000", "abc-0_0-2-0_20261101090000000.parquet", 120),
    ]


# ---- what Hudi's table services would do: their triggers and defaults, at their boundaries


def _state(
    slices: list[FileSlice], timeline: list[Instant], mor: bool = True, properties: dict[str, str] | None = None
) -> HudiTableState:
    kind = "MERGE_ON_READ" if mor else "COPY_ON_WRITE"
    properties = properties or {}
    return HudiTableState("t", kind, properties, timeline, slices, sorted({s.partition for s in slices}))


def _commits(count: int, action: str = "deltacommit") -> list[Instant]:
    return [Instant(f"202611010{8 + i // 60:01d}{i % 60:02d}00000", action, COMPLETED) for i in range(count)]


def _logs(count: int) -> tuple[tuple[str, int], ...]:
    return tuple((f".g_20261101080000000.log.{v}_0-1-0", 10) for v in range(1, count + 1))


def test_a_file_group_with_max_delta_commits_log_files_needs_compaction() -> None:
    base = _commits(1)[0].timestamp
    four = FileSlice("eu", "g", base, "g_0-1-0_x.parquet", 400 << 20, _logs(4))
    five = FileSlice("us", "h", base, "h_0-1-0_x.parquet", 400 << 20, _logs(5))
    needs = judge(_state([four, five], _commits(6)), "db.t", NOW).needs
    assert [(n.service, n.partition) for n in needs] == [("compaction", "us")]
    assert needs[0].reason == "file group h has 5 log files >= hoodie.compact.inline.max.delta.commits 5"
    assert needs[0].procedure == "CALL run_compaction(op => 'scheduleAndExecute', table => 'db.t')"
    # the table's own setting is Hudi's
    looser = judge(_state([four, five], _commits(6), True, {"hoodie.compact.inline.max.delta.commits": "6"}), "t", NOW)
    assert looser.needs == []
    assert judge(_state([five], _commits(6), mor=False), "db.t", NOW).needs == []  # copy-on-write has no logs


def test_a_compaction_requested_and_not_run_is_said_with_its_age() -> None:
    waiting = Instant("20261128100000000", "compaction", REQUESTED)
    (need,) = judge(_state([], [*_commits(2), waiting]), "db.t", NOW).needs
    assert (need.service, need.partition) == ("compaction", None)
    assert need.reason == "compaction 20261128100000000 is requested, 2.0h ago and has not run"


def test_small_base_files_need_clustering_once_max_commits_passed() -> None:
    small = [FileSlice("eu", f"g{i}", "20261101080000000", f"g{i}_0-1-0_x.parquet", 1 << 20) for i in range(2)]
    large = [FileSlice("us", f"h{i}", "20261101080000000", f"h{i}_0-1-0_x.parquet", 400 << 20) for i in range(2)]
    assert judge(_state(small + large, _commits(3, "commit"), mor=False), "db.t", NOW).needs == []  # 3 < 4
    (need,) = judge(_state(small + large, _commits(4, "commit"), mor=False), "db.t", NOW).needs
    assert (need.service, need.partition) == ("clustering", "eu")
    assert need.reason == (
        "2 base files under hoodie.clustering.plan.strategy.small.file.limit 300 MiB, 4 commits since the last "
        "clustering"
    )
    clustered = [*_commits(4, "commit"), Instant("20261101100000000", "replacecommit", COMPLETED)]
    assert judge(_state(small + large, clustered, mor=False), "db.t", NOW).needs == []  # counted since clustering


def test_slices_superseded_before_the_retained_commits_need_cleaning() -> None:
    commits = _commits(12, "commit")
    versions = [FileSlice("eu", "g", c.timestamp, f"g_0-1-0_{c.timestamp}.parquet", 400 << 20) for c in commits]
    needs = judge(_state(versions, commits, mor=False), "db.t", NOW).needs
    # 12 versions: the 10 retained commits are 3..12, and Hudi's cleaner keeps version 2 too, the last before the
    # oldest retained commit (a query as of commit 3 reads it): only version 1 goes
    assert [(n.service, n.partition, n.reason) for n in needs] == [
        ("clean", "eu", "1 file slice(s) superseded before the 10 commits hoodie.cleaner.commits.retained keeps")
    ]
    assert judge(_state(versions[-11:], commits, mor=False), "db.t", NOW).needs == []


def test_an_active_timeline_past_keep_max_commits_needs_archiving() -> None:
    assert judge(_state([], _commits(30, "commit"), mor=False), "db.t", NOW).needs == []
    (need,) = judge(_state([], _commits(31, "commit"), mor=False), "db.t", NOW).needs
    assert need.service == "archive" and need.procedure == "CALL archive_commits(table => 'db.t')"


# ---- what lakewarden runs of it: Hudi's concurrency model


def _planned(
    timeline: list[Instant], properties: dict[str, str] | None = None, mor: bool = True, last: LastRun | None = None
) -> Any:
    state = _state([], timeline, mor, properties)
    return plan_services(state, judge(state, "db.t", NOW), last)


def test_a_plan_the_writer_requested_and_wrote_past_is_executed_one_still_fresh_is_not() -> None:
    requested = Instant("20261101090000000", "compaction", REQUESTED)
    later = Instant("20261101091000000", "deltacommit", COMPLETED)
    (run,) = _planned([*_commits(2), requested, later]).runs
    assert (run.service, run.instant) == ("compaction", requested.timestamp)
    # requested by the last instant: a writer compacting inline (a Spark writer's default) may be running it now
    fresh = _planned([*_commits(2), requested])
    assert fresh.runs == [] and fresh.left == [
        f"compaction {requested.timestamp} was requested just now: its writer may run it inline"
    ]
    # a writer that says it compacts asynchronously leaves it to others at once
    (run,) = _planned([*_commits(2), requested], {"hoodie.compact.inline": "false"}).runs
    assert run.instant == requested.timestamp
    # a plan in flight is another process's: never run twice
    running = Instant("20261101090000000", "clustering", INFLIGHT)
    assert _planned([*_commits(2), running, later], mor=False).runs == []
    assert _planned([*_commits(2), running, later], mor=False).left == [
        f"clustering {running.timestamp} is inflight: the process running it finishes it"
    ]


def test_lakewarden_schedules_a_service_only_where_the_table_lets_another_process() -> None:
    commits = _commits(31, "commit")  # archive is needed past hoodie.keep.max.commits 30
    owned = {"hudi.table-services.owner": "lakewarden"}
    assert [r.service for r in _planned(commits, mor=False).runs] == []  # the writers own them (Hudi's default)
    assert _planned(commits, mor=False).left[0].startswith("archive: the writers own the table's services")
    (run,) = _planned(commits, owned, mor=False).runs
    assert (run.service, run.instant) == ("archive", None)  # scheduled and run at once
    # ... unless the table says its writers archive inline anyway
    inline = _planned(commits, {**owned, "hoodie.archive.automatic": "true"}, mor=False)
    assert inline.runs == [] and inline.left == ["archive: the writers run it inline (hoodie.archive.automatic)"]
    # beside writers that hold a lock, a service they do not run inline by Hudi's defaults
    locked = {"hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"}
    assert _planned(commits, locked, mor=False).runs == []  # archive follows each commit by default
    (run,) = _planned(commits, {**locked, "hoodie.archive.automatic": "false"}, mor=False).runs
    assert run.service == "archive"
    assert _planned(commits, {"hudi.table-services.owner": "nobody"}, mor=False).runs == []  # unknown: the writer


def test_nothing_runs_beside_writers_on_a_metadata_table_without_a_lock() -> None:
    requested = Instant("20261101090000000", "compaction", REQUESTED)
    later = Instant("20261101091000000", "deltacommit", COMPLETED)
    metadata = {"hoodie.table.metadata.partitions": "files"}
    plan = _planned([*_commits(2), requested, later], metadata)
    assert plan.runs == [] and plan.left == [
        "the table keeps a metadata table and names no hoodie.write.lock.provider: Hudi's services in a process "
        "beside its writers need one, or their commits race on the metadata table"
    ]
    locked = {**metadata, "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.InProcessLockProvider"}
    (run,) = _planned([*_commits(2), requested, later], locked).runs
    assert run.instant == requested.timestamp
    assert _planned(_commits(2), metadata).left == []  # nothing needed: nothing said


def test_archive_waits_for_a_clean_past_the_newest_clustering() -> None:
    owned = {"hudi.table-services.owner": "lakewarden"}
    commits = _commits(31, "commit")
    clustered = Instant("20261102080000000", "replacecommit", COMPLETED)
    # the clustering's replaced files are found through its instant: archiving it before a clean would orphan them
    waiting = _planned([*commits, clustered], owned, mor=False)
    assert "archive" not in [r.service for r in waiting.runs]
    assert f"archive: waits for a clean after the clustering {clustered.timestamp}, which finds its replaced files" in (
        waiting.left
    )
    # a clean after it lets archive run
    cleaned = Instant("20261102090000000", "clean", COMPLETED)
    assert "archive" in [r.service for r in _planned([*commits, clustered, cleaned], owned, mor=False).runs]
    # a clean still in flight has cleaned nothing yet
    pending = Instant("20261102090000000", "clean", INFLIGHT)
    assert "archive" not in [r.service for r in _planned([*commits, clustered, pending], owned, mor=False).runs]
    # nor does it run in the process that clusters
    small = [FileSlice("eu", f"s{i}", commits[-1].timestamp, f"s{i}_0-1-0_x.parquet", 1 << 20) for i in range(2)]
    state = _state(small, commits, False, owned)
    plan = plan_services(state, judge(state, "db.t", NOW))
    assert [r.service for r in plan.runs] == ["clustering"]
    assert "archive: waits for the clustering run now to be cleaned first" in plan.left


def test_services_run_in_hudis_order_once_each() -> None:
    commits = _commits(12, "commit")
    versions = [FileSlice("eu", "g", c.timestamp, f"g_0-1-0_{c.timestamp}.parquet", 1 << 20) for c in commits]
    small = [FileSlice("eu", f"s{i}", commits[-1].timestamp, f"s{i}_0-1-0_x.parquet", 1 << 20) for i in range(2)]
    state = _state(versions + small, commits, False, {"hudi.table-services.owner": "lakewarden"})
    verdict = judge(state, "db.t", NOW)
    assert [n.service for n in verdict.needs] == ["clustering", "clean"]
    plan = plan_services(state, verdict)
    assert [r.service for r in plan.runs] == ["clustering", "clean"]  # each once, clean after what it replaces
    assert write_options({"hoodie.cleaner.commits.retained": "3", "hoodie.table.name": "t", "x": "1"}) == {
        "hoodie.cleaner.commits.retained": "3",
        "hoodie.metadata.enable": "false",  # the table keeps no metadata table: its services build none
    }
    assert write_options({"hoodie.table.metadata.partitions": "files"})["hoodie.metadata.enable"] == "true"


def test_a_service_hudi_found_idle_waits_for_the_timeline_to_move() -> None:
    commits = _commits(31, "commit")
    owned = {"hudi.table-services.owner": "lakewarden"}
    tail = timeline_tail(commits)
    # newest first: the last run found archive idle, the one before it clean, on the same timeline
    last = LastRun.of(
        [{"idle_services": ["archive"], "timeline_tail": tail}, {"idle_services": ["clean"], "timeline_tail": tail}]
    )
    assert last.idle_services == {"archive", "clean"}
    plan = _planned(commits, owned, mor=False, last=last)
    assert plan.runs == [] and plan.left == [
        "archive: Hudi found nothing to do when lakewarden last ran it, and the timeline is as then"
    ]
    # an older run on another timeline does not count; a new instant makes every service worth asking again
    assert LastRun.of(
        [{"idle_services": ["archive"], "timeline_tail": tail}, {"idle_services": ["clean"], "timeline_tail": "1"}]
    ).idle_services == {"archive"}
    moved = [*commits, Instant("20261102000000000", "commit", COMPLETED)]
    assert [r.service for r in _planned(moved, owned, mor=False, last=last).runs] == ["archive"]
    # a commit that was in flight when the service ran has moved the timeline once it completes: its instant time
    # is the same, what Hudi would find is not
    inflight = [*commits, Instant("20261102000000000", "commit", INFLIGHT)]
    during = LastRun.of([{"idle_services": ["archive"], "timeline_tail": timeline_tail(inflight)}])
    assert [r.service for r in _planned(moved, owned, mor=False, last=during).runs] == ["archive"]
    assert LastRun.of([None, {}]) == LastRun()


def test_a_groups_engines_are_known_ones() -> None:
    assert group_engines({"engines": "paimon, hudi"}) == ("hudi", "paimon")
    assert group_engines({}) == ()
    with pytest.raises(InvalidField, match=r"properties\.engines.*'delta' is not an engine"):
        validate_group("g", "local", {"engines": "hudi,delta"}, {"local": "local"})


# ---- reading tables as Hudi writes them


def test_properties_files_are_read_as_java_writes_them(tmp_path: Path) -> None:
    (tmp_path / "p").write_text("#saved\n! also a comment\nhoodie.table.name=t\nhoodie.base.path=s3\\://b/t\na:b\n\n")
    assert read_properties(tmp_path / "p") == {"hoodie.table.name": "t", "hoodie.base.path": "s3://b/t", "a": "b"}


def test_tables_are_found_under_the_warehouse_and_read_back_by_hudi(tmp_path: Path) -> None:
    cow = HudiTable(tmp_path / "sales" / "orders").create("orders")
    cow.commit({"eu": range(0, 5), "us": range(100, 103)})
    cow.commit({"eu": range(0, 5)}, tag="u")
    top = HudiTable(tmp_path / "events", mor=True).create("events")
    top.commit({"eu": range(0, 3)})
    (tmp_path / "sales" / "notes").mkdir()  # not a table
    assert find_tables(str(tmp_path)) == {("default", "events"): top.path, ("sales", "orders"): cow.path}

    state = read_table(cow.path)
    assert (state.table_type, state.partitions) == ("COPY_ON_WRITE", ["eu", "us"])
    assert [(i.action, i.state) for i in state.timeline] == [("commit", COMPLETED)] * 2
    assert len(state.slices) == 3 and len(state.latest_slices()) == 2  # eu's first version is superseded
    # hudi-rs reads the same table: the same latest slices, and the rows of the newest commit
    table = hudi_rs.HudiTableBuilder.from_base_uri(str(cow.path)).build()
    assert sorted(s.base_file_name for s in table.get_file_slices()) == sorted(
        str(s.base_file) for s in state.latest_slices()
    )
    rows = sorted((r["id"], r["v"]) for batch in table.read() for r in batch.to_pylist())
    assert rows == [*((i, f"u-{i}") for i in range(5)), *((i, f"v-{i}") for i in range(100, 103))]

    token = change_token(cow.path)
    cow.commit({"us": range(100, 101)}, state="inflight")
    assert change_token(cow.path) != token  # a writer's new instant moves it


def test_a_merge_on_read_tables_log_files_are_hudis(tmp_path: Path) -> None:
    mor = HudiTable(tmp_path / "db" / "m", mor=True).create("m")
    mor.commit({"eu": range(0, 5)})
    for n in range(2):
        mor.commit({"eu": range(0, 3)}, tag=f"u{n}")
    state = read_table(mor.path)
    (latest,) = state.latest_slices()
    table = hudi_rs.HudiTableBuilder.from_base_uri(str(mor.path)).build()
    (theirs,) = table.get_file_slices()
    assert table.is_mor and theirs.log_file_names == [name for name, _ in latest.log_files]
    assert theirs.log_file_sizes == [size for _, size in latest.log_files]
    # hudi-rs parses every log block (a corrupt one fails the read, below); it does not merge these blocks'
    # records into the read, which stays the base file's five rows
    assert sum(batch.num_rows for batch in table.read()) == 5
    next(mor.path.glob("eu/.*.log.1_*")).write_bytes(b"not a log block")
    with pytest.raises(Exception, match="magic"):
        table.read()


# ---- a `hudi` catalog in the service


def _register(client: TestClient, name: str, warehouse: str) -> Any:
    return client.post("/api/v1/catalogs", json={"name": name, "type": "hudi", "properties": {"warehouse": warehouse}})


def test_a_bad_hudi_catalog_is_refused_naming_the_field(client: TestClient, tmp_path: Path) -> None:
    missing = client.post("/api/v1/catalogs", json={"name": "h", "type": "hudi", "properties": {}})
    assert missing.status_code == 400 and "properties.warehouse" in missing.text
    relative = _register(client, "h", "lake/hudi")
    assert relative.status_code == 400 and "must be an absolute path" in relative.text
    remote = _register(client, "h", "s3://bucket/hudi")
    assert remote.status_code == 400 and "must be a local directory" in remote.text


def test_hudi_tables_are_listed_judged_and_shown(client: TestClient, tmp_path: Path) -> None:
    orders = HudiTable(tmp_path / "sales" / "orders").create("orders")
    for n in range(4):
        orders.commit({"eu": range(n * 10, n * 10 + 5)}, tag=f"c{n}")
    events = HudiTable(tmp_path / "sales" / "events", mor=True).create("events")
    events.commit({"eu": range(0, 5)})
    for n in range(5):
        events.commit({"eu": range(0, 2)}, tag=f"u{n}")
    waiting = events.request_compaction()
    broken = tmp_path / "sales" / "broken" / ".hoodie"
    broken.mkdir(parents=True)
    (broken / "hoodie.properties").write_text("hoodie.table.type=SOMETHING_ELSE\n")

    assert _register(client, "lake", str(tmp_path)).status_code == 201
    result = refresh(client, "lake")
    assert result["health"] == "healthy" and result["tables"] == 3
    assert listed(client, format="hudi") == ["lake.sales.broken", "lake.sales.events", "lake.sales.orders"]
    assert listed(client, format="iceberg") == []
    bad = client.get("/api/v1/tables", params={"format": "delta"})
    assert bad.status_code == 400 and "format" in bad.text
    shown = client.get("/api/v1/tables/lake/sales/broken").json()
    assert "not COPY_ON_WRITE or MERGE_ON_READ" in shown["refresh_error"]  # that table only

    client.app.state.context.evaluator.run_once()  # type: ignore[attr-defined]
    table = client.get("/api/v1/tables/lake/sales/events").json()
    # judged, not pending: the plan was requested by the last instant, so a writer compacting inline (Hudi's default)
    # may be running it (tests/test_hudi_services.py runs the services)
    assert table["format"] == "hudi" and table["status"] == "idle"
    assert table["evaluation"]["reasons"] == [
        f"compaction: file group {events.file_groups['eu'][0]} has 5 log files >= "
        "hoodie.compact.inline.max.delta.commits 5",
        f"compaction: compaction {waiting} is requested, " + table["evaluation"]["reasons"][1].split("requested, ")[1],
        f"not run by lakewarden now: compaction {waiting} was requested just now: its writer may run it inline",
    ]
    assert table["evaluation"]["partitions"][0]["partition"] == "eu"
    orders_judged = client.get("/api/v1/tables/lake/sales/orders").json()["evaluation"]
    assert orders_judged["reasons"] == ["nothing for Hudi's table services to do"]  # 4 commits, one file group

    view = client.get("/api/v1/tables/lake/sales/events/hudi").json()
    assert (view["table_type"], view["table_version"], view["instants"]) == ("MERGE_ON_READ", "6", 7)
    assert [(i["action"], i["state"]) for i in view["timeline"][:2]] == [
        ("compaction", "requested"),
        ("deltacommit", "completed"),
    ]
    assert [i["timestamp"] for i in view["pending_compactions"]] == [waiting]
    (group,) = view["file_groups"]
    (current,) = group["slices"]
    assert current["latest"] and len(current["log_files"]) == 5 and current["base_file"].endswith(".parquet")
    assert view["partitions"] == [
        {
            "partition": "eu",
            "file_groups": 1,
            "base_files": 1,
            "log_files": 5,
            "size_bytes": view["partitions"][0]["size_bytes"],
        }
    ]
    assert [c["name"] for c in view["schema"]] == ["id", "region", "v", "ts"]
    assert {n["service"] for n in view["needs"]} == {"compaction"}
    assert view["needs"][0]["procedure"] == "CALL run_compaction(op => 'scheduleAndExecute', table => 'sales.events')"

    # what lakewarden cannot do to a Hudi table is refused, saying why
    snapshots = client.get("/api/v1/tables/lake/sales/events/snapshots")
    assert snapshots.status_code == 409 and "/api/v1/tables/lake/sales/events/hudi" in snapshots.text
    action = client.post("/api/v1/tables/lake/sales/events/actions/expire-snapshots")
    assert action.status_code == 400 and "not an action for hudi tables" in action.text
    iceberg = client.get("/api/v1/tables/lake/sales/broken/hudi")
    assert iceberg.status_code == 409 and "cannot read the Hudi table" in iceberg.text

    # a writer's commit is seen at the next refresh and judged again
    events.clean()
    assert refresh(client, "lake")["updated"] == ["lake.sales.events"]
    client.app.state.context.evaluator.run_once()  # type: ignore[attr-defined]
    view = client.get("/api/v1/tables/lake/sales/events/hudi").json()
    assert view["timeline"][0]["action"] == "clean" and view["instants"] == 8
    assert (
        view["timeline"][0]["timestamp"]
        in client.get("/api/v1/tables/lake/sales/events").json()["evaluation"]["metadata_location"]
    )
    shutil.rmtree(events.path)  # a table dropped
    assert refresh(client, "lake")["disposed"] == ["lake.sales.events"]
