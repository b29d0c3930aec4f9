"""A table's row-level writers as its own snapshots show them (domain/writer_cadence.py reads the summaries)."""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata

from lakewarden.domain.writer_cadence import LOOKED_AT, Cadence, cadence


def row_level_writers(metadata: TableMetadata) -> Cadence | None:
    """The cadence of the applications that committed row-level changes among the table's newest snapshots."""
    newest = metadata.snapshots[-LOOKED_AT:]  # what the cadence looks at: no more summaries copied
    return cadence(
        [
            (s.timestamp_ms, {"operation": s.summary.operation.value, **s.summary.additional_properties})
            for s in newest
            if s.summary is not None
        ]
    )
