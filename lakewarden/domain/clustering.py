"""Clustering: full optimizing that lays out a partition's rows sorted or z-ordered, beyond Amoro.

A table with a sort order or `self-optimizing.z-order.columns` has each partition rewritten whole by Iceberg's
sort or z-order runner, so selective queries read fewer files (sorting part of a partition would leave its ranges
overlapping the rest). Spark's rewrites record no sort order on their files, so lakewarden remembers the files its
last clustering wrote per partition: while those are exactly its files, with no deletes, it stays clustered."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.files import PartitionFiles

Z_ORDER_COLUMNS = "self-optimizing.z-order.columns"
SORT = "sort"
Z_ORDER = "z-order"


@dataclass(frozen=True)
class Clustering:
    """How a table's full optimizing lays out rows, and which partitions are clustered that way already."""

    kind: str  # SORT or Z_ORDER
    # z-order: the columns interleaved; sort: the sort order's fields, as "<column> <transform> <direction>"
    columns: tuple[str, ...]
    sort_order_id: int | None = None
    # per partition key: the files the partition's last clustering rewrite wrote under this clustering
    clustered: Mapping[str, Collection[str]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def label(self) -> str:
        """What the marks are kept under: a different clustering makes every partition unclustered."""
        if self.kind == Z_ORDER:
            return f"z-order({', '.join(self.columns)})"
        return f"sort order {self.sort_order_id} ({', '.join(self.columns)})"

    def unclustered(self, files: PartitionFiles) -> list[str]:
        """Why this partition is not clustered (empty when it is)."""
        written = self.clustered.get(files.partition.key)
        if not files.data:
            return []
        if written is None:
            return [f"its {len(files.data)} data file(s) were never clustered by {self.label}"]
        written = set(written)
        new = sum(1 for f in files.data if f.path not in written)
        reasons = []
        if new:
            reasons.append(f"{new} of its {len(files.data)} data file(s) were not written clustered by {self.label}")
        if any(files.deletes_for(f) for f in files.data):
            reasons.append("delete files apply to its clustered files")
        return reasons

    @staticmethod
    def of(
        z_order_columns: Sequence[str],
        sort_order_id: int,
        sort_fields: Sequence[str],
        columns: Collection[str],
        identity_partition_columns: Collection[str],
        marks: Mapping[str, Any] | None,
    ) -> Clustering | None:
        """The table's clustering: z-order on the named columns (they must exist; identity partition columns
        are constant within a partition and dropped, as Iceberg does), else its sort order, else none.
        `marks` is the table's record: {partition key: {"by": label, "files": [...]}}; only marks kept under
        this clustering count."""
        if z_order_columns:
            unknown = [c for c in z_order_columns if c not in columns]
            if unknown:
                raise InvalidField(Z_ORDER_COLUMNS, f"no column named {', '.join(unknown)} in the table's schema")
            kept = tuple(c for c in z_order_columns if c not in identity_partition_columns)
            if not kept:
                raise InvalidField(
                    Z_ORDER_COLUMNS, "all the columns named are identity partition columns, constant in a partition"
                )
            clustering = Clustering(Z_ORDER, kept)
        elif sort_fields:
            clustering = Clustering(SORT, tuple(sort_fields), sort_order_id)
        else:
            return None
        wanted = {
            key: mark["files"]
            for key, mark in (marks or {}).items()
            if isinstance(mark, dict) and mark.get("by") == clustering.label
        }
        return Clustering(clustering.kind, clustering.columns, clustering.sort_order_id, wanted)


def parse_columns(text: str) -> tuple[str, ...]:
    """`self-optimizing.z-order.columns`: comma-separated column names."""
    columns = tuple(c.strip() for c in text.split(",") if c.strip())
    if len(set(columns)) != len(columns):
        raise InvalidField(Z_ORDER_COLUMNS, f"{text!r} names a column twice")
    return columns


def merged_marks(
    marks: Mapping[str, Any] | None, clustered: Mapping[str, tuple[str, list[str]]]
) -> dict[str, Any] | None:
    """The table's clustering record after a process: each partition it clustered remembers, under which
    clustering (its label), the files it wrote."""
    merged = dict(marks or {})
    for key, (label, files) in clustered.items():
        merged[key] = {"by": label, "files": sorted(files)}
    return merged or None
