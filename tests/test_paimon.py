"""Paimon tables in view (domain/paimon.py, metadata/paimon.py, api/routes/formats.py): a `paimon` catalog of
tables written by pypaimon, Paimon's own library; their snapshots, schemas, tags and files per partition, bucket
and level, and what Paimon's compaction and snapshot expiry would do, shown and judged, never run."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.domain.paimon import (
    DataFile,
    PaimonTableState,
    Snapshot,
    decode_row,
    judge,
    parse_size,
    partition_time,
    ready_bins,
    sorted_runs,
)
from lakewarden.domain.paimon_services import plan_services
from lakewarden.domain.service_runs import LastRun
from lakewarden.metadata.paimon import NotAPaimonTable, change_token, find_tables, read_table
from tests.paimon_tables import pk_table, rows, write_paimon
from tests.test_explorer import listed, refresh

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


# ---- Paimon's rules at their boundaries


def _state(
    files: list[DataFile], primary_keys: bool = True, snapshots: int = 1, options: dict[str, str] | None = None
) -> PaimonTableState:
    history = [
        Snapshot(i, 0, "APPEND", NOW - timedelta(hours=snapshots - i), None, None) for i in range(1, snapshots + 1)
    ]
    keys = ["id"] if primary_keys else []
    return PaimonTableState("t", keys, [], options or {}, [], history, {}, files)


def _files(levels: list[int], size: int = 1000, bucket: int = 0) -> list[DataFile]:
    return [
        DataFile("region=eu", bucket, level, f"data-{bucket}-{i}.parquet", size, 1) for i, level in enumerate(levels)
    ]


def test_sorted_runs_are_each_level_0_file_and_each_higher_level() -> None:
    assert sorted_runs([0, 0, 0]) == 3
    assert sorted_runs([0, 1, 1, 2, 5, 5]) == 4


def test_a_primary_key_bucket_compacts_at_the_sorted_run_trigger_and_stalls_writers_at_the_stop() -> None:
    assert judge(_state(_files([0, 0, 0, 5])), "db.t", NOW).needs == []  # 4 runs < 5
    (need,) = judge(_state(_files([0, 0, 0, 0, 5])), "db.t", NOW).needs
    assert (need.service, need.partition, need.bucket) == ("compaction", "region=eu", 0)
    assert need.reason == "5 sorted runs (4 level-0 files) >= num-sorted-run.compaction-trigger 5"
    assert need.procedure == "CALL sys.compact(table => 'db.t')"
    (stalled,) = judge(_state(_files([0] * 8)), "db.t", NOW).needs
    assert stalled.reason == "8 sorted runs (8 level-0 files) >= num-sorted-run.stop-trigger 8: writers are stalled"
    # the table's own options are Paimon's
    assert judge(_state(_files([0] * 5), options={"num-sorted-run.compaction-trigger": "6"}), "db.t", NOW).needs == []


def test_an_append_tables_small_files_compact_as_paimons_planner_bins_them() -> None:
    small = 100 * 1024 * 1024  # under 256 MB x 0.7
    assert judge(_state(_files([0] * 4, small), primary_keys=False), "db.t", NOW).needs == []
    # without fixed buckets (Paimon's default for an append table): a bin of min-file-num files reaching the target
    (need,) = judge(_state(_files([0] * 5, small), primary_keys=False), "db.t", NOW).needs
    assert need.reason == (
        "5 files under 179 MiB (target-file-size × compaction.small-file-ratio) fill 1 compaction(s): "
        "compaction.min.file-num 5 files reaching target-file-size 256 MiB, or compaction.max.file-num 50 files"
    )
    # tiny files short of the target compact only once max-file-num of them are there
    tiny = _files([0] * 49, 1000)
    assert judge(_state(tiny, primary_keys=False), "db.t", NOW).needs == []
    assert len(judge(_state(_files([0] * 50, 1000), primary_keys=False), "db.t", NOW).needs) == 1
    assert len(judge(_state(tiny, False, options={"compaction.max.file-num": "4"}), "db.t", NOW).needs) == 1
    assert ready_bins([10] * 9, 1000, 5, 4) == 2 and ready_bins([600, 600], 1000, 2, 50) == 1
    big = 200 * 1024 * 1024
    assert judge(_state(_files([0] * 5, big), primary_keys=False), "db.t", NOW).needs == []
    smaller_target = {"target-file-size": "128 mb"}
    assert judge(_state(_files([0] * 5, small), primary_keys=False, options=smaller_target), "db.t", NOW).needs == []
    # fixed buckets: each bucket's compaction picks min-file-num small files
    fixed = {"bucket": "2"}
    (need,) = judge(_state(_files([0] * 5, 1000), primary_keys=False, options=fixed), "db.t", NOW).needs
    assert need.reason.endswith(">= compaction.min.file-num 5")
    assert parse_size("256 mb") == 256 * 1024 * 1024 and parse_size("1GB") == 1024**3 and parse_size("42") == 42


def test_partitions_expire_by_their_values_time() -> None:
    files = [DataFile(p, 0, 0, f"f-{i}.parquet", 10, 1) for i, p in enumerate(["dt=2026-11-20", "dt=2026-11-27"])]
    options = {"partition.expiration-time": "2 d"}
    state = PaimonTableState("t", [], ["dt"], options, [], [], {}, files)
    (need,) = judge(state, "db.t", NOW).needs
    assert (need.service, need.partition) == ("expire-partitions", "dt=2026-11-20")
    assert need.procedure == "CALL sys.expire_partitions(table => 'db.t', expiration_time => '2 d')"
    # without the option nothing expires; values read by the table's pattern and formatter
    assert judge(PaimonTableState("t", [], ["dt"], {}, [], [], {}, files), "db.t", NOW).needs == []
    assert partition_time("dt=20261120/h=05", {"partition.timestamp-formatter": "yyyyMMdd"}) == datetime(
        2026, 11, 20, tzinfo=UTC
    )  # the first value
    pattern = {"partition.timestamp-pattern": "$dt $h:00:00", "partition.timestamp-formatter": "yyyyMMdd HH:mm:ss"}
    assert partition_time("dt=20261120/h=05", pattern) == datetime(2026, 11, 20, 5, tzinfo=UTC)
    assert partition_time("region=eu", {}) is None
    # the update-time strategy needs each partition's last update: left to Paimon
    updated = {**options, "partition.expiration-strategy": "update-time"}
    assert judge(PaimonTableState("t", [], ["dt"], updated, [], [], {}, files), "db.t", NOW).needs == []


def test_lakewarden_runs_paimons_services_on_a_write_only_table_in_order() -> None:
    needs = _files([0] * 5)
    writers = _state(needs, snapshots=12)
    plan = plan_services(writers, judge(writers, "db.t", NOW))
    assert plan.runs == [] and plan.left[0].startswith("compaction: the writers run it with their commits")
    owned = _state(needs, snapshots=12, options={"write-only": "true"})
    plan = plan_services(owned, judge(owned, "db.t", NOW))
    assert [r.service for r in plan.runs] == ["compaction", "expire-snapshots"]  # once each, compaction first
    # Paimon found nothing to compact at the latest snapshot: not asked again until a snapshot comes
    last = LastRun.of([{"idle_services": ["compaction"], "timeline_tail": "12"}])
    plan = plan_services(owned, judge(owned, "db.t", NOW), last)
    assert [r.service for r in plan.runs] == ["expire-snapshots"]
    assert plan.left == [
        "compaction: Paimon found nothing to do when lakewarden last ran it, and no snapshot came since"
    ]
    newer = _state(needs, snapshots=13, options={"write-only": "true"})
    assert plan_services(newer, judge(newer, "db.t", NOW), last).runs[0].service == "compaction"


def test_snapshots_expire_past_the_time_retained_beyond_the_minimum_kept() -> None:
    assert judge(_state([], snapshots=10), "db.t", NOW).needs == []  # all within num-retained.min
    (need,) = judge(_state([], snapshots=12), "db.t", NOW).needs  # 2 beyond the 10 kept, older than an hour
    assert (need.service, need.reason) == (
        "expire-snapshots",
        "2 snapshot(s) older than snapshot.time-retained 60min beyond the 10 snapshot.num-retained.min keeps",
    )
    assert judge(_state([], snapshots=12, options={"snapshot.time-retained": "1 d"}), "db.t", NOW).needs == []
    capped = judge(_state([], snapshots=4, options={"snapshot.num-retained.max": "3"}), "db.t", NOW).needs
    assert capped[0].reason == "4 snapshots > snapshot.num-retained.max 3"


def test_a_binary_row_partition_is_decoded_as_paimon_writes_it() -> None:
    # arity prefix, then: header byte + null bits (8 bytes), one 8-byte slot per field, then variable-length data
    long_text = "a-longer-region"
    slots = struct.pack("<i", 7) + b"\0" * 4  # INT 7
    slots += bytes([*b"eu", 0, 0, 0, 0, 0, 0x80 | 2])  # a short string in its slot, the high bit marking it
    slots += struct.pack("<q", ((8 + 4 * 8) << 32) | len(long_text))  # a long one: offset, length
    slots += struct.pack("<i", 20000) + b"\0" * 4  # DATE: days since the epoch
    nulls = bytearray(8)
    row = bytes(nulls) + slots + long_text.encode()
    assert decode_row(struct.pack(">i", 4) + row, ["INT", "STRING", "VARCHAR(20)", "DATE"]) == [
        7,
        "eu",
        long_text,
        date(2024, 10, 4),
    ]
    nulls[0] |= 1 << 8 % 8  # the first field's null bit (after the 8-bit header): bit 8
    nulls[1] |= 1
    assert decode_row(struct.pack(">i", 4) + bytes(nulls) + slots, ["INT", "STRING", "STRING", "DATE"])[0] is None


# ---- tables written by pypaimon


def test_tables_written_by_pypaimon_are_read_back(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [
        pk_table("sales.orders", buckets=2),
        {"write": "sales.orders", "rows": rows([1, 2, 3, 4], "eu", "a")},
        {"write": "sales.orders", "rows": rows([1, 3], "eu", "b")},
        {"add_column": "sales.orders", "name": "note", "type": "string"},
        {"write": "sales.orders", "rows": rows([5], "us", "c")},
        {"tag": "sales.orders", "name": "release"},
        {"create": "sales.logs", "columns": {"ts": "bigint", "msg": "string"}},
        {"write": "sales.logs", "rows": {"ts": [1, 2], "msg": ["x", "y"]}},
    ]
    written = write_paimon(tmp_path, steps)
    assert [r["v"] for r in written["sales.orders"]] == ["b-1", "a-2", "b-3", "a-4", "c-5"]  # pypaimon's own read
    tables = find_tables(str(tmp_path))
    assert set(tables) == {("sales", "orders"), ("sales", "logs")}

    orders = read_table(tables[("sales", "orders")])
    assert (orders.primary_keys, orders.partition_keys, orders.options) == (
        ["id", "region"],
        ["region"],
        {"bucket": "2"},
    )
    assert [s.id for s in orders.snapshots] == [1, 2, 3] and [s.schema_id for s in orders.snapshots] == [0, 0, 1]
    assert [len(s["fields"]) for s in orders.schemas] == [3, 4]  # the column added
    assert orders.tags == {"release": 3}
    assert {f.partition for f in orders.files} == {"region=eu", "region=us"}
    assert all(f.level == 0 for f in orders.files) and sum(f.rows for f in orders.files) == 7  # 4 + 2 + 1 written
    assert {f.bucket for f in orders.files} <= {0, 1}
    on_disk = {p.name for p in tables[("sales", "orders")].rglob("data-*")}
    assert {f.name for f in orders.files} == on_disk

    logs = read_table(tables[("sales", "logs")])
    assert logs.primary_keys == [] and logs.partition_keys == [] and [f.partition for f in logs.files] == [""]

    # a half-written table: its latest snapshot names a manifest list that is not there
    for listed_manifest in tables[("sales", "logs")].glob("manifest/manifest-list-*"):
        listed_manifest.unlink()
    with pytest.raises(NotAPaimonTable, match="cannot read the latest snapshot's manifests"):
        read_table(tables[("sales", "logs")])

    token = change_token(tables[("sales", "orders")])
    write_paimon(tmp_path, [{"tag": "sales.orders", "name": "second"}])
    assert change_token(tables[("sales", "orders")]) != token  # a tag moves it too


# ---- a `paimon` catalog in the service


def test_paimon_tables_are_listed_judged_and_shown(client: TestClient, tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [pk_table("sales.orders")]
    steps += [{"write": "sales.orders", "rows": rows([i, i + 100], "eu", f"w{i}")} for i in range(5)]
    steps += [{"tag": "sales.orders", "name": "t1"}]
    write_paimon(tmp_path, steps)
    broken = tmp_path / "sales.db" / "broken"
    (broken / "schema").mkdir(parents=True)
    (broken / "schema" / "schema-0").write_text("{not json")

    body = {"name": "lake", "type": "paimon", "properties": {"warehouse": str(tmp_path)}}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    assert refresh(client, "lake")["tables"] == 2
    assert listed(client, format="paimon") == ["lake.sales.broken", "lake.sales.orders"]
    assert "cannot read schema/schema-0" in client.get("/api/v1/tables/lake/sales/broken").json()["refresh_error"]

    client.app.state.context.evaluator.run_once()  # type: ignore[attr-defined]
    table = client.get("/api/v1/tables/lake/sales/orders").json()
    assert (table["format"], table["status"], table["current_snapshot_id"]) == ("paimon", "idle", 5)
    assert table["evaluation"]["reasons"] == [
        "compaction: 5 sorted runs (5 level-0 files) >= num-sorted-run.compaction-trigger 5",
        # pypaimon's writer compacts as it commits (the table is not write-only): the work is the writers'
        "not run by lakewarden now: compaction: the writers run it with their commits; with the table's write-only "
        "true (Paimon's dedicated compaction) lakewarden runs it",
    ]

    view = client.get("/api/v1/tables/lake/sales/orders/paimon").json()
    assert (view["primary_keys"], view["partition_keys"], view["snapshot_count"]) == (["id", "region"], ["region"], 5)
    assert [s["id"] for s in view["snapshots"]] == [5, 4, 3, 2, 1]
    assert view["tags"] == [{"name": "t1", "snapshot_id": 5}]
    assert [f["name"] for f in view["schemas"][0]["fields"]] == ["id", "region", "v"]
    (bucket,) = view["buckets"]
    assert (bucket["partition"], bucket["bucket"], bucket["files_per_level"], bucket["sorted_runs"]) == (
        "region=eu",
        0,
        {"0": 5},
        5,
    )
    assert view["partitions"][0]["records"] == 10
    assert view["needs"][0]["procedure"] == "CALL sys.compact(table => 'sales.orders')"
    assert client.get("/api/v1/tables/lake/sales/orders/hudi").status_code == 409
    bad = client.post("/api/v1/catalogs", json={**body, "name": "far", "properties": {"warehouse": "s3://b/w"}})
    assert bad.status_code == 400 and "must be a local directory" in bad.text


@pytest.mark.parametrize("missing", ["warehouse"])
def test_a_paimon_catalog_needs_a_warehouse(client: TestClient, missing: str) -> None:
    refused = client.post("/api/v1/catalogs", json={"name": "p", "type": "paimon", "properties": {}})
    assert refused.status_code == 400 and f"properties.{missing}" in refused.text
