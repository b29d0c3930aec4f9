"""iceberg-zamboni, a Python maintenance tool that compacts Iceberg tables without Spark (DuckDB and pyiceberg),
as a peer in the benchmarks: installed into an environment of its own (its pyiceberg and pyarrow are not ours)
and run against a REST catalog as a user would run it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ZAMBONI = "iceberg-zamboni==0.7.0"


def zamboni_env(directory: Path) -> Path:
    """A virtual environment of its own with iceberg-zamboni (its pyiceberg and pyarrow are not ours)."""
    venv = directory / "zamboni-venv"
    if not (venv / "bin" / "zamboni").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", ZAMBONI], check=True)
    return venv / "bin" / "zamboni"


def zamboni_run(zamboni: Path, root: str, token: str, name: str) -> dict[str, Any]:
    """`zamboni compact --yes` of table `db.name` in the REST catalog at `root` (warehouse `lake`): its wall time,
    process start included, and its CPU-seconds from the kernel's accounting of the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    command = [str(zamboni), "compact", "--uri", f"{root}/iceberg", "--warehouse", "lake", "--engine", "local"]
    subprocess.run(
        [*command, "--yes", f"db.{name}"],
        check=True,
        env={**os.environ, "ZAMBONI_TOKEN": token},
        stdout=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
