"""The evaluator with plain values: no Spark, no database."""

from __future__ import annotations

import pytest

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.evaluator import (
    OptimizingClock,
    OptimizingType,
    PartitionEvaluation,
    evaluate_partition,
    evaluate_table,
)
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey, group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig

MB = 1024 * 1024
P = PartitionKey(0, "cat=a", ("a",))
Q = PartitionKey(0, "cat=b", ("b",))
HOUR = 3_600_000
NOW = 100 * HOUR


def config(**overrides: str) -> OptimizingConfig:
    # target 128 MiB: fragment <= 16 MiB, undersized <= 96 MiB
    return OptimizingConfig.of({f"self-optimizing.{k.replace('_', '-')}": v for k, v in overrides.items()})


def data(name: str, size_mb: float, records: int = 1000, seq: int = 1, part: PartitionKey = P) -> DataFile:
    return DataFile(f"/t/data/{name}.parquet", part, int(size_mb * MB), records, seq)


def pos(name: str, records: int, seq: int, target: str | None = None, part: PartitionKey = P) -> DeleteFile:
    ref = f"/t/data/{target}.parquet" if target else None
    return DeleteFile(f"/t/data/{name}-deletes.parquet", part, False, 4096, records, seq, ref)


def eq(name: str, records: int, seq: int, part: PartitionKey = P) -> DeleteFile:
    return DeleteFile(f"/t/data/{name}-eq.parquet", part, True, 4096, records, seq)


def one(
    files: list[DataFile],
    deletes: list[DeleteFile] | None = None,
    cfg: OptimizingConfig | None = None,
    clock: OptimizingClock | None = None,
) -> PartitionEvaluation:
    (part,) = group_by_partition(files, deletes or [])
    return evaluate_partition(part, cfg or config(), clock or OptimizingClock(NOW, last_minor_ms=NOW))


def test_file_classes() -> None:
    r = one([data("f1", 1), data("f2", 16), data("u1", 16.5), data("u2", 96), data("s1", 97), data("s2", 300)])
    assert (r.fragment_files, r.undersized_files, r.segment_files) == (2, 2, 2)
    assert r.type is None
    assert "2 fragment(s) + 0 equality-delete file(s) < minor.trigger.file-count 12" in r.reasons[0]


def test_minor_by_file_count() -> None:
    r = one([data(f"f{i}", 1) for i in range(12)])
    assert r.type is OptimizingType.MINOR
    assert r.reasons == ["12 fragment(s) + 0 equality-delete file(s) >= minor.trigger.file-count 12"]


def test_equality_deletes_count_as_small_files() -> None:
    files = [data(f"f{i}", 1, seq=1) for i in range(10)]
    r = one(files, [eq("e1", 5, seq=2), eq("e2", 5, seq=3)])
    assert r.type is OptimizingType.MINOR
    assert "10 fragment(s) + 2 equality-delete file(s) >= minor.trigger.file-count 12" in r.reasons[0]


