"""Paimon tables as lakewarden sees them: snapshots, schemas, tags and the live files per partition, bucket and
level, and what Paimon's own compaction and snapshot expiry would do next (pure rules; metadata/paimon.py reads
the table).

The rules are Paimon's own with CoreOptions' defaults, read from the table's options: sorted runs of a primary-key
bucket, small files of an append bucket, snapshot retention. Each need names the procedure that does the work.
docs/formats.md lists them."""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakewarden.domain.durations import format_duration, parse_duration

MB = 1024 * 1024
COMPACTION_TRIGGER = ("num-sorted-run.compaction-trigger", 5)
STOP_TRIGGER = "num-sorted-run.stop-trigger"
MIN_FILE_NUM = ("compaction.min.file-num", 5)
MAX_FILE_NUM = ("compaction.max.file-num", 50)
BUCKET = ("bucket", -1)
TARGET_FILE_SIZE = "target-file-size"
SMALL_FILE_RATIO = ("compaction.small-file-ratio", 0.7)
RETAINED_MIN = ("snapshot.num-retained.min", 10)
RETAINED_MAX = "snapshot.num-retained.max"
TIME_RETAINED = ("snapshot.time-retained", timedelta(hours=1))
PARTITION_EXPIRATION = "partition.expiration-time"
PARTITION_STRATEGY = ("partition.expiration-strategy", "values-time")
TIMESTAMP_FORMATTER = "partition.timestamp-formatter"
TIMESTAMP_PATTERN = "partition.timestamp-pattern"
# what a Java DateTimeFormatter pattern's fields are in strptime's (the ones partition values use)
_JAVA_FIELDS = (("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"))
# Paimon's PartitionTimeExtractor without a formatter: a date, or a date and a time
_DEFAULT_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Snapshot:
    id: int
    schema_id: int
    commit_kind: str  # APPEND, COMPACT, OVERWRITE, ANALYZE
    time: datetime
    total_records: int | None
    delta_records: int | None
    commit_user: str = ""


@dataclass(frozen=True)
class DataFile:
    """A live data file of the latest snapshot."""

    partition: str  # `k=v/k2=v2`, "" for a table without partition keys
    bucket: int
    level: int
    name: str
    size: int
    rows: int


