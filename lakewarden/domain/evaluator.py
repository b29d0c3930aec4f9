"""The evaluator: per partition, decide file by file what optimizing would do, and whether it is worth it.

It follows Amoro's CommonPartitionEvaluator and AbstractPartitionPlan rule by rule: files are fragments, undersized
segments or segments by their size against the target; each is rewritten, bin-packed if it finds company, has its
deletes rewritten, or is left alone with its deletes reserved. A partition is full, major or minor by Amoro's
triggers, and pending only when its plan changes something; every verdict carries readable reasons.
docs/self-optimizing.md gives the classes and triggers."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from lakewarden.domain.clustering import Clustering
from lakewarden.domain.durations import format_duration
from lakewarden.domain.file_groups import OPEN_FILE_COST, FileGroup, make_group, split_files, two_smallest
from lakewarden.domain.files import AppliedDeletes, DataFile, DeleteFile, PartitionFiles, PartitionKey
from lakewarden.domain.optimizing_config import OptimizingConfig


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
    return format_duration(timedelta(milliseconds=ms))


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


@dataclass
class PartitionEvaluation:
    partition: PartitionKey
    type: OptimizingType | None = None
    reasons: list[str] = field(default_factory=list)
    full_interval_reached: bool = False
    # when minor.trigger.interval will have passed for small files that wait for it (epoch ms), if any do
    minor_due_ms: int | None = None
    fragment_files: int = 0
    fragment_bytes: int = 0
    # undersized segments that only bin-packing can decide for
    undersized_files: int = 0
    undersized_bytes: int = 0
    # segments (undersized or not) rewritten by the rules: over the delete ratio, or by a full optimizing
    rewrite_segment_files: int = 0
    rewrite_segment_bytes: int = 0
    # segments whose deletes are rewritten into position deletes
    rewrite_pos_files: int = 0
    rewrite_pos_bytes: int = 0
    # ... of which because they have more than one position-delete file
    combine_position_segments: int = 0
    # target-size segments left alone
    segment_files: int = 0
    segment_bytes: int = 0
    # the delete files of the data files the plan takes, each counted once
    position_delete_files: int = 0
    position_delete_records: int = 0
    position_delete_bytes: int = 0
    equality_delete_files: int = 0
    equality_delete_records: int = 0
    equality_delete_bytes: int = 0
    records: int = 0
    # the data files the plan takes by class, and the delete files that must stay (their data files are not taken)
    rewrite: list[DataFile] = field(default_factory=list, repr=False)
    undersized: list[DataFile] = field(default_factory=list, repr=False)
    rewrite_pos: list[DataFile] = field(default_factory=list, repr=False)
    reserved: set[str] = field(default_factory=set, repr=False)
    files: PartitionFiles | None = field(default=None, repr=False)
    _smallest: list[int] = field(default_factory=lambda: [2**62, 2**62], repr=False)
    _counted: set[str] = field(default_factory=set, repr=False)
    # what the emptiness of a plan depends on, gathered while classifying (see _changes_something)
    _rewrite_with_deletes: bool = field(default=False, repr=False)
    _lone_undersized_pos: bool = field(default=False, repr=False)
    _rules: _Rules | None = field(default=None, repr=False)
    _groups: list[FileGroup] | None = field(default=None, repr=False)

    @property
    def groups(self) -> list[FileGroup]:
        """The file groups a plan of this partition optimizes (none unless it is pending); cut when first asked."""
        if self.type is None or self.files is None or self._rules is None:
            return []
        if self._groups is None:
            self._groups = _split(self, self._rules.config, self.files, self._rules)
        return self._groups

    @property
    def data_files(self) -> int:
        return (
            self.fragment_files
            + self.undersized_files
            + self.rewrite_segment_files
            + self.rewrite_pos_files
            + self.segment_files
        )

    @property
    def any_delete(self) -> bool:
        return bool(self.position_delete_files or self.equality_delete_files)

    @property
    def cost(self) -> int:
        """Amoro's estimate of the bytes read and written by optimizing this partition (CommonPartitionEvaluator)."""
        cost = (
            2 * (self.fragment_bytes + self.rewrite_segment_bytes + self.undersized_bytes)
            + self.rewrite_pos_bytes // 10
            + self.position_delete_bytes
            + self.equality_delete_bytes
        )
        files = (
            self.fragment_files
            + self.rewrite_segment_files
            + self.undersized_files
            + self.rewrite_pos_files
            + self.position_delete_files
            + self.equality_delete_files
        )
        open_file_cost = self._rules.config.open_file_cost if self._rules is not None else OPEN_FILE_COST
        return cost + files * open_file_cost

    def count_delete(self, delete: DeleteFile) -> None:
        if delete.path in self._counted:
            return
        self._counted.add(delete.path)
        if delete.equality:
            self.equality_delete_files += 1
            self.equality_delete_records += delete.records
            self.equality_delete_bytes += delete.size
        else:
            self.position_delete_files += 1
            self.position_delete_records += delete.records
            self.position_delete_bytes += delete.size

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
            "rewrite_pos_files": self.rewrite_pos_files,
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


