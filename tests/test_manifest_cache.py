"""The server's manifest cache: bounded by bytes, its estimates close to what parsed manifests take, and shared
by the evaluator's records and scan planning."""

from __future__ import annotations

import gc
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from lakewarden.domain.lru import SizedLRU
from lakewarden.metadata.files import snapshot_files
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.metadata.manifests import entries
from lakewarden.metadata.scan_planning import ScanRequest, plan_scan


def test_sized_lru_evicts_the_least_recently_used_past_its_bytes() -> None:
    lru: SizedLRU[str, str] = SizedLRU(100)
    lru.put("a", "A", 40)
    lru.put("b", "B", 40)
    assert lru.get("a") == "A"  # now b is the least recently used
    lru.put("c", "C", 40)
    assert "b" not in lru and lru.get("a") == "A" and lru.get("c") == "C"
    assert lru.bytes == 80 and len(lru) == 2 and lru.evictions == 1
    lru.put("huge", "H", 101)  # heavier than the bound: not kept, nothing evicted for it
    assert "huge" not in lru and len(lru) == 2
    lru.put("a", "A2", 10)  # replaced: its weight too
    assert lru.bytes == 50 and lru.get("a") == "A2"
    assert lru.get("b") is None
    assert (lru.hits, lru.misses) == (4, 1)
    # a peek gives the weight too, is no lookup, and leaves the order alone: c stays the least recently used
    assert lru.peek("c") == ("C", 40) and lru.peek("b") is None and (lru.hits, lru.misses) == (4, 1)
    lru.put("d", "D", 60)
    assert "c" not in lru and lru.peek("a") == ("A2", 10)
    with pytest.raises(ValueError):
        SizedLRU(0)


