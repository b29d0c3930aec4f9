"""Reading Paimon tables of a filesystem warehouse (a `paimon` catalog) from the files Paimon writes.

A database is `<warehouse>/<database>.db/`; a table's directory holds its schemas and snapshots (JSON), manifests
(Avro, read with fastavro) and tags. The latest snapshot's live files are its base and delta manifest lists'
entries, added less deleted, with partition, bucket and level. Local paths only: a warehouse on object storage is
refused when the catalog is registered."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakewarden.domain.paimon import DataFile, PaimonTableState, Snapshot, decode_row, partition_path
from lakewarden.domain.tables import TableSnapshot
from lakewarden.metadata.local import local_warehouse

DATABASE_SUFFIX = ".db"


class NotAPaimonTable(Exception):
    """The directory is not a Paimon table lakewarden can read (the message says why)."""


def _ids(folder: Path, prefix: str) -> list[int]:
    if not folder.is_dir():
        return []
    names = (p.name for p in folder.iterdir() if p.name.startswith(prefix))
    return sorted(int(n[len(prefix) :]) for n in names if n[len(prefix) :].isdigit())


def is_table(path: Path) -> bool:
    return bool(_ids(path / "schema", "schema-"))


def warehouse_of(table: Path) -> Path:
    """The warehouse a table's directory is in (`<warehouse>/<database>.db/<table>`)."""
    return table.parent.parent


def find_tables(warehouse: str) -> dict[tuple[str, str], Path]:
    """The tables of the warehouse, by (database, table)."""
    root = local_warehouse(warehouse)
    found: dict[tuple[str, str], Path] = {}
    for database in sorted(root.iterdir()):
        if not database.is_dir() or not database.name.endswith(DATABASE_SUFFIX):
            continue
        for table in sorted(database.iterdir()):
            if table.is_dir() and is_table(table):
                found[(database.name.removesuffix(DATABASE_SUFFIX), table.name)] = table
    return found


def change_token(table: Path) -> str:
    """What changes whenever the table does (a snapshot, a schema or a tag): the explorer's `metadata_location`."""
    snapshots = _ids(table / "snapshot", "snapshot-")
    schemas = _ids(table / "schema", "schema-")
    tags = sorted(p.name for p in (table / "tag").iterdir()) if (table / "tag").is_dir() else []
    newest = snapshots[-1] if snapshots else "none"
    tagged = hashlib.sha256("\n".join(tags).encode()).hexdigest()[:12]
    return f"{table}/snapshot/snapshot-{newest}#schema-{schemas[-1] if schemas else 0}#tags-{tagged}"


def _json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NotAPaimonTable(f"cannot read {path.parent.name}/{path.name}: {exc}") from exc
    if not isinstance(found, dict):
        raise NotAPaimonTable(f"{path.parent.name}/{path.name} is not a JSON object")
    return found


def _snapshot(document: dict[str, Any]) -> Snapshot:
    return Snapshot(
        id=int(document["id"]),
        schema_id=int(document.get("schemaId", 0)),
        commit_kind=str(document.get("commitKind", "")),
        time=datetime.fromtimestamp(int(document.get("timeMillis", 0)) / 1000, UTC),
        total_records=document.get("totalRecordCount"),
        delta_records=document.get("deltaRecordCount"),
        commit_user=str(document.get("commitUser", "")),
    )


def _avro(path: Path) -> list[dict[str, Any]]:
    import fastavro

    with path.open("rb") as stream:
        return [record for record in fastavro.reader(stream) if isinstance(record, dict)]