class _Rules:
    """Amoro's per-file rules for one partition under one configuration and clock."""

    def __init__(self, config: OptimizingConfig, clock: OptimizingClock, clustering: Clustering | None) -> None:
        self.config = config
        self.fragment_max = config.fragment_threshold
        self.undersized_max = config.undersized_threshold
        self.full = config.full_trigger_interval_ms >= 0 and (
            clock.now_ms - clock.last_full_ms > config.full_trigger_interval_ms
        )
        # a full optimizing of a clustered table rewrites unclustered partitions whole (domain/clustering.py)
        self.clustering = clustering if self.full else None

    def fragment(self, data: DataFile) -> bool:
        return data.size <= self.fragment_max

    def undersized(self, data: DataFile) -> bool:
        return self.fragment_max < data.size <= self.undersized_max

    def should_rewrite(self, data: DataFile, applied: AppliedDeletes) -> bool:
        if self.clustering is not None:
            return True
        if self.full:
            # a full optimizing rewrites every file, or every file that is small or has deletes
            return self.config.full_rewrite_all_files or applied.any or data.size <= self.undersized_max
        if self.fragment(data):
            return True
        # only position deletes count: equality deletes say little about one segment's deleted rows, and
        # minor optimizing turns them into position deletes anyway
        return applied.position_records > data.records * self.config.major_duplicate_ratio

    @staticmethod
    def should_rewrite_pos(applied: AppliedDeletes) -> bool:
        return (
            applied.position_files > 1
            or applied.equality_files > 0
            or (applied.position_files == 1 and not applied.own_position_file)
        )


_NO_DELETES = AppliedDeletes()


def evaluate_partition(
    files: PartitionFiles,
    config: OptimizingConfig,
    clock: OptimizingClock,
    unreduced: Collection[str] = (),
    clustering: Clustering | None = None,
) -> PartitionEvaluation:
    """`unreduced`: the files the partition's last rewrite wrote without reducing their number; a plan that
    would take only those is not made (it would do the same again). `clustering`: how the table's full
    optimizing orders rows (which takes a partition whole, or leaves it alone when it is clustered)."""
    rules = _Rules(config, clock, clustering)
    r = PartitionEvaluation(files.partition, full_interval_reached=rules.full, files=files, _rules=rules)
    over_ratio: list[str] = []
    fragment_max, undersized_max = rules.fragment_max, rules.undersized_max
    has_deletes = bool(files.delete_files)
    for data in files.data:
        deletes = files.deletes_for(data) if has_deletes else []
        applied = AppliedDeletes.of(data, deletes) if deletes else _NO_DELETES
        r.records += data.records
        size = data.size
        taken = True
        if size <= fragment_max:
            r.fragment_files += 1
            r.fragment_bytes += size
            r.rewrite.append(data)
            r._rewrite_with_deletes |= applied.any
        elif rules.should_rewrite(data, applied):
            r.rewrite_segment_files += 1
            r.rewrite_segment_bytes += size
            r.rewrite.append(data)
            r._rewrite_with_deletes |= applied.any
            if not rules.full and len(over_ratio) < 3:
                over_ratio.append(f"{_name(data.path)} ({applied.position_records / max(data.records, 1):.0%})")
        elif size <= undersized_max:
            r.undersized_files += 1
            r.undersized_bytes += size
            r.undersized.append(data)
            r._lone_undersized_pos |= rules.should_rewrite_pos(applied)
            if size < r._smallest[0]:
                r._smallest = [size, r._smallest[0]]
            elif size < r._smallest[1]:
                r._smallest[1] = size
        elif rules.should_rewrite_pos(applied):
            r.rewrite_pos_files += 1
            r.rewrite_pos_bytes += size
            r.combine_position_segments += applied.position_files > 1
            r.rewrite_pos.append(data)
        else:
            taken = False
            r.segment_files += 1
            r.segment_bytes += size
        for delete in deletes:
            if taken:
                r.count_delete(delete)
            else:
                r.reserved.add(delete.path)
    if rules.clustering is not None:
        _decide_clustering(r, config, rules.clustering)
        return r
    _decide(r, config, clock, rules, over_ratio)
    if r.type is not None and not _changes_something(r, config):
        r.reasons.append(
            "but no file group would change anything (a lone file with no deletes is not rewritten), "
            "so nothing is planned"
        )
        r.type = None
    if r.type is not None and unreduced:
        planned = {f.path for f in (*r.rewrite, *r.undersized, *r.rewrite_pos)}
        if planned <= set(unreduced):
            r.reasons.append(
                f"but its last optimizing rewrote these {len(planned)} file(s) without reducing their number: "
                "it is planned again when its files change"
            )
            r.type = None
    return r


