"""How tables are read (domain/reads.py, services/tables/reads.py): the scan and commit reports clients send to the
REST catalog's metrics endpoint, and the server's own plans, kept per table (and partition), summed up on the
table's API, bounded like the history, and published as metrics. Spark's own reports: test_rest_catalog_spark.py."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from lakewarden.api.context import ServerContext
from lakewarden.config import HistoryConfig
from lakewarden.domain.benefits import NetBenefit, ReadCost, benefit_of
from lakewarden.domain.reads import (
    HourOfReads,
    ReportedRead,
    ReportKind,
    ReportSource,
    commit_report,
    day_of_hours,
    partition_of,
    percentile,
    resolve_partition,
    sanitized_forms,
    scan_report,
    summarize,
)
from lakewarden.services.tables.history import HistoryPruner
from lakewarden.store import reads as store
from lakewarden.store.models import ProcessRow, TableIdentifierRow, TableReadRow
from tests.conftest import TABLES

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def eq(term: str, value: Any) -> dict[str, Any]:
    return {"type": "eq", "term": term, "value": value}


def both(left: Any, right: Any) -> dict[str, Any]:
    return {"type": "and", "left": left, "right": right}


FIELDS = [("day", "day"), ("region", "region")]


def test_a_filter_names_the_partition_only_when_it_pins_every_identity_column() -> None:
    pinned = both(eq("day", "2026-11-27"), both(eq("region", "eu west"), {"type": "gt", "term": "id", "value": 5}))
    assert partition_of(pinned, FIELDS) == "day=2026-11-27/region=eu+west"  # quoted as Iceberg's paths are
    assert partition_of(both(eq("region", "eu"), eq("day", 3)), FIELDS) == "day=3/region=eu"  # in the spec's order
    assert partition_of(eq("day", "2026-11-27"), FIELDS) is None  # the region is open: several partitions
    either = {"type": "or", "left": eq("day", "a"), "right": eq("day", "b")}
    assert partition_of(both(either, eq("region", "eu")), FIELDS) is None
    assert partition_of({"type": "not", "child": both(eq("day", "a"), eq("region", "eu"))}, FIELDS) is None
    assert partition_of(True, FIELDS) is None
    assert partition_of(both(eq("day", "a"), eq("region", "eu")), []) is None  # unpartitioned, or not identity
    # the partition field's own name, the source column's value
    assert partition_of(eq("ts_day", "2026-11-27"), [("ts_day", "day")]) == "day=2026-11-27"


def test_a_partition_a_client_sanitized_is_found_among_the_known_ones() -> None:
    """Iceberg's clients hash strings, count an integer's digits and date a day from today in a report's filter
    (ExpressionUtil.sanitize); the expected forms are those Iceberg Java writes."""
    today = date(2026, 11, 28)
    assert "(hash-3c2569b2)" in sanitized_forms("a", today)  # what Spark reported of `cat = 'a'`
    assert "(date-today)" in sanitized_forms("2026-11-28", today)
    assert "(date-2-days-ago)" in sanitized_forms("2026-11-26", today)
    assert "(date-3-days-from-now)" in sanitized_forms("2026-12-01", today)
    assert "(date)" in sanitized_forms("2020-01-01", today)
    assert "(3-digit-int)" in sanitized_forms("-120", today) and "(1-digit-int)" in sanitized_forms("0", today)
    known = ["cat=a/day=2026-11-26", "cat=b/day=2026-11-26", "cat=a/day=2026-11-27", "cat=(x)/day=2026-11-27"]
    reported = "cat=%28hash-3c2569b2%29/day=%28date-2-days-ago%29"
    assert resolve_partition(reported, known, today) == "cat=a/day=2026-11-26"
    assert resolve_partition("cat=%28hash-3c2569b2%29/day=%28date%29", known, today).startswith("cat=%28")  # none
    ints = ["n=5", "n=7"]  # both sanitize to (1-digit-int): which one was read is not known
    assert resolve_partition("n=%281-digit-int%29", ints, today) == "n=%281-digit-int%29"
    assert resolve_partition("n=%281-digit-int%29", ["n=5", "n=70"], today) == "n=5"
    assert resolve_partition("cat=a/day=x", known, today) == "cat=a/day=x"  # not sanitized: kept as it is


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 21))  # 1..20
    assert percentile(values, 0.5) == 10 and percentile(values, 0.95) == 19
    assert percentile([7], 0.95) == 7 and percentile([], 0.5) == 0
    assert percentile([3, 1, 2], 0.5) == 2


def java_scan_report(**metrics: int) -> dict[str, Any]:
    """A ReportMetricsRequest as Iceberg's ReportMetricsRequestParser writes a ScanReport."""
    counters = {name.replace("_", "-"): {"unit": "count", "value": v} for name, v in metrics.items()}
    return {
        "report-type": "scan-report",
        "table-name": "lake.db.t",
        "snapshot-id": 42,
        "filter": both(eq("day", "d1"), eq("region", "eu")),
        "schema-id": 0,
        "projected-field-ids": [1],
        "projected-field-names": ["id"],
        "metrics": {
            "total-planning-duration": {"count": 1, "time-unit": "nanoseconds", "total-duration": 25_000_000},
            **counters,
        },
        "metadata": {"engine-name": "spark", "engine-version": "3.5.8", "iceberg-version": "1.10.2"},
    }