def read_table(table: Path) -> PaimonTableState:
    """What the table is, from its schemas, snapshots, tags and the latest snapshot's manifests; NotAPaimonTable
    when it cannot be read."""
    schema_ids = _ids(table / "schema", "schema-")
    if not schema_ids:
        raise NotAPaimonTable("no schema/schema-<id> file")
    schemas = [_json(table / "schema" / f"schema-{i}") for i in schema_ids]
    try:
        snapshots = [
            _snapshot(_json(table / "snapshot" / f"snapshot-{i}")) for i in _ids(table / "snapshot", "snapshot-")
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise NotAPaimonTable(f"a snapshot file is not Paimon's: {exc}") from exc
    tags = {}
    if (table / "tag").is_dir():
        for path in sorted((table / "tag").iterdir()):
            if path.name.startswith("tag-"):
                tags[path.name[len("tag-") :]] = int(_json(path)["id"])
    current = schemas[-1]
    partition_keys = [str(k) for k in current.get("partitionKeys", [])]
    files: list[DataFile] = []
    if snapshots:
        latest = _json(table / "snapshot" / f"snapshot-{snapshots[-1].id}")
        files = _live_files(table, latest, schemas, partition_keys)
    return PaimonTableState(
        name=table.name,
        primary_keys=[str(k) for k in current.get("primaryKeys", [])],
        partition_keys=partition_keys,
        options={str(k): str(v) for k, v in (current.get("options") or {}).items()},
        schemas=schemas,
        snapshots=snapshots,
        tags=tags,
        files=files,
    )


def _partition_types(schema: dict[str, Any], keys: list[str]) -> list[str]:
    types = {str(f["name"]): f["type"] for f in schema.get("fields", [])}
    return [str(types[k]).replace(" NOT NULL", "") if isinstance(types.get(k), str) else "UNKNOWN" for k in keys]


def _live_files(
    table: Path, snapshot: dict[str, Any], schemas: list[dict[str, Any]], keys: list[str]
) -> list[DataFile]:
    manifests: list[str] = []
    try:
        for kind in ("baseManifestList", "deltaManifestList"):
            name = snapshot.get(kind)
            if name:
                manifests += [str(m["_FILE_NAME"]) for m in _avro(table / "manifest" / str(name))]
        live: dict[tuple[bytes, int, int, str], dict[str, Any]] = {}
        for manifest in manifests:
            for entry in _avro(table / "manifest" / manifest):
                meta = dict(entry["_FILE"])
                key = (bytes(entry["_PARTITION"]), int(entry["_BUCKET"]), int(meta["_LEVEL"]), str(meta["_FILE_NAME"]))
                if int(entry["_KIND"]) == 0:
                    live[key] = meta
                else:
                    live.pop(key, None)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise NotAPaimonTable(f"cannot read the latest snapshot's manifests: {type(exc).__name__}: {exc}") from exc
    types = _partition_types(schemas[-1], keys)
    files = []
    for (partition, bucket, level, name), meta in live.items():
        files.append(
            DataFile(
                partition=partition_path(keys, decode_row(partition, types)) if keys else "",
                bucket=bucket,
                level=level,
                name=name,
                size=int(meta["_FILE_SIZE"]),
                rows=int(meta["_ROW_COUNT"]),
            )
        )
    return sorted(files, key=lambda f: (f.partition, f.bucket, f.level, f.name))


def snapshot(table: Path) -> TableSnapshot:
    """What the explorer keeps of a Paimon table: its change token, options and a summary."""
    state = read_table(table)
    latest = state.latest
    summary: dict[str, Any] = {
        "format": "paimon",
        "location": str(table),
        "primary-keys": state.primary_keys,
        "partition-keys": state.partition_keys,
        "snapshot-count": len(state.snapshots),
        "schema-id": latest.schema_id if latest else None,
        "commit-kind": latest.commit_kind if latest else None,
        "records": latest.total_records if latest else None,
        "partitions": len({f.partition for f in state.files}),
        "buckets": len({(f.partition, f.bucket) for f in state.files}),
        "data-files": len(state.files),
        "files-size-bytes": sum(f.size for f in state.files),
    }
    return TableSnapshot(
        metadata_location=change_token(table),
        current_snapshot_id=latest.id if latest else None,
        properties=dict(state.options),
        summary=summary,
    )
