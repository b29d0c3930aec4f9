"""Hudi tables for tests, laid out as Hudi 0.14-0.15's Spark writer leaves them (table version 6): a
`.hoodie/hoodie.properties`, the active timeline's instant files (`<instant>.<action>[.requested|.inflight]`,
a completed commit's metadata as JSON with the Avro schema in `extraMetadata`), partition directories with their
`.hoodie_partition_metadata`, base files named `<fileId>_<writeToken>_<instant>.parquet` carrying Hudi's five meta
columns, and merge-on-read log files `.<fileId>_<baseInstant>.log.<version>_<writeToken>` of log format 1 with
one Parquet data block each. Tests read them back with `hudi` (hudi-rs) to show they are Hudi's, not only ours.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

META = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
AVRO_SCHEMA = {
    "type": "record",
    "name": "t_record",
    "namespace": "hoodie.t",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "region", "type": "string"},
        {"name": "v", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": "long"},
    ],
}
MAGIC = b"#HUDI#"
PARQUET_DATA_BLOCK, LOG_FORMAT_VERSION = 5, 1
INSTANT_TIME, SCHEMA = 0, 2  # log block header keys


def instant(at: datetime) -> str:
    """An instant time as Hudi writes it: yyyyMMddHHmmssSSS."""
    return at.strftime("%Y%m%d%H%M%S") + f"{at.microsecond // 1000:03d}"


@dataclass
class HudiTable:
    """A table being written: its base path, type and the clock its instants are taken from."""

    path: Path
    mor: bool = False
    clock: datetime = field(default_factory=lambda: datetime(2026, 11, 1, 8, 0, tzinfo=UTC))
    file_groups: dict[str, tuple[str, str]] = field(default_factory=dict)  # partition -> (file id, base instant)
    log_versions: dict[str, int] = field(default_factory=dict)  # file id -> last log version

    @property
    def hoodie(self) -> Path:
        return self.path / ".hoodie"

    def create(self, name: str) -> HudiTable:
        self.hoodie.mkdir(parents=True)
        kind = "MERGE_ON_READ" if self.mor else "COPY_ON_WRITE"
        properties = {
            "hoodie.table.name": name,
            "hoodie.table.type": kind,
            "hoodie.table.version": "6",
            "hoodie.timeline.layout.version": "1",
            "hoodie.table.base.file.format": "PARQUET",
            "hoodie.table.recordkey.fields": "id",
            "hoodie.table.partition.fields": "region",
            "hoodie.table.precombine.field": "ts",
            "hoodie.populate.meta.fields": "true",
            "hoodie.datasource.write.hive_style_partitioning": "false",
            "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
            "hoodie.archivelog.folder": "archived",
            "hoodie.table.checksum": "0",
        }
        lines = ["#Properties saved on " + self.clock.strftime("%a %b %d %H:%M:%S UTC %Y")]
        lines += [f"{k}={v}" for k, v in properties.items()]
        (self.hoodie / "hoodie.properties").write_text("\n".join(lines) + "\n")
        (self.hoodie / "archived").mkdir()
        return self

    def _tick(self) -> str:
        self.clock += timedelta(minutes=1)
        return instant(self.clock)

    def _rows(self, ts: str, partition: str, file_name: str, ids: range, tag: str) -> pa.Table:
        count = len(ids)
        return pa.table(
            {
                "_hoodie_commit_time": [ts] * count,
                "_hoodie_commit_seqno": [f"{ts}_0_{i}" for i in range(count)],
                "_hoodie_record_key": [str(i) for i in ids],
                "_hoodie_partition_path": [partition] * count,
                "_hoodie_file_name": [file_name] * count,
                "id": pa.array(list(ids), pa.int64()),
                "region": [partition] * count,
                "v": [f"{tag}-{i}" for i in ids],
                "ts": pa.array([int(ts)] * count, pa.int64()),
            }
        )

    def _partition(self, partition: str, ts: str) -> Path:
        folder = self.path / partition
        if not folder.exists():
            folder.mkdir(parents=True)
            (folder / ".hoodie_partition_metadata").write_text(f"commitTime={ts}\npartitionDepth=1\n")
        return folder

    def commit(self, rows: dict[str, range], tag: str = "v", state: str = "completed") -> str:
        """One write: per partition, a new base file (copy-on-write, or a merge-on-read table's first write to the
        partition) or a log file on the partition's file group (merge-on-read). `state` leaves the instant
        requested or inflight, as a writer that died would."""
        ts = self._tick()
        action = "deltacommit" if self.mor else "commit"
        (self.hoodie / f"{ts}.{action}.requested").write_bytes(b"")
        if state == "requested":
            return ts
        stats: dict[str, list[dict[str, object]]] = {}
        for partition, ids in rows.items():
            folder = self._partition(partition, ts)
            if self.mor and partition in self.file_groups:
                stats[partition] = [self._log(folder, partition, ts, ids, tag)]
            else:
                stats[partition] = [self._base(folder, partition, ts, ids, tag)]
        (self.hoodie / (f"{ts}.{action}.inflight" if self.mor else f"{ts}.inflight")).write_bytes(b"")
        if state == "inflight":
            return ts
        self._complete(ts, action, stats, "UPSERT")
        return ts

    def _complete(self, ts: str, action: str, stats: dict[str, list[dict[str, object]]], operation: str) -> None:
        metadata = {
            "partitionToWriteStats": stats,
            "compacted": action == "commit" and self.mor,
            "extraMetadata": {"schema": json.dumps(AVRO_SCHEMA)},
            "operationType": operation,
        }
        (self.hoodie / f"{ts}.{action}").write_text(json.dumps(metadata, indent=2))

    def _base(self, folder: Path, partition: str, ts: str, ids: range, tag: str) -> dict[str, object]:
        file_id, previous = self.file_groups.get(partition, (f"{uuid.uuid4()}-0", "null"))
        name = f"{file_id}_0-1-0_{ts}.parquet"
        pq.write_table(self._rows(ts, partition, name, ids, tag), folder / name)
        self.file_groups[partition] = (file_id, ts)
        size = (folder / name).stat().st_size
        return _stat(file_id, partition, f"{partition}/{name}", previous, len(ids), size)

    def _log(self, folder: Path, partition: str, ts: str, ids: range, tag: str) -> dict[str, object]:
        file_id, base = self.file_groups[partition]
        version = self.log_versions.get(file_id, 0) + 1
        self.log_versions[file_id] = version
        name = f".{file_id}_{base}.log.{version}_0-1-0"
        content = io.BytesIO()
        pq.write_table(self._rows(ts, partition, f"{file_id}_0-1-0_{base}.parquet", ids, tag), content)
        (folder / name).write_bytes(_log_block(ts, content.getvalue()))
        size = (folder / name).stat().st_size
        stat = _stat(file_id, partition, f"{partition}/{name}", base, len(ids), size)
        return {**stat, "baseFile": f"{file_id}_0-1-0_{base}.parquet", "logFiles": [name], "logVersion": version}

    def request_compaction(self) -> str:
        """A compaction scheduled and not run: `<instant>.compaction.requested` (its plan left empty)."""
        ts = self._tick()
        (self.hoodie / f"{ts}.compaction.requested").write_bytes(b"")
        return ts

    def clean(self) -> str:
        """A completed clean that removed nothing."""
        ts = self._tick()
        for suffix in ("clean.requested", "clean.inflight", "clean"):
            (self.hoodie / f"{ts}.{suffix}").write_bytes(b"")
        return ts


def _stat(file_id: str, partition: str, path: str, previous: str, rows: int, size: int) -> dict[str, object]:
    return {
        "fileId": file_id,
        "path": path,
        "prevCommit": previous,
        "numWrites": rows,
        "numDeletes": 0,
        "numUpdateWrites": 0,
        "numInserts": rows,
        "totalWriteBytes": size,
        "totalWriteErrors": 0,
        "partitionPath": partition,
        "fileSizeInBytes": size,
    }


def _log_block(ts: str, parquet: bytes) -> bytes:
    """One log block of format version 1 as HoodieLogFormatWriter writes it: magic, the block's length, its
    version and type, a header (instant time, schema), the content's length and the content (a Parquet file), an
    empty footer and the whole block's length."""
    header = b""
    entries = [(INSTANT_TIME, ts), (SCHEMA, json.dumps(AVRO_SCHEMA))]
    header += struct.pack(">i", len(entries))
    for key, value in entries:
        encoded = value.encode()
        header += struct.pack(">ii", key, len(encoded)) + encoded
    footer = struct.pack(">i", 0)
    body = struct.pack(">ii", LOG_FORMAT_VERSION, PARQUET_DATA_BLOCK) + header
    body += struct.pack(">q", len(parquet)) + parquet + footer
    total = len(MAGIC) + 8 + len(body) + 8
    return MAGIC + struct.pack(">q", len(body) + 8) + body + struct.pack(">q", total)
