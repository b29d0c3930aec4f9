"""The planner with plain values: tasks of file groups, bounded by the task size, and who removes which delete file."""

from __future__ import annotations

import pytest

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.evaluator import OptimizingClock, OptimizingType, evaluate_table
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey, group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.planning import OptimizingPlan, output_sizing, plan_tasks, taken_partitions

MB = 1024 * 1024
NOW = 10**12


def cfg(**props: str) -> OptimizingConfig:
    return OptimizingConfig.of({f"self-optimizing.{k}": v for k, v in props.items()})


def key(part: str) -> PartitionKey:
    return PartitionKey(0, f"p={part}", (part,))


def fragments(part: str, n: int, size_mb: float = 1, seq: int = 1) -> list[DataFile]:
    return [DataFile(f"/d/{part}-{i}", key(part), int(size_mb * MB), 10, seq) for i in range(n)]


def plan(files: list[DataFile], config: OptimizingConfig, deletes: list[DeleteFile] | None = None) -> OptimizingPlan:
    verdict = evaluate_table(1, group_by_partition(files, deletes or []), config, OptimizingClock(NOW, NOW, NOW))
    return plan_tasks(verdict, config)


def test_partitions_are_binned_up_to_the_task_size() -> None:
    # five partitions of 12 x 4 MiB fragments (48 MiB each); tasks of at most 100 MiB hold two each
    files = [f for part in "abcde" for f in fragments(part, 12, 4)]
    tasks = plan(files, cfg(**{"max-task-size-bytes": str(100 * MB)})).tasks
    assert [len(t.partitions) for t in tasks] == [2, 2, 1]
    assert all(t.input_bytes <= 100 * MB for t in tasks)
    assert sorted(p["path"] for t in tasks for p in t.partitions) == [f"p={x}" for x in "abcde"]
    assert all(t.type is OptimizingType.MINOR for t in tasks)
    assert tasks[0].partitions[0]["values"] == ["a"]
    assert "12 fragment(s)" in tasks[0].reasons[0]


def test_a_partition_bigger_than_a_task_is_spread_over_tasks() -> None:
    # 40 fragments of 10 MiB (fragment-ratio 4: <= 32 MiB): 400 MiB in tasks of at most 128 MiB
    config = cfg(**{"fragment-ratio": "4"})
    tasks = plan(fragments("a", 40, 10), config).tasks
    assert [len(t.groups[0].rewrite) for t in tasks] == [12, 12, 12, 4]
    assert all(t.input_bytes <= config.max_task_size for t in tasks)
    assert sorted(f.path for t in tasks for g in t.groups for f in g.rewrite) == sorted(f"/d/a-{i}" for i in range(40))


def test_one_type_per_task() -> None:
    files = fragments("a", 12) + [DataFile(f"/d/u{i}", key("b"), 50 * MB, 10, 1) for i in range(3)]
    tasks = plan(files, cfg()).tasks
    assert [t.type for t in tasks] == [OptimizingType.MAJOR, OptimizingType.MINOR]


def test_a_delete_file_is_removed_by_the_task_that_holds_all_its_data_files() -> None:
    files = fragments("a", 12, seq=1) + fragments("b", 12, seq=1)
    deletes = [DeleteFile("/d/eq-a", key("a"), True, 1000, 5, 2), DeleteFile("/d/eq-b", key("b"), True, 1000, 5, 2)]
    planned = plan(files, cfg(**{"max-task-size-bytes": str(12 * MB)}), deletes)
    assert [t.remove_deletes for t in planned.tasks] == [["/d/eq-a"], ["/d/eq-b"]]
    assert planned.shared_deletes == []


def test_a_delete_file_shared_by_several_tasks_is_removed_last() -> None:
    files = fragments("a", 30, 10, seq=1)  # three groups of the one partition, three tasks
    shared = DeleteFile("/d/eq", key("a"), True, 1000, 5, 2)
    planned = plan(files, cfg(**{"fragment-ratio": "4"}), [shared])
    assert len(planned.tasks) == 3
    assert all(t.remove_deletes == [] for t in planned.tasks)
    assert all(g.deletes == (shared,) for t in planned.tasks for g in t.groups)
    assert planned.shared_deletes == ["/d/eq"]


