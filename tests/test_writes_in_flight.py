"""The pieces of lakewarden's yielding to planned writes that need no server: the sanitized filter of a scan
report against a file's partition, and the registry of writes in flight with its learned hold."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from lakewarden.domain.writer_cadence import Cadence, cadence, of_document
from lakewarden.metadata.report_filters import ReportedFilter, sanitized
from lakewarden.services.rest_catalog.writes_in_flight import WritesInFlight, plans_a_write

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "part", StringType(), required=False),
    NestedField(3, "n", LongType(), required=False),
)
SPEC = PartitionSpec(
    PartitionField(2, 1000, IdentityTransform(), "part"),
    PartitionField(3, 1001, IdentityTransform(), "n"),
    PartitionField(1, 1002, BucketTransform(4), "id_bucket"),
    spec_id=0,
)


def file_in(part: str | None, n: int | None) -> DataFile:
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"/t/{part}/{n}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(part, n, 0),
        record_count=1,
        file_size_in_bytes=1,
    )


def test_partition_values_sanitize_as_icebergs_expression_util() -> None:
    # Iceberg 1.10's ExpressionUtil.sanitize gives "(hash-3c2569b2)" for the string "a": its bucket hash over
    # Integer.MAX_VALUE buckets (Spark's DELETE ... WHERE part = 'a' reports it so)
    assert sanitized("a", StringType()) == "(hash-3c2569b2)"
    assert [sanitized(v, LongType()) for v in (0, 7, -7, 10, 99, 100, -1000)] == [
        "(1-digit-int)",
        "(1-digit-int)",
        "(1-digit-int)",
        "(2-digit-int)",
        "(2-digit-int)",
        "(3-digit-int)",
        "(4-digit-int)",
    ]
    # dates and times in strings are sanitized by their distance from now, which is not reproduced: unknown
    assert sanitized("2026-12-07", StringType()) is None
    assert sanitized("12:30", StringType()) is None
    assert sanitized(None, StringType()) is None


def test_a_reported_filter_rules_out_only_what_its_sanitized_values_decide() -> None:
    a, b, ten = sanitized("a", StringType()), sanitized("b", StringType()), "(2-digit-int)"

    def may(expression: object, part: str | None = "a", n: int | None = 5) -> bool:
        return ReportedFilter(expression, SCHEMA, {0: SPEC}).may_match(file_in(part, n), 0)

    assert may({"type": "eq", "term": "part", "value": a})
    assert not may({"type": "eq", "term": "part", "value": b})
    assert not may({"type": "eq", "term": "n", "value": ten})  # 5 has one digit
    assert may({"type": "in", "term": "part", "values": [b, a]})
    assert not may({"type": "in", "term": "part", "values": [b]})
    both = {"type": "and", "left": {"type": "eq", "term": "part", "value": b}, "right": {"type": "eq", "term": "id"}}
    assert not may(both)
    assert may({"type": "or", "left": both, "right": {"type": "lt", "term": "id", "value": "(1-digit-int)"}})
    # what it cannot decide may match: a negation, an inequality, a column not partitioned by identity, a
    # transform's term, a null partition value, a spec it does not know, an expression it cannot read
    assert may({"type": "not", "child": {"type": "eq", "term": "part", "value": b}})
    assert may({"type": "not-eq", "term": "part", "value": a})
    assert may({"type": "eq", "term": "id", "value": "(1-digit-int)"})
    assert may({"type": "eq", "term": {"type": "transform", "transform": "bucket[4]", "term": "id"}, "value": "x"})
    assert may({"type": "eq", "term": "part", "value": b}, part=None)
    assert ReportedFilter({"type": "eq", "term": "part", "value": b}, SCHEMA, {}).may_match(file_in("a", 5), 0)
    assert may(True) and may(None) and may("garbage") and not may(False)


def test_a_row_level_scan_reads_the_file_and_position_columns() -> None:
    assert plans_a_write([1, 2147483646, 2147483645, 2147483643, 4, 2147483642])  # Spark's merge-on-read DELETE
    assert plans_a_write([1, 2147483646])  # copy-on-write reads the file's name
    assert not plans_a_write([1, 2, 3])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_write_in_flight_holds_until_its_application_commits_within_a_learned_hold() -> None:
    clock = Clock()
    flights = WritesInFlight(max_hold=20.0, clock=clock)
    table = ("lake", "db", "t")
    assert flights.hold(table) == 20.0 and flights.in_flight(table) == []
    flights.planned(table, {"app-id": "job-1"})
    assert flights.in_flight(table) == ["job-1"]
    flights.committed(table, {"app-id": "job-2"})  # another application's commit ends nothing
    flights.committed(("lake", "db", "other"), {"app-id": "job-1"})
    assert flights.in_flight(table) == ["job-1"]
    clock.now += 1.5
    flights.committed(table, {"app-id": "job-1"})
    assert flights.in_flight(table) == []
    # learned: twice the longest recent write, at least the floor
    assert flights.hold(table) == pytest.approx(3.0)
    flights.planned(table, {"app-id": "job-1"})
    clock.now += 3.5  # past the hold: a write that never committed (failed, or only read) is forgotten
    assert flights.in_flight(table) == []
    flights.planned(table, {})  # a client that does not name its application is one "unknown" application
    assert flights.in_flight(table) == ["unknown"]


def test_waiting_for_writes_in_flight_ends_at_their_commit_or_the_timeout() -> None:
    flights = WritesInFlight(max_hold=20.0)
    table = ("lake", "db", "t")
    assert flights.wait_clear(table, 0.0)  # nothing in flight: at once
    flights.planned(table, {"app-id": "job"})
    assert not flights.wait_clear(table, 0.2)
    ender = threading.Timer(0.3, lambda: flights.committed(table, {"app-id": "job"}))
    ender.start()
    assert flights.wait_clear(table, 10.0)
    ender.join()


def test_a_tables_row_level_writers_cadence_is_learned_from_its_snapshots() -> None:
    def snap(at: int, operation: str, app: str | None = "job", **extra: str) -> tuple[int, dict[str, str]]:
        return at, {"operation": operation, **({"app-id": app} if app else {}), **extra}

    # appends alone (a stream): nothing to wait for
    assert cadence([snap(t * 1000, "append") for t in range(10)]) is None
    # a job deleting and appending every ~2 s, beside another application's appends and lakewarden's own rewrites
    history = [snap(t * 2000, "delete" if t % 3 == 0 else "append") for t in range(10)]
    history += [snap(500, "append", app="other"), snap(7000, "replace", **{"lakewarden.process-id": "3"})]
    learned = cadence(sorted(history))
    assert learned == Cadence(last_write_ms=18_000, pause_ms=4_000)  # twice its median gap
    assert learned.busy(21_000) and not learned.busy(22_000)
    unreadable: Any = {"pause_ms": "x"}  # as a stored document might hold it
    assert of_document(learned.document()) == learned and of_document(unreadable) is None
    # bounded both ways: a lone row-level commit (no gap known), a job of sub-second gaps
    assert cadence([snap(0, "overwrite")]) == Cadence(0, 30_000)
    assert cadence([snap(t * 100, "overwrite") for t in range(5)]) == Cadence(400, 1_000)
    # an upsert stream as Flink writes it (equality deletes only) names no file: nothing to wait for; a commit
    # that adds position deletes too does
    upserts = [snap(t * 1000, "overwrite", **{"added-equality-delete-files": "1"}) for t in range(5)]
    assert cadence(upserts) is None
    mixed = [
        *upserts,
        snap(6000, "overwrite", **{"added-equality-delete-files": "1", "added-position-delete-files": "1"}),
    ]
    assert cadence(mixed) == Cadence(6000, 2_000)
