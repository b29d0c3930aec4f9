"""The live files of a table snapshot, as plain values, and which delete files apply to which data file."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PartitionKey:
    """A partition of one partition spec. `path` is Iceberg's `field=value/…` form ("" when unpartitioned)."""

    spec_id: int
    path: str
    # JSON-ready values, one per partition field, in spec order (what a filter on the partition needs)
    values: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return self.path or "(unpartitioned)"


@dataclass(frozen=True, slots=True)
class DataFile:
    path: str
    partition: PartitionKey
    size: int
    records: int
    sequence: int  # data sequence number


@dataclass(frozen=True, slots=True)
class DeleteFile:
    path: str
    partition: PartitionKey
    equality: bool  # False: position deletes (or a deletion vector)
    size: int
    records: int
    sequence: int
    # the one data file a position-delete file or deletion vector refers to, when it is file-scoped
    referenced_data_file: str | None = None


@dataclass(frozen=True, slots=True)
class AppliedDeletes:
    """What the delete files that apply to one data file add up to."""

    position_files: int = 0
    position_records: int = 0
    equality_files: int = 0


@dataclass
class PartitionFiles:
    """The data files of one partition, the delete files in it, and which deletes apply to which data file."""

    partition: PartitionKey
    data: list[DataFile] = field(default_factory=list)
    delete_files: list[DeleteFile] = field(default_factory=list)
    deletes_of: dict[str, AppliedDeletes] = field(default_factory=dict)  # data file path -> applied deletes


class _SequenceIndex:
    """Delete files sorted by sequence number, with suffix sums: "all deletes at or after sequence s" in O(log n)."""

    def __init__(self, deletes: list[DeleteFile]) -> None:
        deletes = sorted(deletes, key=lambda d: d.sequence)
        self.sequences = [d.sequence for d in deletes]
        self.suffix_records = [0] * (len(deletes) + 1)
        for i in range(len(deletes) - 1, -1, -1):
            self.suffix_records[i] = self.suffix_records[i + 1] + deletes[i].records

    def at_or_after(self, sequence: int) -> tuple[int, int]:
        i = bisect_left(self.sequences, sequence)
        return len(self.sequences) - i, self.suffix_records[i]


def group_by_partition(data_files: Iterable[DataFile], delete_files: Iterable[DeleteFile]) -> list[PartitionFiles]:
    """Attach delete files to data files with Iceberg's sequence-number rules.

    A position delete applies to data files of its partition with a data sequence number <= its own
    (only to the referenced file when it names one); an equality delete to those with a smaller one.
    Delete files whose partition has no live data file are dangling and attach to nothing.
    """
    partitions: dict[PartitionKey, PartitionFiles] = {}
    for data in data_files:
        part = partitions.get(data.partition)
        if part is None:
            part = partitions[data.partition] = PartitionFiles(data.partition)
        part.data.append(data)

    by_partition: dict[PartitionKey, list[DeleteFile]] = defaultdict(list)
    for delete in delete_files:
        by_partition[delete.partition].append(delete)

    for key, deletes in by_partition.items():
        part = partitions.get(key)
        if part is None:
            continue
        part.delete_files = deletes
        targeted: dict[str, list[DeleteFile]] = defaultdict(list)
        broad_position: list[DeleteFile] = []
        equality: list[DeleteFile] = []
        for delete in deletes:
            if delete.equality:
                equality.append(delete)
            elif delete.referenced_data_file is not None:
                targeted[delete.referenced_data_file].append(delete)
            else:
                broad_position.append(delete)
        position_index = _SequenceIndex(broad_position)
        equality_index = _SequenceIndex(equality)
        for data in part.data:
            pos_files, pos_records = position_index.at_or_after(data.sequence)
            for d in targeted.get(data.path, ()):
                if d.sequence >= data.sequence:
                    pos_files += 1
                    pos_records += d.records
            eq_files, _ = equality_index.at_or_after(data.sequence + 1)
            if pos_files or eq_files:
                part.deletes_of[data.path] = AppliedDeletes(pos_files, pos_records, eq_files)
    return sorted(partitions.values(), key=lambda p: (p.partition.spec_id, p.partition.path))
