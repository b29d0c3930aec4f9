"""What another policy would have done (domain/what_if.py, services/tables/what_if.py): a table's recorded commits
and scans replayed under Amoro's triggers, a scheduled rewrite, a budget and nothing; the what-if of a table and
the shadow of a group through the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.reads import scan_report
from lakewarden.domain.what_if import SHADOW, SHADOW_SINCE, Commit, Policy, Scan, Table, replay, stamp_shadow
from lakewarden.store import reads as reads_store
from lakewarden.store.database import utcnow
from lakewarden.store.models import CommitRow
from tests.test_reads import _context

START = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
MIB = 1024**2
TABLE = Table(
    target_size=128 * MIB,
    fragment_threshold=16 * MIB,
    minor_trigger_file_count=12,
    minor_trigger_interval=None,
    cpu_seconds_per_byte=1 / MIB,  # 1 CPU-s per MiB
)


def stream(commits: int = 60) -> list[Commit]:
    """A streaming writer: a commit of one 1 MiB file every minute, onto an empty table."""
    out = [Commit(START, 0, 0, 0, 0, 0, 0, 0)]
    for i in range(1, commits + 1):
        out.append(Commit(START + timedelta(minutes=i), 1, MIB, 0, 0, 0, 0, live_files=i, data_files=i))
    return out


def scans_of_everything(minutes: range) -> list[Scan]:
    """Whole-table scans: each planned every file live then (the stream never compacted: i files at minute i)."""
    return [Scan(START + timedelta(minutes=m, seconds=30), m, 0) for m in minutes]


END = START + timedelta(minutes=61)


def test_amoros_triggers_merge_every_twelve_small_files() -> None:
    amoro = replay(Policy.parse("amoro"), TABLE, stream(), scans_of_everything(range(1, 61)), END)
    assert amoro.processes == 5 and amoro.bytes_rewritten == 60 * MIB
    assert amoro.cpu_seconds == pytest.approx(60.0)  # 12 MiB a process at 1 CPU-s per MiB
    none = replay(Policy.parse("none"), TABLE, stream(), scans_of_everything(range(1, 61)), END)
    assert (none.processes, none.cpu_seconds) == (0, 0.0)
    assert none.files_per_scan == pytest.approx(30.5)  # as recorded: 1..60 files
    # merged: one file per twelve, the rest small since the last process
    assert amoro.files_per_scan < 8 and none.scans == amoro.scans == 60


def test_a_scheduled_rewrite_pays_for_every_run_even_with_nothing_to_do() -> None:
    quiet = [Commit(START, 0, 0, 0, 0, 0, 0, 0), Commit(START + timedelta(minutes=1), 1, MIB, 0, 0, 0, 0, 1)]
    runs = replay(Policy.parse("scheduled:10"), TABLE, quiet, [], START + timedelta(minutes=61))
    assert runs.processes == 6 and runs.bytes_rewritten == 0 and runs.cpu_seconds == 6.0  # a Spark job each
    busy = replay(Policy.parse("scheduled:10"), TABLE, stream(), scans_of_everything(range(1, 61)), END)
    assert busy.processes == 6 and busy.bytes_rewritten == 59 * MIB  # the run at minute 60 goes before its commit


def test_a_budget_holds_processes_back_until_a_hard_limit() -> None:
    budget = replay(Policy.parse("budget:20"), TABLE, stream(), scans_of_everything(range(1, 61)), END)
    assert budget.processes == 2 and budget.cpu_seconds == pytest.approx(24.0)  # the second passed the budget
    many = [Commit(START, 0, 0, 0, 0, 0, 0, 0)] + [
        Commit(START + timedelta(seconds=i), 100, 100 * 1024, 0, 0, 0, 0, 100 * i) for i in range(1, 21)
    ]
    hard = replay(Policy.parse("budget:0.5"), TABLE, many, [], START + timedelta(minutes=1))
    # the first process spends the budget; past it, 1000 small files (the hard limit) plan one regardless
    assert hard.processes == 2


def test_a_budget_spends_nothing_more_on_a_table_nobody_scanned_since_its_last_process() -> None:
    # an ample budget, two scans in the hour: the process of minute 12, then one at each scan, none between
    rare = [Scan(START + timedelta(minutes=m, seconds=30), m, 0) for m in (30, 59)]
    budget = replay(Policy.parse("budget:1000"), TABLE, stream(), rare, END)
    amoro = replay(Policy.parse("amoro"), TABLE, stream(), rare, END)
    assert (budget.processes, amoro.processes) == (3, 5)
    assert budget.cpu_seconds == pytest.approx(12 + 18 + 29)  # the 12, 18 and 29 small files of each


def test_the_replay_leaves_lakewardens_own_rewrites_out_and_keeps_each_scans_share() -> None:
    # minutes 1..10: a small file each; lakewarden merged them into one at 10:10; minutes 11..20: one more each
    merged = Commit(START + timedelta(minutes=10, seconds=10), 1, 10 * MIB, 10, 10 * MIB, 0, 0, live_files=1, own=True)
    commits = [*stream(10), merged]
    commits += [Commit(START + timedelta(minutes=m), 1, MIB, 0, 0, 0, 0, live_files=m - 9) for m in range(11, 21)]
    # a scan after the rewrite read 1 of its 1 file; one at minute 20 read half the table: 5 of 11
    scans = [
        Scan(START + timedelta(minutes=10, seconds=20), 1, 0),
        Scan(START + timedelta(minutes=20, seconds=5), 5, 0),
    ]
    none = replay(Policy.parse("none"), TABLE, commits, scans, START + timedelta(minutes=21))
    # without any policy the table keeps every small file: 10 at the first scan, 20 at the second
    assert none.files_per_scan == pytest.approx((10 + 20 * 5 / 11) / 2)


@pytest.mark.parametrize("text", ["", "amoro:3", "scheduled", "scheduled:0", "scheduled:x", "budget:-1", "weekly"])
def test_a_bad_policy_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidField) as raised:
        Policy.parse(text)
    assert raised.value.field == "policy" and "scheduled:<minutes>" in str(raised.value)


def test_a_shadow_policy_set_starts_its_period() -> None:
    now = START
    set_ = stamp_shadow({}, {SHADOW: "budget:60"}, now)
    assert set_[SHADOW_SINCE] == now.isoformat()
    later = now + timedelta(hours=1)
    assert stamp_shadow(set_, dict(set_), later)[SHADOW_SINCE] == now.isoformat()  # unchanged: kept
    assert stamp_shadow(set_, {**set_, SHADOW: "amoro"}, later)[SHADOW_SINCE] == later.isoformat()
    assert SHADOW_SINCE not in stamp_shadow(set_, {}, later)  # no shadow: no period


# ---- through the API


def _timeline(client: TestClient, minutes: int = 60) -> None:
    """`lake.db.t`'s commit timeline: one small file a minute for the last `minutes` minutes; whole-table scans."""
    ctx = _context(client)
    now = utcnow()
    with ctx.db.write() as session:
        for i in range(1, minutes + 1):
            at = now - timedelta(minutes=minutes - i + 1)
            summary = {"added-data-files": "1", "added-files-size": str(MIB), "total-data-files": str(i)}
            session.add(
                CommitRow(
                    catalog_name="lake",
                    namespace="db",
                    table_name="t",
                    version=i,
                    operation="append",
                    snapshot_id=i,
                    parent_snapshot_id=None,
                    summary=summary,
                    metadata_location=f"/m/{i}",
                    client=None,
                    committed_at=at,
                )
            )
            report = scan_report({"result-data-files": {"value": i}}, i, True, {}, "bi")
            reads_store.record_read(session, ("lake", "db", "t"), report, at + timedelta(seconds=30))