def test_a_scan_report_is_read_with_icebergs_metric_names() -> None:
    body = java_scan_report(
        result_data_files=12,
        result_delete_files=3,
        scanned_data_manifests=2,
        scanned_delete_manifests=1,
        **{"total_file_size_in_bytes": 1200, "total_delete_file_size_in_bytes": 30},
    )
    report = scan_report(body["metrics"], 42, body["filter"], body["metadata"], "etl", FIELDS)
    assert (report.kind, report.source, report.snapshot_id) == (ReportKind.SCAN, ReportSource.CLIENT, 42)
    assert (report.data_files, report.delete_files, report.data_bytes, report.delete_bytes) == (12, 3, 1200, 30)
    assert report.manifests == 3 and report.planning_ms == 25.0
    assert (report.partition, report.engine, report.principal) == ("day=d1/region=eu", "spark", "etl")
    assert report.filter is not None and '"term":"day"' in report.filter


def _read(minutes_ago: float, files: int, deletes: int = 0, **extra: Any) -> ReportedRead:
    fields: dict[str, Any] = {"kind": "scan", "source": "client", "partition": None, "engine": "spark"}
    fields.update(extra)
    return ReportedRead(
        at=NOW - timedelta(minutes=minutes_ago),
        data_files=files,
        delete_files=deletes,
        data_bytes=files * 100,
        delete_bytes=0,
        planning_ms=10.0,
        principal="etl",
        **fields,
    )


def test_a_summary_spreads_the_last_days_scans_and_counts_by_hour() -> None:
    sample = sorted(
        [_read(m, files=10 + i) for i, m in enumerate(range(5, 60, 5))]  # 11 in the last hour: 10..20 files
        + [_read(60 * 30, files=500)]  # 30 hours ago: in the week, not in the day's spread
        + [_read(90, files=4, partition="day=d1", engine=None), _read(120, 0, kind="commit")],
        key=lambda r: r.at,
        reverse=True,
    )
    hours = day_of_hours(NOW)
    hourly = [HourOfReads(h, 0, 0.0, 0) for h in hours[:-2]] + [
        HourOfReads(hours[-2], 1, 4.0, 1),
        HourOfReads(hours[-1], 11, 15.0, 0),
    ]
    summary = summarize(sample, hourly, scans_last_week=13)
    assert (summary.scans_last_hour, summary.scans_last_day, summary.scans_last_week) == (11, 12, 13)
    assert summary.commits_last_day == 1 and summary.last_scan_at == NOW - timedelta(minutes=5)
    assert summary.files_per_scan.p50 == 14 and summary.files_per_scan.p95 == 20  # 4, 10..20: not the 500
    assert summary.engines == {"spark": 12, "unknown": 1} and summary.principals == {"etl": 13}
    assert summary.partitions == {"day=d1": 1}
    assert summary.hourly[-1].hour == NOW - timedelta(hours=1)


# ---- through the server


def _context(client: TestClient) -> ServerContext:
    return client.app.state.context  # type: ignore[attr-defined, no-any-return]