@dataclass(frozen=True)
class PaimonTableState:
    name: str
    primary_keys: list[str]
    partition_keys: list[str]
    options: Mapping[str, str]
    schemas: list[dict[str, Any]]  # each schema file as Paimon wrote it
    snapshots: list[Snapshot]  # oldest first
    tags: dict[str, int]  # tag -> snapshot id
    files: list[DataFile] = field(default_factory=list)

    @property
    def latest(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None


def parse_size(text: str) -> int:
    """A memory size as Paimon writes it: 128 mb, 256MB, 1 gb, or bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size")
    scale = {"": 1, "k": 1024, "m": MB, "g": 1024 * MB, "t": 1024 * 1024 * MB}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def sorted_runs(levels: Sequence[int]) -> int:
    """The sorted runs of a bucket whose files are at these levels: each level-0 file, and each higher level."""
    return sum(1 for level in levels if level == 0) + len({level for level in levels if level > 0})


@dataclass(frozen=True)
class Need:
    """Work Paimon would do, and why."""

    service: str  # compaction, expire-partitions, expire-snapshots
    reason: str
    partition: str | None = None
    bucket: int | None = None
    procedure: str = ""  # the call that runs it, with Paimon's Spark bundle


@dataclass(frozen=True)
class PaimonVerdict:
    needs: list[Need] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [f"{n.service}: {n.reason}" for n in self.needs] or ["nothing for Paimon's compaction or expiry to do"]


def _int(options: Mapping[str, str], key: tuple[str, int]) -> int:
    value = options.get(key[0])
    return int(value) if value is not None and value.strip().isdigit() else key[1]


def judge(state: PaimonTableState, table: str, now: datetime) -> PaimonVerdict:
    o = state.options
    needs: list[Need] = []
    compact = f"CALL sys.compact(table => '{table}')"
    expire = f"CALL sys.expire_snapshots(table => '{table}')"
    buckets: dict[tuple[str, int], list[DataFile]] = {}
    for f in state.files:
        buckets.setdefault((f.partition, f.bucket), []).append(f)
    if state.primary_keys:
        trigger = _int(o, COMPACTION_TRIGGER)
        stop = max(trigger, _int(o, (STOP_TRIGGER, trigger + 3)))
        for (partition, bucket), files in sorted(buckets.items()):
            runs = sorted_runs([f.level for f in files])
            level0 = sum(1 for f in files if f.level == 0)
            if runs >= stop:
                reason = f"{runs} sorted runs ({level0} level-0 files) >= {STOP_TRIGGER} {stop}: writers are stalled"
            elif runs >= trigger:
                reason = f"{runs} sorted runs ({level0} level-0 files) >= {COMPACTION_TRIGGER[0]} {trigger}"
            else:
                continue
            needs.append(Need("compaction", reason, partition, bucket, compact))
    else:
        target = parse_size(o[TARGET_FILE_SIZE]) if TARGET_FILE_SIZE in o else 256 * MB
        ratio = float(o.get(SMALL_FILE_RATIO[0], SMALL_FILE_RATIO[1]))
        small_under = int(target * ratio)
        minimum = _int(o, MIN_FILE_NUM)
        maximum = _int(o, MAX_FILE_NUM)
        unaware = o.get(BUCKET[0], str(BUCKET[1])).strip() == str(BUCKET[1])
        for (partition, bucket), files in sorted(buckets.items()):
            small = sorted(f.size for f in files if f.size < small_under)
            under = f"{len(small)} files under {format_size(small_under)} ({TARGET_FILE_SIZE} × {SMALL_FILE_RATIO[0]})"
            if unaware:
                bins = ready_bins(small, target, minimum, maximum)
                if not bins:
                    continue
                reason = (
                    f"{under} fill {bins} compaction(s): {MIN_FILE_NUM[0]} {minimum} files reaching "
                    f"{TARGET_FILE_SIZE} {format_size(target)}, or {MAX_FILE_NUM[0]} {maximum} files"
                )
            elif len(small) >= minimum:
                reason = f"{under} >= {MIN_FILE_NUM[0]} {minimum}"
            else:
                continue
            needs.append(Need("compaction", reason, partition, bucket, compact))
    for partition, reason in expired_partitions(state, now):
        procedure = f"CALL sys.expire_partitions(table => '{table}', expiration_time => '{o[PARTITION_EXPIRATION]}')"
        needs.append(Need("expire-partitions", reason, partition, procedure=procedure))
    expired = expirable(state, now)
    if expired:
        needs.append(Need("expire-snapshots", expired, procedure=expire))
    return PaimonVerdict(needs)


def partition_time(partition: str, options: Mapping[str, str]) -> datetime | None:
    """The time a partition's values say (Paimon's PartitionTimeExtractor): `partition.timestamp-pattern` with the
    values put in (`$dt $hour:00:00`; the first value without one), read by `partition.timestamp-formatter` (a
    date, or a date and a time, without one). None where the values are not a time."""
    values = dict(part.split("=", 1) for part in partition.split("/") if "=" in part)
    if not values:
        return None
    pattern = options.get(TIMESTAMP_PATTERN)
    if pattern:
        text = pattern
        for key in sorted(values, key=len, reverse=True):  # $dt before $d
            text = text.replace(f"${key}", values[key])
    else:
        text = next(iter(values.values()))
    formatter = options.get(TIMESTAMP_FORMATTER)
    formats = [_strptime_format(formatter)] if formatter else list(_DEFAULT_FORMATS)
    for fmt in formats:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _strptime_format(java: str) -> str:
    for field_, code in _JAVA_FIELDS:
        java = java.replace(field_, code)
    return java


def expired_partitions(state: PaimonTableState, now: datetime) -> list[tuple[str, str]]:
    """The partitions Paimon's partition expiry would drop now, each with why: those whose values' time is older
    than `partition.expiration-time` (the `values-time` strategy; `update-time` needs a partition's last update,
    which the files do not say, so it is left to Paimon)."""
    o = state.options
    if not o.get(PARTITION_EXPIRATION) or not state.partition_keys:
        return []
    if o.get(PARTITION_STRATEGY[0], PARTITION_STRATEGY[1]).strip().lower() != PARTITION_STRATEGY[1]:
        return []
    keep = parse_duration(o[PARTITION_EXPIRATION])
    found = []
    for partition in sorted({f.partition for f in state.files}):
        at = partition_time(partition, o)
        if at is not None and now - at > keep:
            found.append(
                (
                    partition,
                    f"its time {at:%Y-%m-%d %H:%M} is older than {PARTITION_EXPIRATION} {format_duration(keep)}",
                )
            )
    return found


def ready_bins(sizes: Sequence[int], target: int, minimum: int, maximum: int) -> int:
    """The compactions Paimon's planner of an append table without fixed buckets makes of a partition's small
    files (its UnawareAppendTableCompactionCoordinator run once, as a batch compaction does): smallest first,
    a bin is ready when it reaches the target size with at least the minimum of files, or holds the maximum."""
    ready = total = count = 0
    for size in sorted(sizes):
        total, count = total + size, count + 1
        if (total >= target and count >= minimum) or count >= maximum:
            ready, total, count = ready + 1, 0, 0
    return ready


def expirable(state: PaimonTableState, now: datetime) -> str | None:
    """Why snapshots would expire now (Paimon's ExpireSnapshots with the table's options), or None."""
    o = state.options
    count = len(state.snapshots)
    keep_min = _int(o, RETAINED_MIN)
    keep_max = int(o[RETAINED_MAX]) if o.get(RETAINED_MAX, "").isdigit() else None
    # Paimon's durations (1 h, 30 min, plain milliseconds) are the ones lakewarden's own properties use
    retained = parse_duration(o[TIME_RETAINED[0]]) if TIME_RETAINED[0] in o else TIME_RETAINED[1]
    if keep_max is not None and count > keep_max:
        return f"{count} snapshots > {RETAINED_MAX} {keep_max}"
    if count <= keep_min:
        return None
    old = [s for s in state.snapshots[: count - keep_min] if now - s.time > retained]
    if not old:
        return None
    return (
        f"{len(old)} snapshot(s) older than {TIME_RETAINED[0]} {format_duration(retained)} beyond the "
        f"{keep_min} {RETAINED_MIN[0]} keeps"
    )


def format_size(n: int) -> str:
    return f"{n / MB:.0f} MiB" if n >= MB else f"{n} bytes"


# ---- Paimon's BinaryRow, as a manifest entry keeps a file's partition

_HEADER_BITS = 8


def decode_row(data: bytes, types: Sequence[str]) -> list[object]:
    """The values of a serialized BinaryRow (its 4-byte arity prefix, then the row) of these atomic types:
    null bits after a header byte, an 8-byte slot per field, variable-length values after the slots (a string of
    up to 7 bytes kept in its slot, marked by the slot's highest bit)."""
    if not data:
        return []
    row = data[4:] if len(data) >= 4 else data
    null_bytes = ((len(types) + 63 + _HEADER_BITS) // 64) * 8
    values: list[object] = []
    for pos, kind in enumerate(types):
        index = pos + _HEADER_BITS
        if row[index // 8] & (1 << (index % 8)):
            values.append(None)
            continue
        slot = null_bytes + pos * 8
        name = kind.upper().split("(")[0].strip()
        if name in ("BOOLEAN", "BOOL"):
            values.append(row[slot] != 0)
        elif name == "TINYINT":
            values.append(struct.unpack_from("<b", row, slot)[0])
        elif name == "SMALLINT":
            values.append(struct.unpack_from("<h", row, slot)[0])
        elif name in ("INT", "INTEGER"):
            values.append(struct.unpack_from("<i", row, slot)[0])
        elif name == "DATE":
            values.append(
                (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=struct.unpack_from("<i", row, slot)[0])).date()
            )
        elif name == "BIGINT":
            values.append(struct.unpack_from("<q", row, slot)[0])
        elif name == "FLOAT":
            values.append(struct.unpack_from("<f", row, slot)[0])
        elif name == "DOUBLE":
            values.append(struct.unpack_from("<d", row, slot)[0])
        elif name in ("STRING", "VARCHAR", "CHAR"):
            word = struct.unpack_from("<q", row, slot)[0]
            if word & (0x80 << 56):  # the value is in the slot itself
                length = (word >> 56) & 0x7F
                values.append(row[slot : slot + length].decode("utf-8"))
            else:
                offset, length = (word >> 32) & 0xFFFFFFFF, word & 0xFFFFFFFF
                values.append(row[offset : offset + length].decode("utf-8"))
        else:
            values.append(f"<{kind}>")  # shown as its type: no partition key of another type is decoded
    return values


def partition_path(keys: Sequence[str], values: Sequence[object]) -> str:
    return "/".join(f"{k}={'null' if v is None else v}" for k, v in zip(keys, values, strict=False))
