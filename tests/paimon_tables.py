"""Paimon tables written by pypaimon, Paimon's own library, in `.venv-paimon` (tests/paimon_writer.py says why it
is an environment of its own; bin/test makes it from tests/paimon-writer.lock)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.tools import writer_python

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "paimon_writer.py"


def paimon_python() -> Path:
    return writer_python(Path(os.environ.get("LAKEWARDEN_PAIMON_VENV", ROOT / ".venv-paimon")), "pypaimon")


def write_paimon(warehouse: Path, steps: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Runs the plan's steps with pypaimon; each created table's rows as pypaimon reads them back."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as plan:
        json.dump(steps, plan)
    try:
        done = subprocess.run(
            [str(paimon_python()), str(WRITER), str(warehouse), plan.name],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.unlink(plan.name)
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def pk_table(name: str, buckets: int = 1, **options: str) -> dict[str, Any]:
    """A primary-key table (id, region) partitioned by region."""
    return {
        "create": name,
        "columns": {"id": "bigint", "region": "string", "v": "string"},
        "partition_keys": ["region"],
        "primary_keys": ["id", "region"],
        "options": {"bucket": str(buckets), **options},
    }


def rows(ids: list[int], region: str, tag: str) -> dict[str, list[Any]]:
    return {"id": ids, "region": [region] * len(ids), "v": [f"{tag}-{i}" for i in ids]}