def _table(catalog: SqlCatalog, name: str, columns: int, files: int, per_commit: int) -> Any:
    """A table of `files` data files (file metadata only) with metrics on each of `columns` long columns."""
    schema = Schema(*[NestedField(i, f"c{i}", LongType(), required=False) for i in range(1, columns + 1)])
    table = catalog.create_table(f"db.{name}", schema)
    ids = range(1, columns + 1)
    for start in range(0, files, per_commit):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for i in range(start, min(files, start + per_commit)):
                data_file = DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=f"{table.location()}/data/00000-{i:05d}-8d1b3c52-5b3e-4b8e-9d7a-3f0c2e1a9b77.parquet",
                    file_format=FileFormat.PARQUET,
                    partition=Record(),
                    record_count=100,
                    file_size_in_bytes=10_000,
                    column_sizes=dict.fromkeys(ids, 1000),
                    value_counts=dict.fromkeys(ids, 100),
                    null_value_counts=dict.fromkeys(ids, 0),
                    lower_bounds={k: (i * 100).to_bytes(8, "little", signed=True) for k in ids},
                    upper_bounds={k: (i * 100 + 99).to_bytes(8, "little", signed=True) for k in ids},
                )
                data_file.spec_id = 0
                append.append_data_file(data_file)
    return catalog.load_table(f"db.{name}")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> SqlCatalog:
    root: Path = tmp_path_factory.mktemp("manifest-cache")
    catalog = SqlCatalog("cache", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
    catalog.create_namespace("db")
    return catalog


@pytest.mark.parametrize(("columns", "files"), [(1, 300), (10, 300), (60, 300), (1, 1), (10, 1), (60, 1), (10, 10)])
def test_the_estimate_of_parsed_entries_is_within_2x_of_what_they_take(
    catalog: SqlCatalog, columns: int, files: int
) -> None:
    """Manifests of hundreds of entries and of one (a streaming writer's: mostly Avro header)."""
    table = _table(catalog, f"wide{columns}x{files}", columns, files, files)
    cache = ManifestCache()
    (manifest,) = cache.manifests(table.io, table.current_snapshot())
    listed = cache.bytes
    list(entries(table.io, manifest, discard_deleted=False, read_version=3))  # readers resolved, imports done
    # frozen, the rest of the test process's heap is left out of the collection below: only what the parse left
    # is walked, however much earlier tests built
    gc.freeze()
    tracemalloc.start()
    try:
        kept = cache.entries(table.io, manifest)
        gc.collect()
        measured = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.unfreeze()
    assert len(kept) == files
    estimated = cache.bytes - listed
    assert measured / 2 <= estimated <= measured * 2, (estimated, measured)


def test_one_cache_serves_the_evaluator_and_scan_planning_within_its_bound(catalog: SqlCatalog) -> None:
    table = _table(catalog, "shared", 3, 400, 20)  # 20 manifests
    cache = ManifestCache()
    request = ScanRequest(filter=table.scan(row_filter="c1 < 500").row_filter)
    planned = plan_scan(table.metadata, table.io, cache, request)
    assert sorted(p.data_file.file_path for p in planned.files) == sorted(
        t.file.file_path for t in table.scan(row_filter="c1 < 500").plan_files()
    )
    parsed = cache.misses["entries"]
    assert parsed == 20
    files = snapshot_files(table, cache)  # the evaluator's records, made from the entries planning parsed
    assert len(files.data) == 400 and files.manifests_read == 20
    assert cache.misses["entries"] == parsed and cache.hits["entries"] >= 20
    assert snapshot_files(table, cache).manifests_read == 0  # and kept

    # bounded: a cache of a tenth of that keeps to its bound, and still answers the same
    small = ManifestCache(max_bytes=cache.bytes // 10)
    for _ in range(3):
        again = snapshot_files(table, small)
        assert small.bytes <= small.max_bytes
        assert sorted(d.path for d in again.data) == sorted(d.path for d in files.data)
    assert small.evictions > 0
    replanned = plan_scan(table.metadata, table.io, small, request)
    assert [p.data_file.file_path for p in replanned.files] == [p.data_file.file_path for p in planned.files]
    assert small.bytes <= small.max_bytes


def test_the_composed_server_has_one_cache_sized_as_configured(tmp_path: Path) -> None:
    """The evaluator, scan planning and the read-ahead share the cache the config sizes (an empty cache is falsy:
    `cache or ManifestCache()` once gave each its own, of the default size)."""
    from fastapi.testclient import TestClient

    from lakewarden.api.app import create_app
    from tests.conftest import make_config

    with TestClient(
        create_app(make_config(tmp_path, manifest_cache__max_size="64MiB"), start_services=False)
    ) as client:
        runtime = client.app.state.context  # type: ignore[attr-defined]
        cache = runtime.rest_catalog.scans.cache
        assert cache is runtime.evaluator.cache and cache is runtime.rest_catalog.read_ahead.cache
        assert cache.max_bytes == 64 * 1024**2


def test_a_replaced_snapshots_list_is_forgotten_and_its_manifests_stay(catalog: SqlCatalog) -> None:
    """What read-ahead does as commits land (services/rest_catalog/read_ahead.py): the list of the snapshot a commit
    replaced goes, the manifests it shares with the new list stay parsed."""
    table = _table(catalog, "lists", columns=1, files=3, per_commit=1)
    current = table.current_snapshot()
    parent = table.snapshot_by_id(current.parent_snapshot_id)
    cache = ManifestCache()
    old = cache.manifests(table.io, parent)
    for manifest in old:
        cache.entries(table.io, manifest)
    new = cache.manifests(table.io, current)
    cache.forget_replaced(parent.manifest_list, new)
    assert ("list", parent.manifest_list) not in cache._lru and ("list", current.manifest_list) in cache._lru
    assert all(cache.holds(m) for m in old) and len(new) == len(old) + 1
    cache.forget_replaced(parent.manifest_list, new)  # twice: nothing to do


def test_manifests_merged_away_by_a_commit_are_forgotten(catalog: SqlCatalog) -> None:
    """An append that merges manifests (as Java's writers do past commit.manifest.min-count-to-merge) leaves the
    old ones to no current snapshot: their entries and file records go with the replaced list."""
    table = _table(catalog, "merged", columns=1, files=4, per_commit=1)
    cache = ManifestCache()
    before = table.current_snapshot()
    old = cache.manifests(table.io, before)
    snapshot_files(table, cache)  # the entries and the evaluator's records of every manifest
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"})
    table = catalog.load_table("db.merged")
    with table.transaction() as tx, tx.update_snapshot().merge_append() as append:
        template = next(iter(cache.entries(table.io, old[0]))).data_file
        extra = DataFile.from_args(
            **{
                **{
                    k: getattr(template, k)
                    for k in ("content", "file_format", "partition", "record_count", "file_size_in_bytes")
                },
                "file_path": f"{table.location()}/data/merged-extra.parquet",
            }
        )
        extra.spec_id = 0
        append.append_data_file(extra)
    table = catalog.load_table("db.merged")
    after = table.current_snapshot()
    assert after is not None and after.parent_snapshot_id == before.snapshot_id
    merged = cache.manifests(table.io, after)
    assert len(merged) < len(old)  # the appends' manifests were merged into fewer
    cache.forget_replaced(before.manifest_list, merged)
    named = {m.manifest_path for m in merged}
    gone = [m for m in old if m.manifest_path not in named]
    assert gone and not any(cache.holds(m) for m in gone)
    assert not any(("view", "files", m.manifest_path) in cache._lru for m in gone)


def test_a_burst_of_commits_forgets_the_list_read_before_it(catalog: SqlCatalog) -> None:
    """Read-ahead reads a burst of commits once, at its newest snapshot, whose parent's list was never read (nor
    is the evaluator's last read the parent): the list noted last goes instead (`note_current`), or every list
    read would stay until evicted."""
    table = _table(catalog, "burst", columns=1, files=5, per_commit=1)
    snapshots = list(table.snapshots())
    earlier, newest = snapshots[1], snapshots[-1]
    cache = ManifestCache()
    cache.note_current(table.location(), earlier, cache.manifests(table.io, earlier))
    assert ("list", earlier.manifest_list) in cache._lru
    current = cache.manifests(table.io, newest)
    parent = table.snapshot_by_id(newest.parent_snapshot_id)
    cache.forget_replaced(parent.manifest_list, current)  # the parent's list was never read: nothing goes
    assert ("list", earlier.manifest_list) in cache._lru
    cache.note_current(table.location(), newest, current)
    assert ("list", earlier.manifest_list) not in cache._lru and ("list", newest.manifest_list) in cache._lru
    cache.note_current(table.location(), newest, current)  # the same snapshot again: its list stays
    assert ("list", newest.manifest_list) in cache._lru
    stale = cache.manifests(table.io, earlier)  # a reader of stale metadata: the newer note stays
    cache.note_current(table.location(), earlier, stale)
    assert ("list", newest.manifest_list) in cache._lru


def test_the_evaluators_reads_forget_the_list_it_read_before(catalog: SqlCatalog) -> None:
    """Each look at a table's current files notes its list: the list of the look before goes."""
    table = _table(catalog, "looks", columns=1, files=2, per_commit=1)
    cache = ManifestCache()
    first = table.current_snapshot()
    snapshot_files(table, cache)
    for _ in range(2):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            template = next(iter(cache.entries(table.io, cache.manifests(table.io, first)[0]))).data_file
            extra = DataFile.from_args(
                **{k: getattr(template, k) for k in ("content", "file_format", "partition", "record_count")},
                file_size_in_bytes=10,
                file_path=f"{table.location()}/data/looks-{uuid.uuid4().hex}.parquet",
            )
            extra.spec_id = 0
            append.append_data_file(extra)
        table = catalog.load_table("db.looks")
    files = snapshot_files(table, cache)
    assert len(files.data) == 4
    assert ("list", first.manifest_list) not in cache._lru
    assert ("list", table.current_snapshot().manifest_list) in cache._lru
