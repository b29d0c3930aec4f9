"""The planner with plain values."""

from __future__ import annotations

from lakewarden.domain.evaluator import OptimizingClock, OptimizingType, evaluate_table
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey, group_by_partition
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.planning import NEVER, TaskPlan, plan_tasks, rewrite_options

MB = 1024 * 1024
NOW = 10**12


def cfg(**props: str) -> OptimizingConfig:
    return OptimizingConfig.of({f"self-optimizing.{k}": v for k, v in props.items()})


def fragments(part: str, n: int, size_mb: float = 1) -> list[DataFile]:
    key = PartitionKey(0, f"p={part}", (part,))
    return [DataFile(f"/d/{part}-{i}", key, int(size_mb * MB), 10, 1) for i in range(n)]


def plan(files: list[DataFile], config: OptimizingConfig, deletes: list[DeleteFile] | None = None) -> list[TaskPlan]:
    verdict = evaluate_table(1, group_by_partition(files, deletes or []), config, OptimizingClock(NOW, NOW, NOW))
    return plan_tasks(verdict, config)


def test_partitions_are_binned_up_to_the_task_size() -> None:
    # five partitions of 12 x 4 MiB fragments (48 MiB each); tasks of at most 100 MiB hold two each
    files = [f for part in "abcde" for f in fragments(part, 12, 4)]
    tasks = plan(files, cfg(**{"max-task-size-bytes": str(100 * MB)}))
    assert [len(t.partitions) for t in tasks] == [2, 2, 1]
    assert all(t.input_bytes <= 100 * MB for t in tasks)
    assert sorted(p["path"] for t in tasks for p in t.partitions) == [f"p={x}" for x in "abcde"]
    assert all(t.type is OptimizingType.MINOR for t in tasks)
    assert tasks[0].partitions[0]["values"] == ["a"]
    assert "12 fragment(s)" in tasks[0].reasons[0]


def test_a_partition_bigger_than_a_task_gets_its_own() -> None:
    tasks = plan(fragments("a", 40, 4) + fragments("b", 12, 1), cfg(**{"max-task-size-bytes": str(64 * MB)}))
    assert sorted(t.input_bytes for t in tasks) == [12 * MB, 160 * MB]


def test_one_type_per_task() -> None:
    minor = fragments("a", 12)
    major = [DataFile(f"/d/u{i}", PartitionKey(0, "p=b", ("b",)), 50 * MB, 10, 1) for i in range(3)]
    tasks = plan(minor + major, cfg())
    assert [t.type for t in tasks] == [OptimizingType.MAJOR, OptimizingType.MINOR]  # heaviest first
    assert tasks[0].partitions[0]["path"] == "p=b"


def test_options_select_the_planned_file_classes() -> None:
    config = cfg()  # target 128 MiB: fragments <= 16 MiB, undersized <= 96 MiB
    minor = rewrite_options(OptimizingType.MINOR, config)
    assert minor["min-file-size-bytes"] == str(16 * MB + 1)
    assert minor["max-file-size-bytes"] == NEVER
    assert minor["min-input-files"] == "2"
    assert minor["delete-ratio-threshold"] == "1.0"
    major = rewrite_options(OptimizingType.MAJOR, config)
    assert major["min-file-size-bytes"] == str(96 * MB + 1)
    assert major["delete-ratio-threshold"] == "0.1"
    full = rewrite_options(OptimizingType.FULL, config)
    assert full["rewrite-all"] == "true"
    partial = rewrite_options(OptimizingType.FULL, cfg(**{"full.rewrite-all-files": "false"}))
    assert "rewrite-all" not in partial and partial["delete-file-threshold"] == "1"
    for options in (minor, major, full):
        assert options["target-file-size-bytes"] == str(128 * MB)
        assert options["remove-dangling-deletes"] == "true"


def test_position_delete_compaction_is_planned_where_segments_need_it() -> None:
    key = PartitionKey(0, "p=a", ("a",))
    segment = DataFile("/d/s", key, 200 * MB, 1000, 1)
    deletes = [DeleteFile(f"/d/del{i}", key, False, 1000, 1, 2 + i, "/d/s") for i in range(2)]
    (task,) = plan([segment], cfg(), deletes)
    assert task.type is OptimizingType.MINOR
    assert task.rewrite_position_deletes
