"""The server's memory levels off under a long stream of commits: its caches are bounded by bytes and drop what a
commit replaced (services/rest_catalog/metadata_files.py, services/rest_catalog/read_ahead.py). bench/commit_soak.py
measures the same over a long run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.servers import started_server

TABLES = 4
WARM_UP = 120  # commits before the first sample: caches and pools filled, the allocator's arenas grown
COMMITS = 480


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_the_servers_memory_levels_off_under_a_stream_of_commits(tmp_path: Path) -> None:
    """Each commit of these appends leaves a new metadata file, manifest list and manifest; before the caches
    dropped replaced versions the server grew without end (checked: +51 MB over these 360, +4.6 MB now)."""
    with started_server(tmp_path) as server:
        assert server.proc is not None
        # the internal catalog every server seeds
        catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
        catalog.create_namespace("db")
        schema = Schema(NestedField(1, "id", LongType(), required=False))
        tables = [
            catalog.create_table(f"db.t{n}", schema, properties={"self-optimizing.enabled": "false"})
            for n in range(TABLES)
        ]
        samples: dict[int, float] = {}
        for commit in range(1, COMMITS + 1):
            table = tables[commit % TABLES]
            table.append(pa.table({"id": pa.array([commit], pa.int64())}))
            if commit in (WARM_UP, (WARM_UP + COMMITS) // 2, COMMITS):
                samples[commit] = resident_mb(server.proc.pid)
        assert sum(len(t.refresh().snapshots()) for t in tables) == COMMITS
        first, middle, last = samples.values()
        assert last - first < 15, samples
        assert last - middle < 10, samples