def test_a_tables_what_if_beside_what_its_own_policy_did(client: TestClient, managed_table: str) -> None:
    _timeline(client)
    answer = client.get(
        "/api/v1/tables/lake/db/t/what-if", params={"policy": ["amoro", "scheduled:10", "none"], "hours": 2}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["commits"] == 59 and body["note"] is None  # the first is the state the window starts from
    assert body["actual"]["processes"] == 0 and body["actual"]["scans"] == 60
    assert body["actual"]["files_per_scan"] == pytest.approx(30.5)
    projections = {p["policy"]: p for p in body["projections"]}
    assert projections["none"]["files_per_scan"] == pytest.approx(30.5)
    assert projections["amoro"]["processes"] == 5 and projections["amoro"]["files_per_scan"] < 10
    assert projections["scheduled:10"]["processes"] >= 6
    # by default: Amoro's triggers, a rewrite every 30 minutes, a budget, nothing
    shown = client.get("/api/v1/tables/lake/db/t/what-if").json()
    assert [p["policy"] for p in shown["projections"]] == ["amoro", "scheduled:30", "budget:60", "none"]
    bad = client.get("/api/v1/tables/lake/db/t/what-if", params={"policy": "weekly"})
    assert bad.status_code == 400 and "policy" in bad.text


def test_a_groups_shadow_policy_beside_its_own(client: TestClient, managed_table: str) -> None:
    assert client.get("/api/v1/resource-groups/default/shadow").status_code == 409  # none set
    answer = client.put("/api/v1/resource-groups/default", json={"properties": {SHADOW: "amoro"}})
    assert answer.status_code == 200 and SHADOW_SINCE in answer.json()["properties"]
    _timeline(client)
    recent = client.get("/api/v1/resource-groups/default/shadow").json()  # since it was set: nothing yet
    assert recent["policy"] == "amoro" and recent["shadow"]["processes"] == 0
    shown = client.get("/api/v1/resource-groups/default/shadow", params={"hours": 2}).json()
    assert [t["table"] for t in shown["tables"]] == ["lake.db.t"] and shown["tables_omitted"] == 0
    assert shown["shadow"]["processes"] == 5 and shown["actual"]["processes"] == 0
    assert shown["shadow"]["files_per_scan"] < shown["actual"]["files_per_scan"] == pytest.approx(30.5)
    bad = client.put("/api/v1/resource-groups/default", json={"properties": {SHADOW: "hourly"}})
    assert bad.status_code == 400 and f"properties.{SHADOW}" in bad.text
