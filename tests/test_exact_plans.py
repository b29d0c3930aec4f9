"""Self-optimizing rewrites exactly what it planned, on real tables: planned in process, run by the optimizer's
executor on the test session's Spark, checked against the snapshots Iceberg committed.

Sizes: rows of ~61 bytes; with target-size 32 KiB a file of 10 rows is a fragment (<= 4 KiB), one of 150
rows an undersized segment (<= 24 KiB), one of 700 rows a segment.
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import NothingToDo
from lakewarden.domain.evaluator import OptimizingClock
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.processes import ProcessPlan
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.optimizer.executor import execute_task
from lakewarden.optimizer.runners import StalePlan
from lakewarden.protocol.inputs import OptimizingInput
from lakewarden.protocol.results import OptimizingResult
from lakewarden.services.processes.self_optimizing import commit_input, plan_process
from lakewarden.store.models import TaskRow
from tests.cdc import equality_delete, upsert
from tests.helpers import assignment, checksum, spark_sql_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
FRAGMENT, UNDERSIZED, SEGMENT = 10, 150, 700
SIZES = {
    "self-optimizing.target-size": "32768",
    "self-optimizing.minor.trigger.file-count": "3",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "format-version": "2",
}


@pytest.fixture(scope="module")
def catalog(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogSpec]:
    yield spark_sql_catalog(spark, tmp_path_factory.mktemp("exact"), "exact")


def create(spark: SparkSession, name: str, props: dict[str, str] | None = None) -> str:
    table = f"exact.db.{name}"
    properties = ", ".join(f"'{k}'='{v}'" for k, v in {**SIZES, **(props or {})}.items())
    layout = "PARTITIONED BY (cat)"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v STRING) USING iceberg {layout} TBLPROPERTIES ({properties})"
    )
    return table


def write(spark: SparkSession, table: str, rows: int, cat: str = "a", start: int = 0) -> str:
    """One data file of `rows` rows in partition `cat` (ids from `start`); returns its path."""
    before = files(spark, table)[0]
    spark.sql(
        f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ id, '{cat}', concat(uuid(), uuid(), uuid()) "
        f"FROM range({start}, {start + rows})"
    )
    (added,) = files(spark, table)[0] - before
    return added


def files(spark: SparkSession, table: str) -> tuple[set[str], set[str], set[str]]:
    """Live data files, position-delete files and equality-delete files."""
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(f"SELECT content, file_path FROM {table}.files").collect()
    return tuple({r[1] for r in rows if r[0] == c} for c in (0, 1, 2))  # type: ignore[return-value]


def plan(
    catalog: CatalogSpec, table: str, full: bool = False, unreduced: dict[str, list[str]] | None = None
) -> ProcessPlan:
    loaded = open_catalog(catalog).load_table(("db", table.rsplit(".", 1)[1]))
    config = OptimizingConfig.of(loaded.properties)
    now = int(time.time() * 1000)
    clock = OptimizingClock(now, last_minor_ms=now, last_full_ms=0 if full else now)
    files = snapshot_files(loaded, ManifestCache())
    return plan_process("db." + table.rsplit(".", 1)[1], loaded, files, config, clock, unreduced)


PROCESS_IDS = itertools.count(1)


def run(
    spark: SparkSession, catalog: CatalogSpec, planned: ProcessPlan, process_id: int | None = None
) -> list[OptimizingResult]:
    """Run the process's tasks stage by stage, as the dispatcher hands them out (a commit task gets what the
    others staged); the results that count, as the process's summary counts them."""
    results = []
    done: list[TaskRow] = []
    process_id = process_id or next(PROCESS_IDS)
    for task_id, task in sorted(enumerate(planned.tasks, start=1), key=lambda t: t[1].stage):
        work = task.input
        if isinstance(work, OptimizingInput) and work.commit_staged:
            work = commit_input(done, work)
        result = execute_task(spark, assignment(catalog, work.model_dump(mode="json"), process_id, task_id), "test")
        assert isinstance(result, OptimizingResult)
        results.append(result)
        output = result.model_dump(mode="json")
        done.append(TaskRow(task_id=task_id, status="success", input=task.input.model_dump(mode="json"), output=output))
    return [r for r in results if r.process_commit] or results


def planned_files(planned: ProcessPlan) -> tuple[set[str], set[str], set[str]]:
    """What the plan rewrites, whose deletes it rewrites, and which delete files it removes."""
    groups = [g for t in planned.tasks for g in t.input.groups]  # type: ignore[union-attr]
    removed = {p for t in planned.tasks for p in t.input.remove_deletes}  # type: ignore[union-attr]
    return {p for g in groups for p in g.rewrite}, {p for g in groups for p in g.rewrite_pos}, removed


