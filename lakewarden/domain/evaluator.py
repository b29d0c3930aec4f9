"""The evaluator: per partition, classify data files and decide full, major, minor or nothing — with reasons.

File classes (target = self-optimizing.target-size):
  fragment            size <= target / fragment-ratio
  undersized segment  fragment < size <= target * min-target-size-ratio
  segment             anything bigger

Order of decision per partition: full, else major, else minor (Amoro's semantics, DESIGN.md).
Every decision, and every decision not to optimize, carries sentences a person can read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from lakewarden.domain.files import AppliedDeletes, PartitionFiles, PartitionKey
from lakewarden.domain.optimizing_config import OptimizingConfig

# Iceberg's read.split.open-file-cost: opening a file costs about as much as reading this many bytes.
OPEN_FILE_COST = 4 * 1024 * 1024
_NO_DELETES = AppliedDeletes()


class OptimizingType(enum.IntEnum):
    """Ordered by weight: a table is as heavy as its heaviest partition."""

    MINOR = 1
    MAJOR = 2
    FULL = 3

    @property
    def label(self) -> str:
        return self.name.lower()


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def _duration(ms: int) -> str:
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


@dataclass
class PartitionEvaluation:
    partition: PartitionKey
    type: OptimizingType | None = None
    reasons: list[str] = field(default_factory=list)
    fragment_files: int = 0
    fragment_bytes: int = 0
    undersized_files: int = 0
    undersized_bytes: int = 0
    segment_files: int = 0
    segment_bytes: int = 0
    # segments whose position-deleted rows exceed the duplicate ratio (rewritten by major)
    rewrite_segment_files: int = 0
    rewrite_segment_bytes: int = 0
    # segments with more than one position-delete file (their deletes are combined by minor)
    combine_position_segments: int = 0
    position_delete_files: int = 0
    position_delete_records: int = 0
    position_delete_bytes: int = 0
    equality_delete_files: int = 0
    equality_delete_records: int = 0
    equality_delete_bytes: int = 0
    records: int = 0

    @property
    def data_files(self) -> int:
        return self.fragment_files + self.undersized_files + self.segment_files

    @property
    def cost(self) -> int:
        """Estimated bytes read and written by optimizing this partition (what tasks are binned by)."""
        rewritten = self.fragment_bytes + self.undersized_bytes + self.rewrite_segment_bytes
        deletes = self.position_delete_bytes + self.equality_delete_bytes
        files = (
            self.fragment_files
            + self.undersized_files
            + self.rewrite_segment_files
            + self.position_delete_files
            + self.equality_delete_files
        )
        if self.type is OptimizingType.FULL:
            rewritten = self.fragment_bytes + self.undersized_bytes + self.segment_bytes
            files += self.segment_files - self.rewrite_segment_files
        return 2 * rewritten + deletes + files * OPEN_FILE_COST

    def to_dict(self) -> dict[str, object]:
        return {
            "partition": str(self.partition),
            "spec_id": self.partition.spec_id,
            "values": list(self.partition.values),
            "type": self.type.label if self.type else None,
            "reasons": self.reasons,
            "data_files": self.data_files,
            "fragment_files": self.fragment_files,
            "undersized_files": self.undersized_files,
            "segment_files": self.segment_files,
            "rewrite_segment_files": self.rewrite_segment_files,
            "position_delete_files": self.position_delete_files,
            "equality_delete_files": self.equality_delete_files,
            "records": self.records,
            "cost_bytes": self.cost,
        }


@dataclass(frozen=True)
class OptimizingClock:
    """When evaluation happens and when this table was last optimized (epoch ms; 0 = never)."""

    now_ms: int
    last_minor_ms: int = 0
    last_full_ms: int = 0


def evaluate_partition(files: PartitionFiles, config: OptimizingConfig, clock: OptimizingClock) -> PartitionEvaluation:
    result = PartitionEvaluation(files.partition)
    fragment_max = config.fragment_threshold
    undersized_max = config.undersized_threshold
    smallest = [config.target_size + 1, config.target_size + 1]
    over_ratio: list[str] = []
    for data in files.data:
        applied = files.deletes_of.get(data.path, _NO_DELETES)
        result.records += data.records
        if data.size <= fragment_max:
            result.fragment_files += 1
            result.fragment_bytes += data.size
            continue
        if data.records and applied.position_records > data.records * config.major_duplicate_ratio:
            result.rewrite_segment_files += 1
            result.rewrite_segment_bytes += data.size
            if len(over_ratio) < 3:
                ratio = applied.position_records / data.records
                over_ratio.append(f"{data.path.rsplit('/', 1)[-1]} ({ratio:.0%})")
        elif applied.position_files > 1:
            result.combine_position_segments += 1
        if data.size <= undersized_max:
            result.undersized_files += 1
            result.undersized_bytes += data.size
            if data.size < smallest[0]:
                smallest = [data.size, smallest[0]]
            elif data.size < smallest[1]:
                smallest[1] = data.size
        else:
            result.segment_files += 1
            result.segment_bytes += data.size
    for delete in files.delete_files:
        if delete.equality:
            result.equality_delete_files += 1
            result.equality_delete_records += delete.records
            result.equality_delete_bytes += delete.size
        else:
            result.position_delete_files += 1
            result.position_delete_records += delete.records
            result.position_delete_bytes += delete.size
    _decide(result, config, clock, smallest, over_ratio)
    return result


def _decide(
    r: PartitionEvaluation, config: OptimizingConfig, clock: OptimizingClock, smallest: list[int], over_ratio: list[str]
) -> None:
    # full: on its interval, when there is anything to rewrite
    if config.full_trigger_interval_ms >= 0:
        since_full = clock.now_ms - clock.last_full_ms
        if since_full > config.full_trigger_interval_ms:
            deletes = r.position_delete_files + r.equality_delete_files
            work = []
            if deletes:
                work.append(f"{deletes} delete file(s)")
            if r.fragment_files >= 2:
                work.append(f"{r.fragment_files} fragments")
            if r.undersized_files >= 2:
                work.append(f"{r.undersized_files} undersized segments")
            if r.rewrite_segment_files:
                work.append(f"{r.rewrite_segment_files} segment(s) over the delete ratio")
            if work:
                r.type = OptimizingType.FULL
                r.reasons.append(
                    f"full.trigger.interval ({_duration(config.full_trigger_interval_ms)}) has passed since the "
                    f"last full optimizing; to rewrite: {', '.join(work)}"
                )
                return
            r.reasons.append("full.trigger.interval has passed, but nothing needs rewriting")

    # major: segments with too many deleted rows, or undersized segments that add up to a target
    if r.rewrite_segment_files:
        r.type = OptimizingType.MAJOR
        r.reasons.append(
            f"{r.rewrite_segment_files} segment(s) have more than {config.major_duplicate_ratio:.0%} of their rows "
            f"position-deleted (major.trigger.duplicate-ratio): {', '.join(over_ratio)}"
        )
    if r.undersized_bytes >= config.target_size and smallest[0] + smallest[1] <= config.target_size:
        r.type = OptimizingType.MAJOR
        r.reasons.append(
            f"{r.undersized_files} undersized segments add up to {_mib(r.undersized_bytes)} >= target-size "
            f"{_mib(config.target_size)}, and the two smallest ({_mib(smallest[0])} + {_mib(smallest[1])}) fit in one"
        )
    if r.type is OptimizingType.MAJOR:
        return

    # minor: enough small files, or small files waiting too long, or position deletes to combine
    small = r.fragment_files + r.equality_delete_files
    small_text = f"{r.fragment_files} fragment(s) + {r.equality_delete_files} equality-delete file(s)"
    if small >= config.minor_trigger_file_count:
        r.type = OptimizingType.MINOR
        r.reasons.append(f"{small_text} >= minor.trigger.file-count {config.minor_trigger_file_count}")
    else:
        since_minor = clock.now_ms - clock.last_minor_ms
        interval = config.minor_trigger_interval_ms
        if small > 1 and interval >= 0 and since_minor > interval:
            r.type = OptimizingType.MINOR
            r.reasons.append(
                f"{small_text}, and minor.trigger.interval ({_duration(interval)}) has passed since the last minor "
                "optimizing"
            )
        elif small:
            wait = (
                f"; minor.trigger.interval due in {_duration(interval - since_minor)}"
                if small > 1 and interval >= 0
                else ""
            )
            r.reasons.append(f"{small_text} < minor.trigger.file-count {config.minor_trigger_file_count}{wait}")
    if r.combine_position_segments:
        r.type = OptimizingType.MINOR
        r.reasons.append(f"{r.combine_position_segments} segment(s) have more than one position-delete file to combine")
    if r.type is None and not r.reasons:
        r.reasons.append(
            "nothing to optimize: no fragments, no deletes over the ratio, no undersized segments to merge"
        )


@dataclass
class TableEvaluation:
    """The verdict for one table snapshot: the heaviest type over its partitions, and why."""

    snapshot_id: int | None
    type: OptimizingType | None
    partitions: list[PartitionEvaluation]
    reasons: list[str]

    @property
    def pending(self) -> list[PartitionEvaluation]:
        return [p for p in self.partitions if p.type is not None]

    def summary(self) -> dict[str, object]:
        pending = self.pending
        return {
            "snapshot_id": self.snapshot_id,
            "type": self.type.label if self.type else None,
            "reasons": self.reasons,
            "pending_partitions": len(pending),
            "partitions": len(self.partitions),
            "cost_bytes": sum(p.cost for p in pending),
            # totals over every partition: how healthy the table's layout is
            "data_files": sum(p.data_files for p in self.partitions),
            # small files that have company to be merged with (a partition's lone small file is fine)
            "small_files": sum(
                p.fragment_files + p.undersized_files
                for p in self.partitions
                if p.fragment_files + p.undersized_files >= 2
            ),
            "delete_files": sum(p.position_delete_files + p.equality_delete_files for p in self.partitions),
        }


def evaluate_table(
    snapshot_id: int | None, partitions: list[PartitionFiles], config: OptimizingConfig, clock: OptimizingClock
) -> TableEvaluation:
    if not config.enabled:
        return TableEvaluation(snapshot_id, None, [], ["self-optimizing.enabled is false"])
    if snapshot_id is None:
        return TableEvaluation(snapshot_id, None, [], ["the table has no snapshot yet"])
    evaluated = [evaluate_partition(files, config, clock) for files in partitions]
    pending = [p for p in evaluated if p.type is not None]
    if not pending:
        idle = "no partition needs optimizing" if evaluated else "the table has no data files"
        return TableEvaluation(snapshot_id, None, evaluated, [idle])
    heaviest = max(p.type for p in pending if p.type is not None)
    counts = {t: sum(1 for p in pending if p.type is t) for t in OptimizingType}
    parts = ", ".join(f"{n} {t.label}" for t, n in sorted(counts.items(), reverse=True) if n)
    reasons = [f"{len(pending)} of {len(evaluated)} partition(s) need optimizing ({parts})"]
    if config.filter:
        reasons.append(f"only files that may match self-optimizing.filter ({config.filter}) are considered")
    return TableEvaluation(snapshot_id, heaviest, evaluated, reasons)