def _changes_something(r: PartitionEvaluation, config: OptimizingConfig) -> bool:
    """Whether _split would keep any group, without cutting them: a file whose deletes are rewritten, a file
    rewritten with its deletes, or two files to rewrite that share a bin. Largest-first first-fit puts two
    files in one bin exactly when the two smallest fit in one (else every file is alone in its bin)."""
    capacity = max(config.target_size, config.max_task_size)
    if r.rewrite_pos or r._rewrite_with_deletes:
        return True
    if r.undersized_files >= 2 and r._smallest[0] + r._smallest[1] <= capacity:
        return True
    if r._lone_undersized_pos:  # undersized files alone in their bins, one of them with deletes to rewrite
        return True
    smallest, second = two_smallest(r.rewrite)
    return smallest + second <= capacity


def _split(r: PartitionEvaluation, config: OptimizingConfig, files: PartitionFiles, rules: _Rules) -> list[FileGroup]:
    """The partition's file groups (domain/file_groups.py); delete files of lone undersized segments left
    alone join the reserved ones. A clustering takes the partition as one group."""
    deletes_of: Callable[[DataFile], list[DeleteFile]] = files.deletes_for if files.delete_files else (lambda _data: [])
    if rules.clustering is not None:
        if not r.rewrite:
            return []
        return [make_group(r.partition, r.rewrite, [], deletes_of, rules.clustering, config.open_file_cost)]
    groups, reserved = split_files(
        r.partition,
        r.rewrite,
        r.undersized,
        r.rewrite_pos,
        deletes_of,
        lambda data, deletes: rules.should_rewrite_pos(AppliedDeletes.of(data, deletes)),
        max(config.target_size, config.max_task_size),
        config.open_file_cost,
    )
    r.reserved.update(reserved)
    return groups


def _decide_clustering(r: PartitionEvaluation, config: OptimizingConfig, clustering: Clustering) -> None:
    every = _duration(config.full_trigger_interval_ms)
    if not r.rewrite:
        return
    why = clustering.unclustered(r.files) if r.files is not None else []
    if why:
        r.type = OptimizingType.FULL
        r.reasons.append(
            f"full.trigger.interval ({every}) has passed since the last full optimizing; the partition is "
            f"rewritten whole, clustered by {clustering.label}: {'; '.join(why)}"
        )
    else:
        r.reasons.append(
            f"full.trigger.interval ({every}) has passed, but the partition is clustered by {clustering.label} "
            "since its last full optimizing and nothing changed it"
        )