def test_fragments_and_undersized_pairs_are_rewritten_and_a_lone_undersized_file_is_not(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    table = create(spark, "layout")
    fragments_a = {write(spark, table, FRAGMENT, "a", i * 100) for i in range(3)}
    pair_a = {write(spark, table, UNDERSIZED, "a", 1000 + i * 1000) for i in range(2)}
    segment_a = write(spark, table, SEGMENT, "a", 5000)
    fragments_b = {write(spark, table, FRAGMENT, "b", 10_000 + i * 100) for i in range(3)}
    lone_b = write(spark, table, UNDERSIZED, "b", 11_000)
    before = checksum(spark, table)

    planned = plan(catalog, table)
    rewrite, rewrite_pos, removed = planned_files(planned)
    assert rewrite == fragments_a | pair_a | fragments_b
    assert rewrite_pos == set() and removed == set()
    results = run(spark, catalog, planned, process_id=1000)

    data, _, _ = files(spark, table)
    assert segment_a in data and lone_b in data  # left alone
    assert not data & rewrite
    assert {p for r in results for p in r.rewritten_files} == rewrite
    assert sum(r.files_in for r in results) == 8
    assert sum(r.bytes_out for r in results) > 0
    assert len(data) == 2 + sum(r.files_out for r in results)
    assert checksum(spark, table) == before
    assert open_catalog(catalog).load_table(("db", "layout")).metadata.format_version == 2  # never upgraded
    # run again (its report was lost, the server handed it out again): it sees its commit and does not redo it
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]
    again = execute_task(spark, assignment(catalog, planned.tasks[0].input.model_dump(mode="json"), 1000, 1), "t")
    assert isinstance(again, OptimizingResult)
    assert (again.snapshot_id, again.files_in, again.files_out) == (
        results[0].snapshot_id,
        results[0].files_in,
        results[0].files_out,
    )
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots  # type: ignore[index]


def test_an_upsert_stream_ends_with_no_equality_delete_file(spark: SparkSession, catalog: CatalogSpec) -> None:
    """Equality deletes on fragments are applied by rewriting them; on segments they become position deletes
    of the segment's own; the equality-delete files are removed in the same commit."""
    table = create(spark, "cdc")
    segments = {write(spark, table, SEGMENT, cat, start) for cat, start in (("a", 0), ("b", 10_000))}
    expected = {r[0]: (r[1], r[2]) for r in spark.sql(f"SELECT id, cat, v FROM {table}").collect()}
    for round_ in range(3):  # each round updates rows of both segments and of the earlier rounds' rows
        rows = [
            (i, "a" if i < 10_000 else "b", f"round{round_}-{i}")
            for i in (*range(round_, 40, 7), *range(10_000 + round_, 10_040, 5))
        ]
        upsert(spark, table, rows, "id, cat, v", "id", lambda row: f"cat={row[1]}")
        expected.update({r[0]: (r[1], r[2]) for r in rows})
    data, _, equalities = files(spark, table)
    assert len(equalities) == 6 and segments <= data
    assert {r[0]: (r[1], r[2]) for r in spark.sql(f"SELECT id, cat, v FROM {table}").collect()} == expected

    planned = plan(catalog, table)
    rewrite, rewrite_pos, removed = planned_files(planned)
    assert rewrite == data - segments  # the upserted rows' fragments
    assert rewrite_pos == segments
    assert removed == equalities
    results = run(spark, catalog, planned)

    data_after, positions_after, equalities_after = files(spark, table)
    assert equalities_after == set()
    assert segments <= data_after  # the segments stay; their deleted rows are now position deletes
    assert len(positions_after) == 2 and sum(r.delete_files_added for r in results) == 2
    assert sum(r.rewrite_pos_files for r in results) == 2
    assert {r[0]: (r[1], r[2]) for r in spark.sql(f"SELECT id, cat, v FROM {table}").collect()} == expected
    with pytest.raises(NothingToDo):  # nothing left to do
        plan(catalog, table)