def test_reports_are_kept_and_summed_on_the_tables_api(client: TestClient, managed_table: str) -> None:
    body = java_scan_report(result_data_files=8, result_delete_files=2, total_file_size_in_bytes=800)
    for _ in range(3):
        assert client.post(f"{managed_table}/metrics", json=body).status_code == 204
    other = java_scan_report(result_data_files=2)
    other["filter"] = True
    assert client.post(f"{managed_table}/metrics", json=other).status_code == 204
    commit = {
        "report-type": "commit-report",
        "table-name": "lake.db.t",
        "snapshot-id": 7,
        "sequence-number": 1,
        "operation": "append",
        "metrics": {"added-data-files": {"unit": "count", "value": 5}},
        "metadata": {"engine-name": "flink"},
    }
    assert client.post(f"{managed_table}/metrics", json=commit).status_code == 204
    # a report type Iceberg does not know yet is accepted and dropped, as its own parser does
    assert client.post(f"{managed_table}/metrics", json={"report-type": "lineage-report"}).status_code == 204

    reads = client.get("/api/v1/tables/lake/db/t").json()["reads"]
    assert (reads["scans_last_hour"], reads["scans_last_day"], reads["scans_last_week"]) == (4, 4, 4)
    assert reads["commits_last_day"] == 1
    assert reads["files_per_scan"] == {"p50": 10.0, "p95": 10.0}
    assert reads["delete_files_per_scan"] == {"p50": 2.0, "p95": 2.0}
    assert reads["planning_ms"]["p95"] == 25.0
    assert reads["engines"] == {"spark": 4} and reads["principals"] == {"admin": 4}
    assert reads["partitions"] == {"day=d1/region=eu": 3}
    assert len(reads["hourly"]) == 24 and reads["hourly"][-1]["scans"] == 4
    assert reads["hourly"][-1]["files_per_scan"] == pytest.approx((3 * 10 + 2) / 4)
    assert reads["last_scan_at"].endswith("+00:00") or reads["last_scan_at"].endswith("Z")
    metrics = client.get("/metrics").text
    labels = '{catalog="lake",database="db",table="t"}'
    assert f"lakewarden_table_scans_last_hour{labels} 4.0" in metrics
    assert f"lakewarden_table_files_per_scan{labels} 8.0" in metrics  # (3 * 10 + 2) / 4
    assert f"lakewarden_table_delete_files_per_scan{labels} 1.5" in metrics


def test_bad_reports_are_refused_naming_the_field(client: TestClient, managed_table: str) -> None:
    def error(answer: Any) -> str:
        assert answer.status_code in (400, 404), answer.text
        return str(answer.json()["error"]["message"])

    assert "report-type" in error(client.post(f"{managed_table}/metrics", json={"snapshot-id": 1}))
    broken = java_scan_report()
    broken["metrics"] = {"result-data-files": 3}
    assert "metrics" in error(client.post(f"{managed_table}/metrics", json=broken))
    no_operation = {"report-type": "commit-report", "snapshot-id": 1, "metrics": {}}
    assert "operation" in error(client.post(f"{managed_table}/metrics", json=no_operation))
    gone = client.post(f"{TABLES}/gone/metrics", json=java_scan_report())
    assert gone.status_code == 404 and "gone" in error(gone)
    with _context(client).db.read() as session:
        assert session.scalar(select(func.count()).select_from(TableReadRow)) == 0


def test_the_servers_own_plans_are_kept_as_scans(client: TestClient, managed_table: str) -> None:
    # the table is empty: a plan of no files is still a scan
    answer = client.post(f"{managed_table}/plan", json={"filter": both(eq("day", "d1"), eq("region", "eu"))})
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    assert client.post(f"{managed_table}/plan", json={}).status_code == 200  # the second is the result cache's answer
    reads = client.get("/api/v1/tables/lake/db/t").json()["reads"]
    assert reads["scans_last_hour"] == 2 and reads["partitions"] == {"day=d1/region=eu": 1}
    assert reads["engines"] == {"unknown": 2} and reads["principals"] == {"admin": 2}
    with _context(client).db.read() as session:
        assert set(session.scalars(select(TableReadRow.source))) == {"server"}