def test_a_delete_file_that_applies_to_a_file_not_planned_is_only_read() -> None:
    # an equality delete of an unpartitioned spec applies to both partitions; only `a` is pending
    unpartitioned = PartitionKey(1, "", ())
    segment = DataFile("/d/segment", key("b"), 200 * MB, 100_000, 1)
    deletes = [
        DeleteFile("/d/global", unpartitioned, True, 1000, 5, 2),
        DeleteFile("/d/eq-a", key("a"), True, 10, 1, 2),
    ]
    planned = plan([*fragments("a", 12), segment], cfg(), deletes)
    assert [p["path"] for t in planned.tasks for p in t.partitions] == ["p=a"]
    assert [d.path for d in planned.tasks[0].groups[0].deletes] == ["/d/eq-a", "/d/global"]
    assert planned.tasks[0].remove_deletes == ["/d/eq-a"] and planned.shared_deletes == []
    # a segment whose only position-delete file is its own is left alone, and that file stays
    own = DeleteFile("/d/own", key("a"), False, 10, 1, 2, "/d/segment-a")
    kept = plan([*fragments("a", 12), DataFile("/d/segment-a", key("a"), 200 * MB, 100_000, 1)], cfg(), [own])
    assert [len(g.rewrite_pos) for t in kept.tasks for g in t.groups] == [0]
    assert kept.tasks[0].remove_deletes == [] and kept.shared_deletes == []


def test_output_sizing_follows_iceberg() -> None:
    target = 128 * MB
    assert output_sizing(10 * MB, target).expected_files == 1
    # 10.1 targets: the remainder is spread, 10 files; 10.8 targets: the remainder is a file of its own
    assert output_sizing(int(10.1 * target), target).expected_files == 10
    assert output_sizing(int(10.8 * target), target).expected_files == 11
    sizing = output_sizing(int(10.1 * target), target)
    assert sizing.max_file_size == int(1.4 * target)
    assert target < sizing.split_size <= sizing.max_file_size


def test_a_process_takes_the_costliest_partitions_its_threads_can_run() -> None:
    """Amoro's bound: partitions by cost, highest first, until their cost passes threads x
    max-input-file-size-per-thread; the one that passes it is taken too, the rest wait for the next process."""
    files = fragments("a", 12, 1) + fragments("b", 12, 4) + fragments("c", 12, 2) + fragments("d", 12, 3)
    verdict = evaluate_table(1, group_by_partition(files, []), cfg(), OptimizingClock(NOW, NOW, NOW))
    costs = {p.partition.path: p.cost for p in verdict.pending}
    assert costs["p=b"] > costs["p=d"] > costs["p=c"] > costs["p=a"]

    def taken(max_input: int | None) -> list[str]:
        return [p.partition.path for p in taken_partitions(verdict, max_input)]

    assert taken(None) == ["p=a", "p=b", "p=c", "p=d"]  # unbounded: every pending partition, as evaluated
    assert taken(1) == ["p=b"]  # always at least one
    assert taken(costs["p=b"]) == ["p=b", "p=d"]  # b alone does not pass the bound: d passes it
    assert taken(costs["p=b"] + costs["p=d"] + 1) == ["p=b", "p=d", "p=c"]
    planned = plan_tasks(verdict, cfg(), costs["p=b"])
    assert sorted(p["path"] for t in planned.tasks for p in t.partitions) == ["p=b", "p=d"]
    # a delete file that applies to a partition left for later stays
    deletes = [DeleteFile("/d/eq-a", key("a"), True, 10, 1, 2), DeleteFile("/d/eq-b", key("b"), True, 10, 1, 2)]
    later = evaluate_table(1, group_by_partition(files, deletes), cfg(), OptimizingClock(NOW, NOW, NOW))
    bounded = plan_tasks(later, cfg(), 1)
    assert [p["path"] for t in bounded.tasks for p in t.partitions] == ["p=b"]
    assert [t.remove_deletes for t in bounded.tasks] == [["/d/eq-b"]] and bounded.shared_deletes == []


def test_the_open_file_cost_is_the_tables_read_split_open_file_cost() -> None:
    """Amoro weighs each file of a plan by the table's read.split.open-file-cost (4 MB when unset): tiny files
    weigh what opening them costs, so a lower setting lets a process take more of them."""
    files = fragments("a", 300, 0.004) + fragments("b", 300, 0.004)
    clock = OptimizingClock(NOW, NOW, NOW)
    default = evaluate_table(1, group_by_partition(files, []), cfg(), clock)
    cheap_config = OptimizingConfig.of({"read.split.open-file-cost": str(64 * 1024)})
    cheap = evaluate_table(1, group_by_partition(files, []), cheap_config, clock)
    data = 2 * 300 * int(0.004 * MB)
    assert [p.cost for p in default.pending] == [data + 300 * 4 * MB] * 2
    assert [p.cost for p in cheap.pending] == [data + 300 * 64 * 1024] * 2
    bound = 512 * MB  # one thread's default
    assert len(taken_partitions(default, bound)) == 1
    assert len(taken_partitions(cheap, bound)) == 2
    assert all(g.cost == 2 * g.data_bytes + len(g.rewrite) * 64 * 1024 for p in cheap.pending for g in p.groups)
    assert plan_tasks(cheap, cheap_config, bound).tasks[0].cost_bytes == sum(p.cost for p in cheap.pending)
    with pytest.raises(InvalidField, match=r"read\.split\.open-file-cost"):
        OptimizingConfig.of({"read.split.open-file-cost": "4MB"})