def test_a_partition_split_over_tasks_removes_the_deletes_they_share_last(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """max-task-size-bytes cuts one partition's fragments into several tasks; the equality-delete file that
    applies to all of them is read by each; the tasks stage their files and a last task commits them all, with
    the shared file's removal, in one snapshot."""
    table = create(spark, "split", {"self-optimizing.max-task-size-bytes": "6000"})
    fragments = {write(spark, table, FRAGMENT, "a", i * 100) for i in range(20)}  # two groups of <= 32 KiB
    (eq_file,) = [equality_delete(spark, table, {"id": [1, 101, 201, 301]}, "cat=a")]
    before = checksum(spark, table)

    planned = plan(catalog, table)
    rewrite, _, removed = planned_files(planned)
    stages = [t.stage for t in planned.tasks]
    assert stages == [0, 0, 1]
    assert rewrite == fragments and removed == {eq_file}
    last = planned.tasks[-1].input
    assert last.groups == [] and last.remove_deletes == [eq_file]  # type: ignore[union-attr]
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count()
    results = run(spark, catalog, planned)
    assert spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count() == snapshots + 1
    assert len(results) == 1 and results[0].process_commit and results[0].files_in == len(fragments)

    data, positions, equalities = files(spark, table)
    assert equalities == set() and positions == set()
    assert not data & fragments
    assert [r.delete_files_removed for r in results][-1] == 1
    assert checksum(spark, table) == before


def test_a_writer_conflicting_at_the_process_commit_leaves_only_the_groups_it_touched(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """Both tasks staged their files; a writer deletes a row of a rewritten file before the process commits:
    the commit's validation from the planned snapshot fails for that file's group, the other groups commit
    alone, and the files staged for the touched group are deleted."""
    table = create(spark, "conflict", {"self-optimizing.max-task-size-bytes": "6000"})
    for i in range(20):
        write(spark, table, FRAGMENT, "a", i * 100)
    planned = plan(catalog, table)
    *stagers, commit = planned.tasks
    assert len(stagers) >= 2 and all(t.input.stage_only for t in stagers)  # type: ignore[union-attr]
    done = []
    for task_id, task in enumerate(stagers, start=1):
        work = assignment(catalog, task.input.model_dump(mode="json"), 77, task_id)
        result = execute_task(spark, work, "test")
        assert isinstance(result, OptimizingResult) and result.staged is not None and result.snapshot_id is None
        output = result.model_dump(mode="json")
        done.append(TaskRow(task_id=task_id, status="success", input=task.input.model_dump(mode="json"), output=output))
    staged = [[f["file-path"] for f in g] for t in done for g in (t.output or {})["staged"]["groups"]]
    assert all(Path(p).exists() for g in staged for p in g)
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count()
    spark.sql(f"DELETE FROM {table} WHERE id = 101")  # a row of a file the process rewrote
    expected = checksum(spark, table)

    assert isinstance(commit.input, OptimizingInput)
    last = commit_input(done, commit.input).model_dump(mode="json")
    result = execute_task(spark, assignment(catalog, last, 77, len(stagers) + 1), "test")
    assert isinstance(result, OptimizingResult) and result.groups_yielded == 1 and result.process_commit
    assert spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count() == snapshots + 2  # the writer's, then ours
    live = {r[0].removeprefix("file:") for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    kept = [g for g in staged if all(p.removeprefix("file:") in live for p in g)]
    assert len(kept) == len(staged) - 1  # every group's files but the touched one's are the table's
    assert not any(Path(p).exists() for g in staged if g not in kept for p in g)
    assert checksum(spark, table) == expected


def test_a_partial_commit_commits_one_tasks_files_and_keeps_the_deletes_they_shared(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """allow-partial-commit after a task failed: the commit task commits the files of the task that succeeded,
    removes none of the delete files the tasks shared (the files not rewritten still need them), and the table
    reads as before."""
    table = create(spark, "partial", {"self-optimizing.max-task-size-bytes": "6000"})
    fragments = {write(spark, table, FRAGMENT, "a", i * 100) for i in range(20)}
    (eq_file,) = [equality_delete(spark, table, {"id": [1, 101, 201, 301, 1901]}, "cat=a")]
    before = checksum(spark, table)
    planned = plan(catalog, table)
    first, *others, commit = planned.tasks
    assert others and isinstance(first.input, OptimizingInput) and isinstance(commit.input, OptimizingInput)
    result = execute_task(spark, assignment(catalog, first.input.model_dump(mode="json"), 78, 1), "test")
    assert isinstance(result, OptimizingResult)
    done = [
        TaskRow(
            task_id=1,
            status="success",
            input=first.input.model_dump(mode="json"),
            output=result.model_dump(mode="json"),
        )
    ]
    done += [
        TaskRow(task_id=i, status="canceled", input=t.input.model_dump(mode="json")) for i, t in enumerate(others, 2)
    ]
    last = commit_input(done, commit.input)
    assert last.remove_deletes == [] and len(last.groups) == len(first.input.groups)
    committed = execute_task(spark, assignment(catalog, last.model_dump(mode="json"), 78, len(planned.tasks)), "test")
    assert isinstance(committed, OptimizingResult) and committed.process_commit
    rewritten = {p for g in first.input.groups for p in g.rewrite}
    data, _, equalities = files(spark, table)
    assert equalities == {eq_file} and not data & rewritten and fragments - rewritten <= data
    assert committed.files_in == len(rewritten)
    assert checksum(spark, table) == before


def test_full_rewrite_all_files_rewrites_every_file_with_company(spark: SparkSession, catalog: CatalogSpec) -> None:
    table = create(spark, "full", {"self-optimizing.full.trigger.interval": "1"})
    a = {write(spark, table, SEGMENT, "a", 0), write(spark, table, FRAGMENT, "a", 1000)}
    lone_b = write(spark, table, SEGMENT, "b", 2000)
    before = checksum(spark, table)
    planned = plan(catalog, table, full=True)
    assert {t.type for t in planned.tasks} == {"full"}
    rewrite, _, _ = planned_files(planned)
    assert rewrite == a  # b's segment has no company: rewriting it alone would change nothing
    run(spark, catalog, planned)
    data, _, _ = files(spark, table)
    assert lone_b in data and not data & a
    assert checksum(spark, table) == before

    # two segments of 43 KB: Iceberg's sizing writes them as three files (32 + 32 + 22 KB), which is no fewer;
    # the partition is not planned again until its files change
    table = create(spark, "unreduced", {"self-optimizing.full.trigger.interval": "1"})
    segments = {write(spark, table, SEGMENT, "a", 0), write(spark, table, SEGMENT, "a", 1000)}
    (result,) = run(spark, catalog, plan(catalog, table, full=True))
    assert result.files_in == 2 and result.files_out >= 2
    assert list(result.unreduced) == ["0:cat=a"]
    assert set(result.unreduced["0:cat=a"]) == files(spark, table)[0] and not segments & files(spark, table)[0]
    with pytest.raises(NothingToDo):
        plan(catalog, table, full=True, unreduced=result.unreduced)


def test_a_position_delete_file_shared_by_segments_becomes_one_of_their_own_each(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """Spark's partition-granularity deletes write one position-delete file naming several data files: each
    segment it names gets a position-delete file of its own, and the shared file is removed. (As in Amoro,
    such a file does not make a minor optimizing by itself: the fragments here do.)"""
    table = create(spark, "shared", {"write.delete.granularity": "partition"})
    segments = {write(spark, table, SEGMENT, "a", start) for start in (0, 1000, 2000)}
    fragments = {write(spark, table, FRAGMENT, "a", 5001 + i * 100) for i in range(3)}  # no id % 50 == 0
    spark.sql(f"DELETE FROM {table} WHERE id % 50 = 0")  # a few rows of every segment: under the ratio
    data, (shared,), _ = files(spark, table)
    assert data == segments | fragments
    before = checksum(spark, table)

    planned = plan(catalog, table)
    assert {t.type for t in planned.tasks} == {"minor"}
    rewrite, rewrite_pos, removed = planned_files(planned)
    assert rewrite == fragments and rewrite_pos == segments and removed == {shared}
    (result,) = run(spark, catalog, planned)

    data_after, positions, _ = files(spark, table)
    assert segments <= data_after and not data_after & fragments and shared not in positions
    assert len(positions) == 3 and result.rewrite_pos_files == 3 and result.delete_files_added == 3
    assert checksum(spark, table) == before
    with pytest.raises(NothingToDo):  # each segment now has one position-delete file of its own
        plan(catalog, table)


def test_on_format_version_3_a_writers_new_vector_leaves_that_segments_group_and_the_other_commits(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """In two partitions a segment's deletion vector and equality deletes are planned to become one new vector
    each; before the commit a writer deletes a row of b's segment, replacing its vector. b's group is left out
    (its equality deletes and the writer's vector stay, the vector written for it is not committed), a's
    commits. On a format-version 2 table such a merge-on-read delete does not conflict at all: its position
    delete applies beside the one written for the segment."""
    table = create(spark, "v3_partial", {"format-version": "3", "write.delete.mode": "merge-on-read"})
    segments = {c: write(spark, table, SEGMENT, c, 0) for c in "ab"}
    spark.sql(f"DELETE FROM {table} WHERE id IN (1, 2)")  # each segment's deletion vector
    for c in "ab":
        for k in (3, 5, 8):
            equality_delete(spark, table, {"id": [k]}, f"cat={c}")
    (task,) = plan(catalog, table).tasks
    assert len(task.input.groups) == 2  # type: ignore[union-attr]

    def writer() -> None:
        spark.sql(f"DELETE FROM {table} WHERE cat = 'b' AND id = 10")

    result = execute_task(spark, assignment(catalog, task.input.model_dump(mode="json"), 4325, 1), "test", writer)
    assert isinstance(result, OptimizingResult) and result.groups_yielded == 1, result
    assert result.rewrite_pos_files == 1 and result.delete_files_added == 1, result
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(f"SELECT partition.cat, content, referenced_data_file FROM {table}.files").collect()
    kinds = {c: sorted(r[1] for r in rows if r[0] == c) for c in "ab"}
    assert kinds == {"a": [0, 1], "b": [0, 1, 2, 2, 2]}, kinds  # a: one vector; b: the writer's and its eq files
    gone = {(c, i) for c in "ab" for i in (1, 2, 3, 5, 8)} | {("b", 10)}
    got = {(r[1], r[0]) for r in spark.sql(f"SELECT id, cat FROM {table}").collect()}
    assert got == {(c, i) for c in "ab" for i in range(SEGMENT)} - gone
    assert all(str(r[2]) == segments[r[0]] for r in rows if r[1] == 1)


def test_full_without_rewrite_all_files_takes_small_files_and_files_with_deletes(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    table = create(
        spark,
        "full_some",
        {"self-optimizing.full.trigger.interval": "1", "self-optimizing.full.rewrite-all-files": "false"},
    )
    clean = {write(spark, table, SEGMENT, "a", 0), write(spark, table, SEGMENT, "a", 1000)}
    with_deletes = write(spark, table, SEGMENT, "a", 2000)
    small = {write(spark, table, UNDERSIZED, "a", 3000), write(spark, table, FRAGMENT, "a", 4000)}
    spark.sql(f"DELETE FROM {table} WHERE id BETWEEN 2000 AND 2003")  # one delete file, on one segment
    before = checksum(spark, table)

    planned = plan(catalog, table, full=True)
    assert {t.type for t in planned.tasks} == {"full"}
    rewrite, rewrite_pos, removed = planned_files(planned)
    assert rewrite == small | {with_deletes} and rewrite_pos == set() and len(removed) == 1
    run(spark, catalog, planned)
    data, positions, _ = files(spark, table)
    assert clean <= data and not data & (small | {with_deletes}) and positions == set()
    assert checksum(spark, table) == before


def lineage(spark: SparkSession, table: str) -> dict[int, tuple[int, int]]:
    """Each row's row lineage (format version 3): its `_row_id` and `_last_updated_sequence_number`, by id."""
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {table}").collect()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def test_on_format_version_3_a_segments_deletes_become_one_deletion_vector(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """v3 position deletes are deletion vectors: a segment's equality deletes and the vector it has already
    become one new vector (Iceberg allows a data file one), the data file itself kept, its rows' lineage too."""
    table = create(spark, "v3", {"format-version": "3", "write.delete.mode": "merge-on-read"})
    segment = write(spark, table, SEGMENT, "a", 0)
    spark.sql(f"DELETE FROM {table} WHERE id IN (1, 2)")  # the segment's deletion vector
    (old_vector,) = files(spark, table)[1]
    assert old_vector.endswith(".puffin")
    # three equality-delete files reach minor.trigger.file-count (3 here)
    eq_files = {equality_delete(spark, table, {"id": [k]}, "cat=a") for k in (3, 5, 8)}
    before, rows = checksum(spark, table), lineage(spark, table)
    planned = plan(catalog, table)
    rewrite, rewrite_pos, removed = planned_files(planned)
    assert rewrite == set() and rewrite_pos == {segment} and removed == eq_files | {old_vector}
    (result,) = run(spark, catalog, planned)
    data, positions, equalities = files(spark, table)
    assert data == {segment} and equalities == set() and len(positions) == 1 and old_vector not in positions
    assert next(iter(positions)).endswith(".puffin")
    assert result.files_in == 0 and result.rewrite_pos_files == 1 and result.delete_files_added == 1
    vector = spark.sql(f"SELECT record_count, referenced_data_file FROM {table}.delete_files").collect()
    assert [(int(r[0]), str(r[1])) for r in vector] == [(5, segment)]  # ids 1, 2, 3, 5 and 8
    assert checksum(spark, table) == before and lineage(spark, table) == rows
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE id IN (1, 2, 3, 5, 8)").first()[0] == 0  # type: ignore[index]


def test_on_format_version_3_compaction_keeps_every_rows_lineage(spark: SparkSession, catalog: CatalogSpec) -> None:
    """Row lineage survives bin-packing (minor), a full rewrite applying deletion vectors, and clustering by a
    sort order and by z-order; lakewarden never raises a table's format version."""
    v3 = {"format-version": "3", "write.delete.mode": "merge-on-read", "self-optimizing.full.trigger.interval": "1"}
    table = create(spark, "v3lineage", v3)
    for start in range(0, 4 * FRAGMENT, FRAGMENT):
        write(spark, table, FRAGMENT, "a", start)
    spark.sql(f"UPDATE {table} SET v = 'changed' WHERE id IN (4, 14)")  # a later sequence number for two rows
    rows = lineage(spark, table)
    assert rows[4][1] == rows[14][1] > rows[0][1]  # the updated rows carry the update's sequence number
    before = checksum(spark, table)
    run(spark, catalog, plan(catalog, table))
    data, positions, _ = files(spark, table)
    assert len(data) == 1 and positions == set()
    assert lineage(spark, table) == rows and checksum(spark, table) == before
    spark.sql(f"DELETE FROM {table} WHERE id = 7")
    del rows[7]
    (result,) = run(spark, catalog, plan(catalog, table, full=True))
    assert result.files_in == 1 and files(spark, table)[1] == set()  # the vector applied, the file rewritten
    assert lineage(spark, table) == rows
    version = open_catalog(catalog).load_table(("db", "v3lineage")).metadata.format_version
    assert version == 3

    # clustered by the sort order (Iceberg's sort runner writes the rows in another order) and by z-order
    # (Iceberg's z-order runner adds a column of its own to sort by and drops it again): lineage and all
    for name, clustering in (("v3sorted", {}), ("v3zordered", {"self-optimizing.z-order.columns": "id, v"})):
        table = create(spark, name, {**v3, **clustering})
        if not clustering:
            spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY id")
        for start in (3 * FRAGMENT, 0, 2 * FRAGMENT, FRAGMENT):
            write(spark, table, FRAGMENT, "a", start)
        rows = lineage(spark, table)
        (result,) = run(spark, catalog, plan(catalog, table, full=True))
        assert result.files_in == 4 and len(files(spark, table)[0]) == 1
        assert lineage(spark, table) == rows


def test_on_format_version_3_a_dangling_deletion_vector_is_removed_and_a_live_one_kept(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """Iceberg drops a data file's vector in the commit that removes the file; a writer that does not leaves it
    dangling (here: a vector naming a file the table never had, committed through the Java API). The
    dangling-deletes action removes it and keeps the live one."""
    from lakewarden.protocol.results import CleanDanglingDeleteFilesResult
    from tests.cdc import java_table

    table = create(spark, "v3dangling", {"format-version": "3", "write.delete.mode": "merge-on-read"})
    segment = write(spark, table, SEGMENT, "a", 0)
    spark.sql(f"DELETE FROM {table} WHERE id IN (1, 2)")
    jvm: Any = spark._jvm
    java = java_table(spark, table)
    tasks = java.newScan().planFiles().iterator()
    live = tasks.next().deletes().get(0)
    gone = segment.rsplit("/", 1)[0] + "/never-written.parquet"
    # a Puffin file of its own (a copy of the live vector's), whose one vector names the missing file
    copied = str(live.location()).replace(".puffin", "-dangling.puffin")
    shutil.copyfile(str(live.location()), copied)
    dangling = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(java.spec())
        .copy(live)
        .withPath(copied)
        .withContentOffset(live.contentOffset())
        .withContentSizeInBytes(live.contentSizeInBytes())
        .withReferencedDataFile(gone)
    )
    java.newRowDelta().addDeletes(dangling.build()).commit()
    spark.sql(f"REFRESH TABLE {table}")
    referenced = {str(r[0]) for r in spark.sql(f"SELECT referenced_data_file FROM {table}.delete_files").collect()}
    assert referenced == {segment, gone}
    before = checksum(spark, table)

    work = {"action": "clean-dangling-delete-files", "table": "db.v3dangling"}
    result = execute_task(spark, assignment(catalog, work, next(PROCESS_IDS), 1), "test")
    assert isinstance(result, CleanDanglingDeleteFilesResult) and result.delete_files_removed == 1
    assert result.bytes_freed == int(live.contentSizeInBytes())
    spark.sql(f"REFRESH TABLE {table}")
    referenced = {str(r[0]) for r in spark.sql(f"SELECT referenced_data_file FROM {table}.delete_files").collect()}
    assert referenced == {segment} and checksum(spark, table) == before


def test_a_plan_naming_files_its_snapshot_does_not_have_fails_as_a_stale_plan_and_commits_nothing(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """Java's PlannedFiles checks the plan against its snapshot; the optimizer turns its refusal into PlanMismatch
    (a stale plan: planned again, no retry spent on it)."""
    from lakewarden.optimizer.rewrite import PlanMismatch

    table = create(spark, "mismatch")
    for i in range(3):
        write(spark, table, FRAGMENT, "a", i * 100)
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]
    work = plan(catalog, table).tasks[0].input.model_dump(mode="json")
    missing = dict(work, groups=[dict(g, rewrite=[*g["rewrite"][1:], "/nowhere/gone.parquet"]) for g in work["groups"]])
    with pytest.raises(PlanMismatch, match=r"1 planned data file\(s\) are not in snapshot .*gone\.parquet"):
        execute_task(spark, assignment(catalog, missing), "test")
    not_live = dict(work, remove_deletes=["/nowhere/deletes.parquet"])
    with pytest.raises(PlanMismatch, match=r"1 delete file\(s\) to remove are not live in the planned snapshot"):
        execute_task(spark, assignment(catalog, not_live), "test")
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots  # type: ignore[index]


def test_a_task_revoked_before_its_commit_commits_nothing_and_leaves_no_file(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    from lakewarden.optimizer.rewrite import TaskRevoked

    table = create(spark, "revoked")
    for i in range(3):
        write(spark, table, FRAGMENT, "a", i * 100)
    location = Path(str(spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()[1]))  # type: ignore[index]
    on_disk = set((location / "data").rglob("*.parquet"))
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]
    planned = plan(catalog, table)

    def revoked() -> None:
        raise TaskRevoked("the process was canceled")

    with pytest.raises(TaskRevoked):
        execute_task(spark, assignment(catalog, planned.tasks[0].input.model_dump(mode="json")), "test", gate=revoked)
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots  # type: ignore[index]
    assert set((location / "data").rglob("*.parquet")) == on_disk  # the files it wrote are gone again


def three_partitions(spark: SparkSession, name: str) -> tuple[str, Path]:
    """A table of three fragments in each of three partitions (a task of three file groups), and its location."""
    table = create(spark, name)
    for cat in ("a", "b", "c"):
        for i in range(3):
            write(spark, table, FRAGMENT, cat, i * 100)
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()[1]  # type: ignore[index]
    return table, Path(str(location))


def test_the_groups_of_a_task_run_at_once_in_its_job_group_and_a_failure_leaves_no_file(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    from lakewarden.optimizer.executor import job_group
    from lakewarden.optimizer.rewrite import TaskRevoked

    table, location = three_partitions(spark, "groups")
    before = checksum(spark, table)
    on_disk = set((location / "data").rglob("*.parquet"))
    planned = plan(catalog, table)
    (task,) = planned.tasks
    assert len(task.input.groups) == 3  # type: ignore[union-attr]

    def revoked() -> None:
        raise TaskRevoked("the process was canceled")

    work = assignment(catalog, task.input.model_dump(mode="json"), 4321, 1)
    with pytest.raises(TaskRevoked):
        execute_task(spark, work, "test", gate=revoked)
    assert set((location / "data").rglob("*.parquet")) == on_disk  # every group's files are gone again
    # the group rewrites ran on threads of their own, in the task's job group (what canceling it cancels)
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(job_group(work, "test"))
    assert len(jobs) >= 3

    (result,) = run(spark, catalog, planned)
    assert result.files_in == 9 and result.files_out == 3
    assert checksum(spark, table) == before


def test_a_group_that_fails_leaves_no_file_of_the_groups_that_did_not_fail(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    table, location = three_partitions(spark, "failing")
    (task,) = plan(catalog, table).tasks
    groups = task.input.groups  # type: ignore[union-attr]
    assert len(groups) == 3
    Path(groups[1].rewrite[0].removeprefix("file:")).unlink()  # the second group cannot read one of its files
    on_disk = set((location / "data").rglob("*.parquet"))
    with pytest.raises(Exception, match=r"FileNotFound|does not exist|NotFoundException"):
        execute_task(spark, assignment(catalog, task.input.model_dump(mode="json"), 4322, 1), "test")
    # the first and third groups were written, and deleted again when the second failed
    assert set((location / "data").rglob("*.parquet")) == on_disk


@pytest.mark.parametrize(
    ("mode", "deletes"), [("merge-on-read", False), ("copy-on-write", False), ("merge-on-read", True)]
)
def test_a_writer_that_changed_one_group_meanwhile_leaves_the_other_groups_committed(
    spark: SparkSession, catalog: CatalogSpec, mode: str, deletes: bool
) -> None:
    """The writer deletes a row of partition `b` between the task's plan and its commit (a position delete on
    one of b's files, or b's file rewritten): the rewrite's validation fails for b's group only, so a's and c's
    groups commit alone and b's is left for the next plan, its written file deleted. With delete files the
    groups apply and remove, b's stay. When the writer touched every group, nothing commits."""
    table, location = three_partitions(spark, f"partial_{mode[:3]}{'_deletes' if deletes else ''}")
    if deletes:
        spark.sql(f"DELETE FROM {table} WHERE id = 5")  # a position delete in each partition
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='{mode}')")
    (task,) = plan(catalog, table).tasks
    assert len(task.input.remove_deletes) == (3 if deletes else 0)  # type: ignore[union-attr]
    before = sorted(tuple(r) for r in spark.sql(f"SELECT id, cat FROM {table}").collect())
    on_disk = set(location.rglob("*.parquet"))

    def writer() -> None:
        spark.sql(f"DELETE FROM {table} WHERE cat = 'b' AND id = 100")

    result = execute_task(spark, assignment(catalog, task.input.model_dump(mode="json"), 4323, 1), "test", writer)
    assert isinstance(result, OptimizingResult)
    assert result.groups_yielded == 1 and result.files_in == 6 and result.files_out == 2, result
    spark.sql(f"REFRESH TABLE {table}")
    got = sorted(tuple(r) for r in spark.sql(f"SELECT id, cat FROM {table}").collect())
    assert got == [r for r in before if r != (100, "b")]
    counts = spark.sql(f"SELECT partition.cat, content, count(*) FROM {table}.files GROUP BY 1, 2").collect()
    by_partition = {(r[0], r[1]): r[2] for r in counts}
    assert by_partition[("a", 0)] == 1 and by_partition[("c", 0)] == 1 and by_partition[("b", 0)] >= 3, by_partition
    assert ("a", 1) not in by_partition and ("c", 1) not in by_partition, by_partition  # their deletes applied
    if deletes:  # b's delete file stays with b's files, beside the writer's
        assert by_partition[("b", 1)] == (2 if mode == "merge-on-read" else 1), by_partition
    live = {Path(r[0].removeprefix("file:")) for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()}
    assert set(location.rglob("*.parquet")) - on_disk <= live  # b's rewritten file is gone again

    # every group touched: the writer's conflict stands and nothing of the task commits
    (task,) = plan(catalog, table).tasks
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]

    def everywhere() -> None:
        spark.sql(f"DELETE FROM {table} WHERE id % 100 = 1")

    with pytest.raises(StalePlan):
        execute_task(spark, assignment(catalog, task.input.model_dump(mode="json"), 4324, 1), "test", everywhere)
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots + 1  # type: ignore[index]


def test_revoking_a_task_cancels_its_spark_jobs(spark: SparkSession) -> None:
    import threading

    from lakewarden.optimizer.app import Optimizer
    from lakewarden.protocol.messages import TaskKey

    optimizer = Optimizer("http://127.0.0.1:9", "default", parallelism=1, spark=spark)
    key = TaskKey(process_id=7, task_id=1, attempt=1)
    optimizer._running[key] = "lakewarden-7-1"
    failed: list[BaseException] = []

    def long_job() -> None:
        spark.sparkContext.setJobGroup("lakewarden-7-1", "a long rewrite", interruptOnCancel=True)
        try:
            spark.range(0, 10**13, numPartitions=2).selectExpr("sum(id * id)").collect()
        except BaseException as exc:
            failed.append(exc)

    job = threading.Thread(target=long_job)
    started = time.monotonic()
    job.start()
    time.sleep(3)
    optimizer._revoke(spark, key)
    job.join(60)
    assert not job.is_alive() and failed, "the job was not canceled"
    assert "cancel" in str(failed[0]).lower()
    assert time.monotonic() - started < 30
    assert key in optimizer._revoked


def test_self_optimizing_compacts_main_and_leaves_every_other_branch_as_it_is(
    spark: SparkSession, catalog: CatalogSpec
) -> None:
    """Self-optimizing plans main's head and commits to main: a branch's files and head stay as they were."""
    table = create(spark, "branched")
    for start in range(0, 3 * FRAGMENT, FRAGMENT):
        write(spark, table, FRAGMENT, "a", start)
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    spark.sql(f"INSERT INTO {table}.branch_audit SELECT id, 'a', 'x' FROM range(100, 105)")
    spark.sql(f"REFRESH TABLE {table}")
    head = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'audit'").first()[0]  # type: ignore[index]
    branch_files = {r[0] for r in spark.sql(f"SELECT DISTINCT _file FROM {table} VERSION AS OF 'audit'").collect()}
    branch_rows = checksum(spark, f"{table}.branch_audit")
    run(spark, catalog, plan(catalog, table))
    assert len(files(spark, table)[0]) == 1  # main compacted
    assert spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'audit'").first()[0] == head  # type: ignore[index]
    at_head = spark.sql(f"SELECT DISTINCT _file FROM {table} VERSION AS OF 'audit'").collect()
    assert {r[0] for r in at_head} == branch_files and len(branch_files) == 4
    assert checksum(spark, f"{table}.branch_audit") == branch_rows
