"""The evaluator's verdict on a table of another format than Iceberg: what its own table services would do
(domain/hudi.py, domain/paimon.py), read from its files now. Such a table is never pending: lakewarden cannot
run that work, so the verdict's type is always None and its reasons say what is needed and where."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lakewarden.domain import hudi as hudi_rules
from lakewarden.domain import paimon as paimon_rules
from lakewarden.metadata import hudi, paimon
from lakewarden.store.database import utcnow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)
HUDI_SMALL_BASE_FILE = 128 * 1024 * 1024  # Hudi's hoodie.parquet.max.file.size: a base file below it is small


def _hudi(location: Path, name: str) -> tuple[list[Any], list[str], dict[str, Any]]:
    state = hudi.read_table(location)
    latest = state.latest_slices()
    layout = {
        # the layout's health (domain/tables.TableHealth): small base files, and as the files a read merges into
        # each data file (Iceberg's delete files), the log files of merge-on-read slices
        "data_files": sum(1 for s in latest if s.base_file is not None),
        "small_files": sum(1 for s in latest if s.base_file is not None and s.base_size < HUDI_SMALL_BASE_FILE),
        "delete_files": sum(len(s.log_files) for s in latest),
    }
    verdict = hudi_rules.judge(state, name, utcnow())
    return list(verdict.needs), verdict.reasons, layout


def _paimon(location: Path, name: str) -> tuple[list[Any], list[str], dict[str, Any]]:
    state = paimon.read_table(location)
    target = paimon_rules.MB * (128 if state.primary_keys else 256)
    layout = {
        # small files: under half the default target size; a primary-key table's level-0 files stand where
        # Iceberg's delete files stand (what a read merges)
        "data_files": len(state.files),
        "small_files": sum(1 for f in state.files if f.size < target // 2),
        "delete_files": sum(1 for f in state.files if state.primary_keys and f.level == 0),
    }
    verdict = paimon_rules.judge(state, name, utcnow())
    return list(verdict.needs), verdict.reasons, layout


JUDGES = {"hudi": _hudi, "paimon": _paimon}


def format_verdict(rec: TableRecord) -> dict[str, Any]:
    """The verdict document (the evaluator adds its configuration's hash), never raising: a table that cannot be
    read gets a failed verdict saying why."""
    started = time.monotonic()
    runtime = rec.runtime
    name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
    location = (runtime.summary or {}).get("location")
    try:
        if location is None:  # the explorer could not read it: its refresh error says why
            raise LookupError(runtime.refresh_error or "the explorer has not read it yet")
        needs, reasons, layout = JUDGES[rec.identifier.format](Path(str(location)), name)
        by_partition: dict[str, list[str]] = defaultdict(list)
        for need in needs:
            if need.partition is not None:
                by_partition[need.partition].append(f"{need.service}: {need.reason}")
        document: dict[str, Any] = {
            "snapshot_id": runtime.current_snapshot_id,
            "type": None,
            "reasons": reasons,
            "needs": [asdict(need) for need in needs],
            "partitions": [{"partition": p, "type": None, "reasons": r} for p, r in sorted(by_partition.items())],
            "pending_partitions": 0,
            **layout,
        }
    except Exception as exc:
        if location is not None:
            log.warning("judging %s failed: %s", rec.name, exc)
        document = {
            "failed": True,
            "snapshot_id": runtime.current_snapshot_id,
            "type": None,
            "partitions": [],
            "pending_partitions": 0,
            "reasons": [f"reading the {rec.identifier.format} table failed: {type(exc).__name__}: {exc}"[:1000]],
        }
    document["format"] = rec.identifier.format
    document["duration_ms"] = int((time.monotonic() - started) * 1000)
    document["metadata_location"] = runtime.metadata_location
    return document