def test_reads_are_pruned_by_age_and_count_keeping_each_tables_newest(client: TestClient) -> None:
    db = _context(client).db
    report = scan_report({}, 1, True, {}, "etl")
    with db.write() as session:
        for table, days in [("a", 9), ("a", 3), ("a", 2), ("a", 1), ("b", 20)]:
            store.record_read(session, ("lake", "db", table), report, NOW - timedelta(days=days))
    config = HistoryConfig.model_validate({"reads": {"keep-count": 2}})
    assert config.reads.keep_time == timedelta(days=8)  # the default kept beside a count given
    deleted = HistoryPruner(db, config, Path("/nonexistent")).prune(NOW)
    assert deleted["reads"] == 2
    with db.read() as session:
        kept = sorted(session.execute(select(TableReadRow.table_name, TableReadRow.reported_at)))
    assert [(t, NOW - at.replace(tzinfo=UTC)) for t, at in kept] == [
        ("a", timedelta(days=2)),
        ("a", timedelta(days=1)),
        ("b", timedelta(days=20)),  # its newest
    ]


def test_reads_are_counted_in_the_hour_they_fall_in(client: TestClient) -> None:
    db = _context(client).db
    hours = day_of_hours(NOW)  # NOW - 24 h … NOW - 1 h
    scan = scan_report({"result-data-files": {"value": 4}, "result-delete-files": {"value": 2}}, 1, True, {}, None)
    commit = commit_report({"added-data-files": {"value": 9}}, 1, "append", {}, None)
    owner = ("lake", "db", "hours")
    with db.write() as session:
        for report, at in [
            (scan, hours[0] - timedelta(seconds=1)),  # before the day: not counted
            (scan, hours[0]),  # an hour's start is in that hour
            (scan, hours[1] - timedelta(seconds=1)),
            (commit, hours[1]),
            (scan, hours[-1] + timedelta(minutes=59)),
            (commit, NOW + timedelta(seconds=1)),  # after the last hour: not counted
        ]:
            store.record_read(session, owner, report, at)
        store.record_read(session, ("lake", "db", "other"), scan, hours[5])  # another table's
        counted = store.hourly_counts(session, owner, hours)
    assert [h.hour for h in counted] == hours
    assert [(h.scans, h.files_per_scan, h.commits) for h in counted if h.scans or h.commits] == [
        (2, 6.0, 0),
        (0, 0.0, 1),
        (1, 6.0, 0),
    ]
    assert counted[0].scans == 2 and counted[1].commits == 1 and counted[-1].scans == 1


# ---- what optimizing bought


def _cost(scans: int, files: float) -> ReadCost:
    return ReadCost(scans, files, 0.0, files * 100)


def test_a_benefit_compares_the_scans_before_and_after_beside_the_cpu_seconds() -> None:
    bought = benefit_of(_cost(20, 90.0), _cost(12, 10.0), 41.0, settled=True)
    assert bought.files_saved == 80.0 * 12
    assert bought.text == "cost 41 CPU-s; 12 scans since read 1/9 of the files (10 per scan, 90 before)"
    assert "read 80% of the files" in benefit_of(_cost(5, 10.0), _cost(5, 8.0), 1.0, False).text
    assert benefit_of(_cost(0, 0.0), _cost(5, 8.0), 1.0, False).text.endswith(
        "no scans in the day before it to compare with"
    )
    assert benefit_of(_cost(5, 9.0), _cost(0, 0.0), 1.0, False).text.endswith("no scans since")
    unjudged = benefit_of(_cost(0, 0.0), _cost(5, 8.0), 3.0, False)
    assert unjudged.files_saved == 0
    net = NetBenefit.of([bought, unjudged, benefit_of(_cost(4, 10.0), _cost(2, 5.0), 9.0, True)])
    assert (net.processes, net.cpu_seconds, net.files_saved) == (2, 50.0, 960.0 + 10.0)
    assert net.files_saved_per_cpu_second == pytest.approx(970 / 50)


def _optimized(table_id: int, planned: datetime, ended: datetime, cpu_ms: int) -> ProcessRow:
    """A successful minor optimizing process of `lake.db.t` that Spark measured `cpu_ms` of."""
    return ProcessRow(
        table_id=table_id,
        catalog_name="lake",
        db_name="db",
        table_name="t",
        group_name="default",
        action="optimizing",
        type="minor",
        status="success",
        plan_time=planned,
        end_time=ended,
        summary={"spark_cpu_ms": cpu_ms},
    )