def _decide(
    r: PartitionEvaluation, config: OptimizingConfig, clock: OptimizingClock, rules: _Rules, over_ratio: list[str]
) -> None:
    if rules.full:
        work = []
        deletes = r.position_delete_files + r.equality_delete_files
        if deletes:
            work.append(f"{deletes} delete file(s)")
        if r.fragment_files >= 2:
            work.append(f"{r.fragment_files} fragments")
        if r.rewrite_segment_files:
            what = "files" if config.full_rewrite_all_files else "small segments or segments with deletes"
            work.append(f"{r.rewrite_segment_files} {what}")
        if r.rewrite_pos_files:
            work.append(f"{r.rewrite_pos_files} segment(s) whose deletes to rewrite")
        every = _duration(config.full_trigger_interval_ms)
        if work:
            r.type = OptimizingType.FULL
            r.reasons.append(
                f"full.trigger.interval ({every}) has passed since the last full optimizing; "
                f"to rewrite: {', '.join(work)}"
            )
        else:
            r.reasons.append(f"full.trigger.interval ({every}) has passed, but nothing needs rewriting")
        return

    # major: segments with too many deleted rows, or undersized segments that add up to a target
    if r.rewrite_segment_files:
        r.type = OptimizingType.MAJOR
        r.reasons.append(
            f"{r.rewrite_segment_files} segment(s) have more than {config.major_duplicate_ratio:.0%} of their rows "
            f"position-deleted (major.trigger.duplicate-ratio): {', '.join(over_ratio)}"
        )
    smallest = r._smallest
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
            wait = ""
            if small > 1 and interval >= 0:
                wait = f"; minor.trigger.interval due in {_duration(interval - since_minor)}"
                r.minor_due_ms = clock.last_minor_ms + interval + 1
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
    # the table's self-optimizing.filter left some partitions out (their files were not read)
    filtered: bool = False
    # how full optimizing orders its rows (domain/clustering.py), if it does
    clustering: str | None = None
    # the first moment a time-based trigger (minor or full interval) could change this verdict with no new
    # snapshot (epoch ms); None: only a new snapshot or configuration can
    next_trigger_ms: int | None = None

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
            "delete_files": len({d.path for p in self.partitions if p.files for d in p.files.delete_files}),
            "clustering": self.clustering,
            "next_trigger_ms": self.next_trigger_ms,
        }


def evaluate_table(
    snapshot_id: int | None,
    partitions: list[PartitionFiles],
    config: OptimizingConfig,
    clock: OptimizingClock,
    unreduced: Mapping[str, Collection[str]] | None = None,
    clustering: Clustering | None = None,
) -> TableEvaluation:
    if not config.enabled:
        return TableEvaluation(snapshot_id, None, [], ["self-optimizing.enabled is false"])
    if snapshot_id is None:
        return TableEvaluation(snapshot_id, None, [], ["the table has no snapshot yet"])
    marks = unreduced or {}
    evaluated = [
        evaluate_partition(files, config, clock, marks.get(files.partition.key, ()), clustering) for files in partitions
    ]
    pending = [p for p in evaluated if p.type is not None]
    label = clustering.label if clustering is not None else None
    due = [p.minor_due_ms for p in evaluated if p.minor_due_ms is not None]
    full_every = config.full_trigger_interval_ms
    if evaluated and full_every >= 0 and not evaluated[0].full_interval_reached:
        due.append(clock.last_full_ms + full_every + 1)
    next_trigger = min(due, default=None)
    if not pending:
        idle = "no partition needs optimizing" if evaluated else "the table has no data files"
        if evaluated and clustering is not None and evaluated[0].full_interval_reached:
            idle += f": full.trigger.interval has passed, and every partition is clustered by {clustering.label}"
        return TableEvaluation(snapshot_id, None, evaluated, [idle], bool(config.filter), label, next_trigger)
    heaviest = max(p.type for p in pending if p.type is not None)
    counts = {t: sum(1 for p in pending if p.type is t) for t in OptimizingType}
    parts = ", ".join(f"{n} {t.label}" for t, n in sorted(counts.items(), reverse=True) if n)
    reasons = [f"{len(pending)} of {len(evaluated)} partition(s) need optimizing ({parts})"]
    if config.filter:
        reasons.append(f"only files that may match self-optimizing.filter ({config.filter}) are considered")
    return TableEvaluation(snapshot_id, heaviest, evaluated, reasons, bool(config.filter), label, next_trigger)
