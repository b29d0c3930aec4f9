"""The live files of a table snapshot, as plain values, and which delete files apply to which data file."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
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

    @property
    def key(self) -> str:
        """How lakewarden remembers things per partition (files a rewrite could not reduce, files it clustered)."""
        return f"{self.spec_id}:{self.path}"


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
    # its only position-delete file names this data file alone: it is as combined as it gets (Amoro's
    # "optimizing pos-delete file" of a segment)
    own_position_file: bool = False

    @classmethod
    def of(cls, data: DataFile, deletes: Iterable[DeleteFile]) -> AppliedDeletes:
        position_files = position_records = equality_files = 0
        targeted = 0
        for d in deletes:
            if d.equality:
                equality_files += 1
            else:
                position_files += 1
                position_records += d.records
                targeted += d.referenced_data_file == data.path
        return cls(position_files, position_records, equality_files, position_files == 1 and targeted == 1)

    @property
    def any(self) -> bool:
        return bool(self.position_files or self.equality_files)


class _DeleteIndex:
    """The delete files of one partition arranged for "which apply to this data file", by Iceberg's rules:
    a position delete applies to data files with a data sequence number <= its own (only to the file it
    names, when it names one); an equality delete to those with a smaller one."""

    def __init__(self, deletes: Iterable[DeleteFile]) -> None:
        equality: list[DeleteFile] = []
        broad: list[DeleteFile] = []
        self.targeted: dict[str, list[DeleteFile]] = defaultdict(list)
        for d in deletes:
            if d.equality:
                equality.append(d)
            elif d.referenced_data_file is not None:
                self.targeted[d.referenced_data_file].append(d)
            else:
                broad.append(d)
        self.equality = sorted(equality, key=lambda d: d.sequence)
        self.equality_sequences = [d.sequence for d in self.equality]
        self.broad = sorted(broad, key=lambda d: d.sequence)
        self.broad_sequences = [d.sequence for d in self.broad]

    def deletes_for(self, data: DataFile) -> list[DeleteFile]:
        found = self.equality[bisect_right(self.equality_sequences, data.sequence) :]
        found += self.broad[bisect_left(self.broad_sequences, data.sequence) :]
        found += [d for d in self.targeted.get(data.path, ()) if d.sequence >= data.sequence]
        return found


@dataclass
class PartitionFiles:
    """The data files of one partition and the delete files that may apply to them (its own, and the
    equality deletes of an unpartitioned spec, which apply to every partition)."""

    partition: PartitionKey
    data: list[DataFile] = field(default_factory=list)
    delete_files: list[DeleteFile] = field(default_factory=list)
    _index: _DeleteIndex | None = field(default=None, repr=False, compare=False)

    def deletes_for(self, data: DataFile) -> list[DeleteFile]:
        """The delete files that apply to one of this partition's data files."""
        if self._index is None:
            self._index = _DeleteIndex(self.delete_files)
        return self._index.deletes_for(data)

    def applied(self, data: DataFile) -> AppliedDeletes:
        return AppliedDeletes.of(data, self.deletes_for(data))


def is_global(delete: DeleteFile) -> bool:
    """An equality delete of an unpartitioned spec applies to data files of every partition and spec."""
    return delete.equality and not delete.partition.path and not delete.partition.values


def group_by_partition(data_files: Iterable[DataFile], delete_files: Iterable[DeleteFile]) -> list[PartitionFiles]:
    """The data files by partition, each partition with the delete files that may apply to its files.
    Delete files whose partition has no live data file (and that are not global) are dangling and
    attach to nothing."""
    partitions: dict[PartitionKey, PartitionFiles] = {}
    for data in data_files:
        part = partitions.get(data.partition)
        if part is None:
            part = partitions[data.partition] = PartitionFiles(data.partition)
        part.data.append(data)
    global_deletes: list[DeleteFile] = []
    for delete in delete_files:
        if is_global(delete):
            global_deletes.append(delete)
        elif (part := partitions.get(delete.partition)) is not None:
            part.delete_files.append(delete)
    for part in partitions.values():
        part.delete_files.extend(global_deletes)
    return sorted(partitions.values(), key=lambda p: (p.partition.spec_id, p.partition.path))