def test_each_optimizing_process_shows_what_it_bought_and_keeps_it_once_settled(
    client: TestClient, managed_table: str
) -> None:
    ctx = _context(client)
    reads = ctx.reads
    planned, ended = NOW - timedelta(hours=3), NOW - timedelta(hours=2)
    with ctx.db.write() as session:
        table_id = session.scalar(select(TableIdentifierRow.table_id).where(TableIdentifierRow.table_name == "t"))
        assert table_id is not None
        process = _optimized(table_id, planned, ended, cpu_ms=41_000)
        session.add(process)
        session.flush()
        process_id = process.process_id
        owner = ("lake", "db", "t")
        for minutes, files in [(30 * 60, 500), (5 * 60, 90), (4 * 60, 90), (60, 10), (30, 10), (10, 10)]:
            report = scan_report({"result-data-files": {"value": files}}, 1, True, {}, "bi")
            store.record_read(session, owner, report, NOW - timedelta(minutes=minutes))
    reads.clock = lambda: NOW
    shown = client.get(f"/api/v1/processes/{process_id}").json()["benefit"]
    assert shown["before"]["scans"] == 2 and shown["before"]["files_per_scan"] == 90  # not the one 30 h ago
    assert shown["after"]["scans"] == 3 and shown["after"]["files_per_scan"] == 10
    assert shown["text"] == "cost 41 CPU-s; 3 scans since read 1/9 of the files (10 per scan, 90 before)"
    assert shown["settled"] is False and shown["files_saved"] == 240
    net = client.get("/api/v1/tables/lake/db/t").json()["optimizing_benefit"]
    assert net == {"processes": 1, "cpu_seconds": 41.0, "files_saved": 240.0, "files_saved_per_cpu_second": 240 / 41}
    assert client.get("/api/v1/resource-groups/default").json()["optimizing_benefit"]["processes"] == 0  # unsettled

    assert reads.settle_benefits(NOW) == 0  # the day after it is not over, and no process followed
    later = ended + timedelta(hours=25)
    with ctx.db.write() as session:  # a scan after the window does not count toward it
        store.record_read(session, owner, scan_report({"result-data-files": {"value": 1}}, 1, True, {}, "bi"), later)
    assert reads.settle_benefits(later) == 1 and reads.settle_benefits(later) == 0
    with ctx.db.read() as session:
        kept = session.get(ProcessRow, process_id)
        assert kept is not None and kept.summary["benefit"]["after"]["scans"] == 3
        assert kept.summary["spark_cpu_ms"] == 41_000
    group = client.get("/api/v1/resource-groups").json()
    assert next(g for g in group if g["name"] == "default")["optimizing_benefit"]["files_saved"] == 240
    assert client.get("/api/v1/processes?table=lake.db.t").json()[0]["benefit"]["settled"] is True


def test_a_later_process_closes_the_window_of_the_one_before(client: TestClient, managed_table: str) -> None:
    ctx = _context(client)
    with ctx.db.write() as session:
        table_id = session.scalar(select(TableIdentifierRow.table_id).where(TableIdentifierRow.table_name == "t"))
        assert table_id is not None
        rows = []
        for hours in (5, 2):  # the first ended 4 h ago, the second was planned 2 h ago
            row = _optimized(table_id, NOW - timedelta(hours=hours), NOW - timedelta(hours=hours - 1), 1000)
            session.add(row)
            rows.append(row)
        session.flush()
        for minutes in (200, 60):  # one scan between the two, one after the second
            store.record_read(
                session, ("lake", "db", "t"), scan_report({}, 1, True, {}, "bi"), NOW - timedelta(minutes=minutes)
            )
        first = rows[0].process_id
    assert ctx.reads.settle_benefits(NOW) == 1  # the first: the second started
    with ctx.db.read() as session:
        kept = session.get(ProcessRow, first)
        assert kept is not None and kept.summary["benefit"]["after"]["scans"] == 1
    ctx.reads.clock = lambda: NOW
    listed = client.get("/api/v1/processes?table=lake.db.t").json()  # newest first; the second measured now
    assert [(p["benefit"]["before"]["scans"], p["benefit"]["after"]["scans"]) for p in listed] == [(1, 1), (0, 1)]
    assert [p["benefit"]["settled"] for p in listed] == [False, True]