def test_minor_by_interval() -> None:
    files = [data("f1", 1), data("f2", 1)]
    waiting = one(files, clock=OptimizingClock(NOW, last_minor_ms=NOW - HOUR // 2))
    assert waiting.type is None
    assert "minor.trigger.interval due in 30min" in waiting.reasons[0]
    due = one(files, clock=OptimizingClock(NOW, last_minor_ms=NOW - 2 * HOUR))
    assert due.type is OptimizingType.MINOR
    assert "minor.trigger.interval (60min) has passed" in due.reasons[0]
    # a single fragment is never worth a minor optimizing on its own
    assert one([data("f1", 1)], clock=OptimizingClock(NOW)).type is None


def test_minor_combines_position_deletes_of_a_segment() -> None:
    r = one([data("s1", 200, records=1000, seq=1)], [pos("d1", 1, 2, "s1"), pos("d2", 1, 3, "s1")])
    assert r.type is OptimizingType.MINOR
    assert "1 segment(s) have more than one position-delete file to combine" in r.reasons


def test_major_by_delete_ratio() -> None:
    r = one([data("s1", 200, records=1000, seq=1)], [pos("d1", 101, 2, "s1")])
    assert r.type is OptimizingType.MAJOR
    assert "more than 10% of their rows position-deleted" in r.reasons[0]
    assert "s1.parquet (10%)" in r.reasons[0]
    # exactly at the ratio is not over it
    assert one([data("s1", 200, records=1000, seq=1)], [pos("d1", 100, 2, "s1")]).type is None


def test_major_by_undersized_segments() -> None:
    # 3 x 50 MiB = 150 MiB >= 128 MiB and 50 + 50 <= 128
    assert one([data(f"u{i}", 50) for i in range(3)]).type is OptimizingType.MAJOR
    # 2 x 90 MiB add up to enough, but the two smallest do not fit in one target
    r = one([data("u1", 90), data("u2", 90)])
    assert r.type is None


def test_full_on_its_interval_beats_major_and_minor() -> None:
    files = [data(f"f{i}", 1) for i in range(12)] + [data("s1", 200, seq=1)]
    cfg = config(**{"full.trigger.interval": str(24 * HOUR)})
    r = one(files, [pos("d1", 500, 2, "s1")], cfg=cfg, clock=OptimizingClock(NOW, last_full_ms=NOW - 25 * HOUR))
    assert r.type is OptimizingType.FULL
    assert "full.trigger.interval (24.0h) has passed" in r.reasons[0]
    assert "1 delete file(s), 12 fragments" in r.reasons[0]
    # not yet due: the same files are major (delete ratio), which beats minor
    r = one(files, [pos("d1", 500, 2, "s1")], cfg=cfg, clock=OptimizingClock(NOW, last_full_ms=NOW - HOUR))
    assert r.type is OptimizingType.MAJOR
    # due, but nothing to rewrite
    r = one([data("s1", 200)], cfg=cfg, clock=OptimizingClock(NOW, last_full_ms=0))
    assert r.type is None
    assert "nothing needs rewriting" in r.reasons[0]


def test_sequence_numbers_decide_which_deletes_apply() -> None:
    files = [data("old", 200, records=100, seq=1), data("new", 200, records=100, seq=5)]
    # a partition-scoped position delete at seq 3 applies to `old` only; an equality delete at seq 5
    # does not apply to data written at seq 5
    (part,) = group_by_partition(files, [pos("p", 50, 3), eq("e", 1, 5)])
    assert part.deletes_of["/t/data/old.parquet"].position_records == 50
    assert part.deletes_of["/t/data/old.parquet"].equality_files == 1
    assert "/t/data/new.parquet" not in part.deletes_of
    # a file-scoped delete applies to its file only
    (part,) = group_by_partition(files, [pos("p", 50, 6, "new")])
    assert part.deletes_of["/t/data/new.parquet"].position_records == 50
    assert "/t/data/old.parquet" not in part.deletes_of


def test_deletes_without_data_are_dangling() -> None:
    parts = group_by_partition([data("a", 1)], [pos("x", 3, 2, part=Q)])
    assert [p.partition for p in parts] == [P]
    assert parts[0].delete_files == []


def test_table_verdict_is_the_heaviest_partition() -> None:
    files = [data(f"f{i}", 1) for i in range(12)] + [data(f"u{i}", 50, part=Q) for i in range(3)]
    table = evaluate_table(7, group_by_partition(files, []), config(), OptimizingClock(NOW, last_minor_ms=NOW))
    assert table.type is OptimizingType.MAJOR
    assert [p.type for p in table.pending] == [OptimizingType.MINOR, OptimizingType.MAJOR]
    assert table.reasons == ["2 of 2 partition(s) need optimizing (1 major, 1 minor)"]
    assert table.summary()["pending_partitions"] == 2


def test_disabled_and_empty_tables() -> None:
    files = group_by_partition([data(f"f{i}", 1) for i in range(20)], [])
    off = evaluate_table(1, files, config(enabled="false"), OptimizingClock(NOW))
    assert (off.type, off.reasons) == (None, ["self-optimizing.enabled is false"])
    assert evaluate_table(None, [], config(), OptimizingClock(NOW)).reasons == ["the table has no snapshot yet"]
    assert evaluate_table(3, [], config(), OptimizingClock(NOW)).reasons == ["the table has no data files"]


def test_cost_counts_bytes_twice_and_opening_files() -> None:
    r = one([data(f"f{i}", 1) for i in range(12)])
    assert r.cost == 2 * 12 * MB + 12 * 4 * MB


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("target-size", "big"),
        ("quota", "-1"),
        ("enabled", "yes"),
        ("min-target-size-ratio", "2"),
        ("fragment-ratio", "0"),
    ],
)
def test_bad_table_properties_name_the_property(key: str, value: str) -> None:
    with pytest.raises(InvalidField) as info:
        OptimizingConfig.of({f"self-optimizing.{key}": value})
    assert info.value.field == f"self-optimizing.{key}"
