"""Commits applied to table metadata without a catalog: v3 upgrades and v3 metadata files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadataV2, TableMetadataV3
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.types import LongType, NestedField

from lakewarden.metadata import table_metadata
from lakewarden.metadata.table_metadata import apply_updates, metadata_json, new_metadata, write_metadata

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _table(tmp_path: Path, version: str) -> TableMetadataV2 | TableMetadataV3:
    metadata = new_metadata(SCHEMA, PartitionSpec(), SortOrder(), str(tmp_path), {"format-version": version})
    assert isinstance(metadata, TableMetadataV2 | TableMetadataV3)
    return metadata


def test_upgrade_to_v3_starts_row_lineage_and_keeps_the_rest(tmp_path: Path) -> None:
    base = _table(tmp_path, "2")
    upgraded = apply_updates(
        base, [UpgradeFormatVersionUpdate(format_version=3), SetPropertiesUpdate(updates={"k": "v"})], "/m/0.json"
    )
    assert isinstance(upgraded, TableMetadataV3)
    assert upgraded.next_row_id == 0 and upgraded.properties["k"] == "v"
    assert upgraded.table_uuid == base.table_uuid and upgraded.schemas == base.schemas
    assert [entry.metadata_file for entry in upgraded.metadata_log] == ["/m/0.json"]
    assert base.format_version == 2  # the base is never changed
    # upgrading to the same version changes nothing; down or past v3 is refused
    assert apply_updates(upgraded, [UpgradeFormatVersionUpdate(format_version=3)]) is upgraded
    with pytest.raises(ValueError, match="downgrade"):
        apply_updates(upgraded, [UpgradeFormatVersionUpdate(format_version=2)])
    with pytest.raises(ValueError, match="Unsupported"):
        apply_updates(base, [UpgradeFormatVersionUpdate(format_version=4)])


def test_v3_metadata_files_are_written_and_read_back(tmp_path: Path) -> None:
    created = _table(tmp_path, "3")
    assert isinstance(created, TableMetadataV3) and created.next_row_id == 0
    io = load_file_io({}, str(tmp_path))
    location = f"{tmp_path}/00000-a.metadata.json"
    write_metadata(io, location, created)
    raw = json.loads(Path(location).read_text())
    assert raw["format-version"] == 3 and raw["next-row-id"] == 0
    assert FromInputFile.table_metadata(io.new_input(location)) == created
    assert json.loads(metadata_json(created)) == raw
    with pytest.raises(FileExistsError):  # metadata files never change
        write_metadata(io, location, created)
    # a local file is created exclusively, its directory made if need be; a `file:` URI is a local path
    for fresh in (f"{tmp_path}/new/metadata/00001-b.metadata.json", f"file://{tmp_path}/new/metadata/00002-c.json"):
        text = write_metadata(io, fresh, created)
        assert FromInputFile.table_metadata(io.new_input(fresh)) == created and json.loads(text) == raw
        with pytest.raises(FileExistsError):
            write_metadata(io, fresh, created)
    assert sorted(p.name for p in (tmp_path / "new" / "metadata").iterdir()) == [
        "00001-b.metadata.json",
        "00002-c.json",
    ]


@pytest.mark.parametrize("version", ["2", "3"])
def test_many_snapshots_are_written_as_pyiceberg_writes_them_each_serialised_once(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata: Any = _table(tmp_path, version)
    versions = []
    for i in range(1, 41):
        snapshot = Snapshot(
            snapshot_id=i,
            parent_snapshot_id=i - 1 if i > 1 else None,
            sequence_number=i,
            timestamp_ms=1_700_000_000_000 + i,
            manifest_list=f"{tmp_path}/metadata/snap-{i}.avro",
            summary=Summary(Operation.APPEND, **{"added-records": str(i), "note": 'a "quoted" \\ value'}),
            schema_id=0,
            **({"first_row_id": i * 10, "added_rows": 10} if version == "3" else {}),
        )
        update = SetSnapshotRefUpdate(
            ref_name="main",
            type="branch",
            snapshot_id=i,
            max_ref_age_ms=None,
            max_snapshot_age_ms=None,
            min_snapshots_to_keep=None,
        )
        metadata = apply_updates(metadata, [AddSnapshotUpdate(snapshot=snapshot), update], f"/m/{i}.json")
        versions.append(metadata)
    made: list[int] = []
    serialise = Snapshot.model_dump_json

    def counted(self: Snapshot, **kwargs: Any) -> str:
        made.append(self.snapshot_id)
        return serialise(self, **kwargs)

    monkeypatch.setattr(Snapshot, "model_dump_json", counted)
    for metadata in versions[table_metadata.SPLICED_FROM - 2 :]:
        text = metadata_json(metadata)
        # the same JSON value as one serialisation of the whole metadata, read back to the same model
        assert json.loads(text) == json.loads(IcebergBaseModel.model_dump_json(metadata))
        location = f"{tmp_path}/{len(metadata.snapshots)}.metadata.json"
        Path(location).write_text(text)
        assert FromInputFile.table_metadata(load_file_io({}, str(tmp_path)).new_input(location)) == metadata
    # each snapshot's JSON was made once by metadata_json (the others counted are the whole-metadata dumps':
    # pydantic serialises nested models without calling their model_dump_json)
    assert sorted(made) == list(range(1, 41))


def test_manifests_read_like_pyiceberg_with_schemas_resolved_once(tmp_path: Path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from lakewarden.metadata import manifests as fast

    catalog = SqlCatalog("m", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA)
    for i in range(3):
        table.append(pa.table({"id": pa.array([i, i + 10], pa.int64())}))
    table.delete("id = 1")  # a commit that marks entries deleted
    snapshot = table.current_snapshot()
    assert snapshot is not None
    fast._resolved.clear()  # a process-wide cache: other tests' manifests may be in it
    theirs = snapshot.manifests(table.io)
    ours = fast.manifests(table.io, snapshot)
    assert [m.manifest_path for m in ours] == [m.manifest_path for m in theirs]
    assert [m.sequence_number for m in ours] == [m.sequence_number for m in theirs]
    for mine, reference in zip(ours, theirs, strict=True):
        for discard in (True, False):
            a = fast.entries(table.io, mine, discard_deleted=discard)
            b = reference.fetch_manifest_entry(table.io, discard_deleted=discard)
            assert _entry_keys(a) == _entry_keys(b)
    assert 1 <= len(fast._resolved) <= 4  # one reader per distinct schema, not per file


def _entry_keys(entries: list[Any]) -> list[tuple[Any, ...]]:
    """What must match between two readings of a manifest, entry by entry."""
    return [
        (
            e.status,
            e.snapshot_id,
            e.sequence_number,
            e.file_sequence_number,
            e.data_file.file_path,
            e.data_file.record_count,
        )
        for e in entries
    ]
