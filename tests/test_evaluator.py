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
    # due, but a lone file with no deletes has no company to be rewritten with (Amoro drops such a task)
    r = one([data("s1", 200)], cfg=cfg, clock=OptimizingClock(NOW, last_full_ms=0))
    assert r.type is None and r.groups == []
    assert "no file group would change anything" in r.reasons[-1]
    r = one([data("s1", 200)], cfg=config(**{"full.trigger.interval": "1", "full.rewrite-all-files": "false"}))
    assert r.type is None
    assert "nothing needs rewriting" in r.reasons[0]


def test_sequence_numbers_decide_which_deletes_apply() -> None:
    files = [data("old", 200, records=100, seq=1), data("new", 200, records=100, seq=5)]
    # a partition-scoped position delete at seq 3 applies to `old` only; an equality delete at seq 5
    # does not apply to data written at seq 5
    (part,) = group_by_partition(files, [pos("p", 50, 3), eq("e", 1, 5)])
    old, new = files
    assert part.applied(old).position_records == 50
    assert part.applied(old).equality_files == 1
    assert not part.applied(new).any
    # a file-scoped delete applies to its file only, and is that file's own
    (part,) = group_by_partition(files, [pos("p", 50, 6, "new")])
    assert part.applied(new).position_records == 50 and part.applied(new).own_position_file
    assert not part.applied(old).any


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
        ("branches", "audit,,staging"),
    ],
)
def test_bad_table_properties_name_the_property(key: str, value: str) -> None:
    with pytest.raises(InvalidField) as info:
        OptimizingConfig.of({f"self-optimizing.{key}": value})
    assert info.value.field == f"self-optimizing.{key}"


def test_branches_to_optimize_are_named_besides_main() -> None:
    assert OptimizingConfig.of({}).branches == ()
    named = OptimizingConfig.of({"self-optimizing.branches": " audit, main,staging ,audit"})
    assert named.branches == ("audit", "staging")  # main always, and once each


# ---- what a plan takes, file by file (Amoro's CommonPartitionEvaluator / BinPackingTaskSplitter)


def names(files: tuple[DataFile, ...] | list[DataFile]) -> list[str]:
    return sorted(f.path.rsplit("/", 1)[1].removesuffix(".parquet") for f in files)


def groups(r: PartitionEvaluation) -> list[tuple[list[str], list[str], list[str]]]:
    return sorted(
        (names(g.rewrite), names(g.rewrite_pos), sorted(d.path.rsplit("/", 1)[1] for d in g.deletes)) for g in r.groups
    )


def test_a_lone_undersized_segment_is_left_alone_and_undersized_pairs_are_rewritten_under_minor() -> None:
    frags = [data(f"f{i}", 1) for i in range(12)]
    lone = one([*frags, data("u1", 50), data("s1", 200)])
    assert lone.type is OptimizingType.MINOR
    assert groups(lone) == [(names(frags), [], [])]
    paired = one([*frags, data("u1", 50), data("u2", 40), data("s1", 200)])
    assert groups(paired) == sorted([(names(frags), [], []), (["u1", "u2"], [], [])])


def test_an_undersized_segment_over_the_delete_ratio_is_rewritten_not_packed() -> None:
    r = one([data("u1", 50, records=100), data("s1", 200)], [pos("d", 20, 2, "u1")])
    assert (r.rewrite_segment_files, r.undersized_files) == (1, 0)
    assert r.type is OptimizingType.MAJOR
    assert groups(r) == [(["u1"], [], ["d-deletes.parquet"])]


def test_a_lone_undersized_segment_with_equality_deletes_gets_its_deletes_rewritten() -> None:
    frags = [data(f"f{i}", 1, seq=1) for i in range(12)]
    r = one([*frags, data("u1", 50, seq=1)], [eq("e", 5, seq=2)])
    assert groups(r) == [(names(frags), ["u1"], ["e-eq.parquet"])]


