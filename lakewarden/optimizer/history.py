"""A Java table's history as the retention rules (lakewarden/domain/retention.py) read it: its snapshots, with
the summary entries those rules look at, and its refs with their retention."""

from __future__ import annotations

from typing import Any

from lakewarden.domain.retention import (
    FLINK_CHECKPOINT,
    FLINK_JOB_ID,
    FLINK_OPERATOR_ID,
    OWN_COMMIT,
    PUBLISHED_WAP_ID,
    WAP_ID,
    Ref,
    Snapshot,
)

# the summary entries the retention rules read (the rest of a summary is not fetched from the JVM)
_RETENTION_KEYS = (OWN_COMMIT, FLINK_JOB_ID, FLINK_OPERATOR_ID, FLINK_CHECKPOINT, WAP_ID, PUBLISHED_WAP_ID)


def table_history(table: Any) -> tuple[list[Snapshot], list[Ref]]:
    """The Java table's snapshots (in metadata order) and refs, as domain/retention.py reads them."""
    snapshots = []
    found = table.snapshots().iterator()
    while found.hasNext():
        s = found.next()
        summary = s.summary()
        parent = s.parentId()
        snapshots.append(
            Snapshot(
                int(s.snapshotId()),
                None if parent is None else int(parent),
                int(s.timestampMillis()),
                {k: str(summary[k]) for k in _RETENTION_KEYS if k in summary},
            )
        )
    refs = []
    for ref_name, ref in table.refs().items():
        at_least, snapshot_age, ref_age = ref.minSnapshotsToKeep(), ref.maxSnapshotAgeMs(), ref.maxRefAgeMs()
        refs.append(
            Ref(
                str(ref_name),
                int(ref.snapshotId()),
                bool(ref.isBranch()),
                None if at_least is None else int(at_least),
                None if snapshot_age is None else int(snapshot_age),
                None if ref_age is None else int(ref_age),
            )
        )
    return snapshots, refs
