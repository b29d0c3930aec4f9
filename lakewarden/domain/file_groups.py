"""File groups: the files of one partition optimized together, cut as Amoro's BinPackingTaskSplitter cuts
them, and the first-fit packing that cuts them (and that bins groups into tasks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from lakewarden.domain.clustering import Clustering
from lakewarden.domain.files import DataFile, DeleteFile, PartitionKey

# Iceberg's read.split.open-file-cost: opening a file costs about as much as reading this many bytes.
OPEN_FILE_COST = 4 * 1024 * 1024
OPEN_FILE_COST_PROPERTY = "read.split.open-file-cost"


@dataclass(frozen=True)
class FileGroup:
    """Files of one partition optimized together: data files rewritten (their deletes applied) into new
    files, data files whose deletes become a position-delete file of their own, and every delete file
    that applies to any of them."""

    partition: PartitionKey
    rewrite: tuple[DataFile, ...]
    rewrite_pos: tuple[DataFile, ...]
    deletes: tuple[DeleteFile, ...]
    # rows sorted or z-ordered across the output files (a clustered table's full optimizing)
    clustering: Clustering | None = None
    # the table's read.split.open-file-cost
    open_file_cost: int = OPEN_FILE_COST

    @property
    def data_bytes(self) -> int:
        """What bin-packing weighs a group by (Amoro: the data files' sizes)."""
        return sum(f.size for f in self.rewrite) + sum(f.size for f in self.rewrite_pos)

    @property
    def cost(self) -> int:
        """Bytes read and written, as Amoro estimates them: rewritten data twice, a tenth of the segments
        whose deletes are rewritten (only their keys and positions are read), every delete file once, and
        the cost of opening each file."""
        files = len(self.rewrite) + len(self.rewrite_pos) + len(self.deletes)
        return (
            2 * sum(f.size for f in self.rewrite)
            + sum(f.size for f in self.rewrite_pos) // 10
            + sum(d.size for d in self.deletes)
            + files * self.open_file_cost
        )


T = TypeVar("T")


def first_fit(items: Iterable[T], weight: Callable[[T], int], capacity: int) -> list[list[T]]:
    """First-fit bins of at most `capacity`, in the order given (an item heavier than that gets a bin of its
    own): Iceberg's BinPacking.ListPacker with unlimited lookback, which Amoro packs with."""
    bins: list[list[T]] = []
    used: list[int] = []
    for item in items:
        w = weight(item)
        for i, filled in enumerate(used):
            if filled + w <= capacity:
                bins[i].append(item)
                used[i] += w
                break
        else:
            bins.append([item])
            used.append(w)
    return bins


def pack(items: list[DataFile], capacity: int) -> list[list[DataFile]]:
    """Files in bins of at most `capacity` bytes, largest first. Amoro packs in its hash map's order;
    largest-first is one such order, and the one that fills bins best."""
    return first_fit(sorted(items, key=lambda f: (-f.size, f.path)), lambda f: f.size, capacity)


def two_smallest(files: list[DataFile]) -> list[int]:
    a = b = 2**62
    for f in files:
        if f.size < a:
            a, b = f.size, a
        elif f.size < b:
            b = f.size
    return [a, b]


def split_files(
    partition: PartitionKey,
    rewrite: list[DataFile],
    undersized: list[DataFile],
    rewrite_pos: list[DataFile],
    deletes_of: Callable[[DataFile], list[DeleteFile]],
    needs_pos: Callable[[DataFile, list[DeleteFile]], bool],
    capacity: int,
    open_file_cost: int = OPEN_FILE_COST,
) -> tuple[list[FileGroup], set[str]]:
    """Amoro's BinPackingTaskSplitter: undersized segments are packed first, and those that find company are
    rewritten; a lone one has its deletes rewritten, if it needs that (`needs_pos`), or is left alone. Then
    the files to rewrite and those whose deletes are rewritten are packed together. Bins hold `capacity`
    (max(target-size, max-task-size-bytes)); a group of one data file with no deletes changes nothing and is
    dropped. Each group weighs its files by `open_file_cost` (the table's `read.split.open-file-cost`).
    Returns the groups and the delete files of lone segments left alone (reserved)."""
    groups: list[FileGroup] = []
    reserved: set[str] = set()
    rewrite_pos = list(rewrite_pos)
    for packed in pack(undersized, capacity):
        if len(packed) > 1:
            groups.append(make_group(partition, packed, [], deletes_of, open_file_cost=open_file_cost))
            continue
        (lone,) = packed
        lone_deletes = deletes_of(lone)
        if needs_pos(lone, lone_deletes):
            rewrite_pos.append(lone)
        else:
            reserved.update(d.path for d in lone_deletes)
    pos_paths = {f.path for f in rewrite_pos}
    for packed in pack([*rewrite, *rewrite_pos], capacity):
        rewritten = [f for f in packed if f.path not in pos_paths]
        pos = [f for f in packed if f.path in pos_paths]
        groups.append(make_group(partition, rewritten, pos, deletes_of, open_file_cost=open_file_cost))
    kept = [g for g in groups if len(g.rewrite) + len(g.rewrite_pos) > 1 or g.rewrite_pos or g.deletes]
    return kept, reserved


def make_group(
    partition: PartitionKey,
    rewrite: Iterable[DataFile],
    rewrite_pos: Iterable[DataFile],
    deletes_of: Callable[[DataFile], list[DeleteFile]],
    clustering: Clustering | None = None,
    open_file_cost: int = OPEN_FILE_COST,
) -> FileGroup:
    rewrite = sorted(rewrite, key=lambda f: f.path)
    rewrite_pos = sorted(rewrite_pos, key=lambda f: f.path)
    deletes = {d.path: d for f in [*rewrite, *rewrite_pos] for d in deletes_of(f)}
    return FileGroup(
        partition,
        tuple(rewrite),
        tuple(rewrite_pos),
        tuple(deletes[p] for p in sorted(deletes)),
        clustering,
        open_file_cost=open_file_cost,
    )