def test_equality_deletes_on_segments_become_position_deletes() -> None:
    """A segment with equality deletes has them rewritten; the delete file counts as a small file."""
    files = [data("s1", 200, seq=1), data("s2", 300, seq=1), data("s3", 200, seq=3)]
    r = one(files, [eq("e1", 5, seq=2), eq("e2", 5, seq=2)], cfg=config(**{"minor.trigger.file-count": "2"}))
    assert r.type is OptimizingType.MINOR and r.rewrite_pos_files == 2 and r.segment_files == 1
    # each segment is bigger than a group can hold (max(target-size, max-task-size-bytes)): a group each
    assert groups(r) == [([], [s], ["e1-eq.parquet", "e2-eq.parquet"]) for s in ("s1", "s2")]


def test_a_shared_position_delete_file_counts_for_each_segment() -> None:
    """A partition-scoped position-delete file (Iceberg before 1.8, or write.delete.granularity=partition)
    applies to every older data file of its partition: its rows count toward each one's ratio, and a segment
    whose only position-delete file is shared is not as combined as it gets."""
    files = [data("s1", 200, records=1000, seq=1), data("s2", 200, records=1000, seq=1)]
    r = one(files, [pos("shared", 150, 2)])
    assert r.rewrite_segment_files == 2 and r.type is OptimizingType.MAJOR
    assert groups(r) == [([s], [], ["shared-deletes.parquet"]) for s in ("s1", "s2")]
    few = one(files, [pos("shared", 50, 2)], cfg=config(**{"minor.trigger.interval": "0"}))
    assert few.rewrite_pos_files == 2 and few.type is None  # taken when planned, but no trigger of its own


def test_full_without_rewrite_all_files_rewrites_small_files_and_files_with_deletes() -> None:
    cfg = config(**{"full.trigger.interval": "1", "full.rewrite-all-files": "false"})
    files = [data("f1", 1), data("u1", 50), data("s1", 200, seq=1), data("s2", 200, seq=1)]
    r = one(files, [pos("d", 1, 2, "s2")], cfg=cfg)
    assert r.type is OptimizingType.FULL
    assert groups(r) == [(["f1", "u1"], [], []), (["s2"], [], ["d-deletes.parquet"])]
    # with rewrite-all, s1 is taken too, but alone in its group with no deletes it would change nothing
    every = one(files, [pos("d", 1, 2, "s2")], cfg=config(**{"full.trigger.interval": "1"}))
    assert groups(every) == [(["f1", "u1"], [], []), (["s2"], [], ["d-deletes.parquet"])]
    assert every.rewrite_segment_files == 3


def test_a_large_partition_is_cut_into_groups_of_the_task_size() -> None:
    frags = [data(f"f{i:02}", 10) for i in range(30)]  # 300 MiB of fragments, groups of at most 128 MiB
    r = one(frags, cfg=config(**{"fragment-ratio": "4"}))
    assert [len(g.rewrite) for g in r.groups] == [12, 12, 6]
    assert all(g.data_bytes <= 128 * MB for g in r.groups)


def test_equality_deletes_of_an_unpartitioned_spec_apply_to_every_partition() -> None:
    unpartitioned = PartitionKey(1, "", ())
    parts = group_by_partition(
        [data("a1", 200, seq=1), data("b1", 200, seq=3, part=Q)], [eq("g", 1, 2, part=unpartitioned)]
    )
    assert [[d.path for d in p.delete_files] for p in parts] == [["/t/data/g-eq.parquet"]] * 2
    a, b = parts
    assert a.applied(a.data[0]).equality_files == 1 and not b.applied(b.data[0]).any


