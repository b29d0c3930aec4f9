"""The evaluator's verdict on a table of another format than Iceberg: what its own table services would do
(domain/hudi.py, domain/paimon.py), read from its files now, and what of that lakewarden runs. A table whose
services lakewarden may run now (domain/hudi_services.plan_services, domain/paimon_services.plan_services) turns
pending, in a group whose optimizers carry the format's engine (the group's `engines`); the verdict's reasons say
what is needed and where, and why lakewarden leaves the rest."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lakewarden.domain import hudi as hudi_rules
from lakewarden.domain import hudi_services, paimon_services
from lakewarden.domain import paimon as paimon_rules
from lakewarden.domain.groups import ENGINES_PROPERTY
from lakewarden.domain.optimizing_config import OptimizingConfig
from lakewarden.domain.service_runs import LastRun
from lakewarden.metadata import hudi, paimon
from lakewarden.store.database import utcnow
from lakewarden.store.tables import TableRecord

log = logging.getLogger(__name__)
HUDI_SMALL_BASE_FILE = 128 * 1024 * 1024  # Hudi's hoodie.parquet.max.file.size: a base file below it is small


@dataclass(frozen=True)
class FormatVerdict:
    """What a format's rules found: the needs, the reasons shown, the layout's health, and the optimizing type of
    the work lakewarden runs now (None: nothing it runs)."""

    needs: list[Any]
    reasons: list[str]
    layout: dict[str, Any]
    type: str | None = None


def _hudi(
    location: Path,
    name: str,
    config: dict[str, str],
    engines: tuple[str, ...],
    last: LastRun | None = None,
) -> FormatVerdict:
    state = hudi.read_table(location)
    state = state.configured(config)
    latest = state.latest_slices()
    layout = {
        # the layout's health (domain/tables.TableHealth): small base files, and as the files a read merges into
        # each data file (Iceberg's delete files), the log files of merge-on-read slices
        "data_files": sum(1 for s in latest if s.base_file is not None),
        "small_files": sum(1 for s in latest if s.base_file is not None and s.base_size < HUDI_SMALL_BASE_FILE),
        "delete_files": sum(len(s.log_files) for s in latest),
    }
    verdict = hudi_rules.judge(state, name, utcnow())
    plan = hudi_services.plan_services(state, verdict, last)
    reasons = verdict.reasons + [f"not run by lakewarden now: {left}" for left in plan.left]
    major = any(run.service == "compaction" for run in plan.runs)
    kind = _runnable("hudi", bool(plan.runs), major, config, engines, reasons)
    return FormatVerdict(list(verdict.needs), reasons, layout, kind)


def _runnable(
    engine: str, runs: bool, major: bool, config: dict[str, str], engines: tuple[str, ...], reasons: list[str]
) -> str | None:
    """The optimizing type of the services lakewarden runs now (None: none), saying in `reasons` why not where
    it would but may not."""
    if runs and not OptimizingConfig.of(config).enabled:
        reasons.append("self-optimizing.enabled is false: lakewarden runs none of the table's services")
    elif runs and engine not in engines:
        reasons.append(
            f"the table's group does not carry {engine.capitalize()}'s engine: with {engine} in its "
            f"{ENGINES_PROPERTY} property, its optimizers run the table's services"
        )
    elif runs:
        return "major" if major else "minor"
    return None


def _paimon(
    location: Path,
    name: str,
    config: dict[str, str],
    engines: tuple[str, ...],
    last: LastRun | None = None,
) -> FormatVerdict:
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
    plan = paimon_services.plan_services(state, verdict, last)
    reasons = verdict.reasons + [f"not run by lakewarden now: {left}" for left in plan.left]
    major = bool(state.primary_keys) and any(run.service == "compaction" for run in plan.runs)
    kind = _runnable("paimon", bool(plan.runs), major, config, engines, reasons)
    return FormatVerdict(list(verdict.needs), reasons, layout, kind)


JUDGES = {"hudi": _hudi, "paimon": _paimon}


def format_verdict(rec: TableRecord, engines: tuple[str, ...] = (), last: LastRun | None = None) -> dict[str, Any]:
    """The verdict document (the evaluator adds its configuration's hash), never raising: a table that cannot be
    read gets a failed verdict saying why. `engines`: those the table's group carries; `last`: what lakewarden's
    last run of the format's services found."""
    started = time.monotonic()
    runtime = rec.runtime
    name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
    location = (runtime.summary or {}).get("location")
    try:
        if location is None:  # the explorer could not read it: its refresh error says why
            raise LookupError(runtime.refresh_error or "the explorer has not read it yet")
        found = JUDGES[rec.identifier.format](Path(str(location)), name, dict(runtime.config or {}), engines, last)
        by_partition: dict[str, list[str]] = defaultdict(list)
        for need in found.needs:
            if need.partition is not None:
                by_partition[need.partition].append(f"{need.service}: {need.reason}")
        document: dict[str, Any] = {
            "snapshot_id": runtime.current_snapshot_id,
            "type": found.type,
            "reasons": found.reasons,
            "needs": [asdict(need) for need in found.needs],
            "partitions": [{"partition": p, "type": None, "reasons": r} for p, r in sorted(by_partition.items())],
            "pending_partitions": 0,
            **found.layout,
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