def test_the_pending_check_agrees_with_cutting_the_groups() -> None:
    """The evaluator decides whether a partition's plan changes anything without cutting its groups; on
    many random layouts that answer is the planner's: a pending partition has groups, and a partition
    turned down for having none has none."""
    import random

    from lakewarden.domain.evaluator import _split

    rng = random.Random(13)
    seen = {"pending": 0, "turned down": 0}
    for case in range(1500):
        n = rng.randrange(1, 14)
        files = [
            data(f"d{i}", rng.choice([0.5, 1, 10, 20, 40, 60, 90, 120, 200]), seq=rng.randrange(1, 4)) for i in range(n)
        ]
        deletes: list[DeleteFile] = []
        for j in range(rng.randrange(0, 3)):
            if rng.random() < 0.5:
                target = rng.choice([None, f"d{rng.randrange(n)}"])
                deletes.append(pos(f"p{j}", rng.randrange(1, 300), rng.randrange(1, 5), target))
            else:
                deletes.append(eq(f"e{j}", 3, rng.randrange(1, 5)))
        cfg = config(
            **{
                "minor.trigger.file-count": str(rng.randrange(1, 4)),
                "full.trigger.interval": rng.choice(["-1", "1"]),
                "full.rewrite-all-files": rng.choice(["true", "false"]),
                "max-task-size-bytes": str(rng.choice([1, 64, 128, 512]) * MB),
            }
        )
        r = one(files, deletes, cfg=cfg)
        (part,) = group_by_partition(files, deletes)
        if r.type is not None:
            assert r.groups, case
            seen["pending"] += 1
        elif r.reasons and "no file group would change anything" in r.reasons[-1]:
            assert r._rules is not None
            assert _split(r, cfg, part, r._rules) == [], case
            seen["turned down"] += 1
    assert min(seen.values()) >= 30, seen


def test_a_partition_whose_rewrite_could_not_reduce_its_files_waits_for_them_to_change() -> None:
    cfg = config(**{"full.trigger.interval": "1", "max-task-size-bytes": str(512 * MB)})
    files = [data("s1", 200), data("s2", 200)]
    assert one(files, cfg=cfg).type is OptimizingType.FULL
    marks = {"0:cat=a": ["/t/data/s1.parquet", "/t/data/s2.parquet"]}
    (part,) = group_by_partition(files, [])
    waiting = evaluate_table(1, [part], cfg, OptimizingClock(NOW), marks)
    assert waiting.type is None
    assert "without reducing their number" in waiting.partitions[0].reasons[-1]
    # a new file in the partition: planned again
    (changed,) = group_by_partition([*files, data("f1", 1)], [])
    assert evaluate_table(1, [changed], cfg, OptimizingClock(NOW), marks).type is OptimizingType.FULL


def test_a_verdict_says_when_a_time_based_trigger_can_next_change_it() -> None:
    """The evaluator reads a table that does not change only then (services/tables/evaluation.py)."""
    waiting = [data("f1", 1), data("f2", 1)]  # two fragments, under minor.trigger.file-count
    clock = OptimizingClock(NOW, last_minor_ms=NOW - HOUR // 2, last_full_ms=NOW - HOUR)
    table = evaluate_table(1, group_by_partition(waiting, []), config(), clock)
    assert table.type is None and table.next_trigger_ms == NOW + HOUR // 2 + 1  # minor.trigger.interval 1h
    assert table.summary()["next_trigger_ms"] == table.next_trigger_ms
    # a full interval that passes first is the next trigger; one already passed is not (it has fired)
    cfg = config(**{"full.trigger.interval": str(HOUR + 10)})
    assert evaluate_table(1, group_by_partition(waiting, []), cfg, clock).next_trigger_ms == NOW + 11
    passed = OptimizingClock(NOW, last_minor_ms=NOW - HOUR // 2, last_full_ms=NOW - 2 * HOUR)
    fired = evaluate_table(1, group_by_partition(waiting, []), cfg, passed)
    assert fired.type is OptimizingType.FULL and fired.next_trigger_ms is None
    # nothing that time can trigger: a lone fragment, a table already pending on the interval, the interval off
    lone = evaluate_table(1, group_by_partition([data("f1", 1)], []), config(), clock)
    assert lone.next_trigger_ms is None
    due = OptimizingClock(NOW, last_minor_ms=NOW - 2 * HOUR)
    pending = evaluate_table(1, group_by_partition(waiting, []), config(), due)
    assert pending.type is OptimizingType.MINOR and pending.next_trigger_ms is None
    off = config(**{"minor.trigger.interval": "-1"})
    assert evaluate_table(1, group_by_partition(waiting, []), off, clock).next_trigger_ms is None
