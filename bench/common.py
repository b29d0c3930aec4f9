"""Shared by the benchmark scripts: the machine they ran on, and writing results as JSON."""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(__file__).parent / "results"
# a server with its internal catalog `lake` and no optimizer (`running_server`'s config): the server alone
LAKE_ALONE = (
    "catalogs: [{name: lake, type: internal}]\n"
    "containers: [{name: outside, container-impl: external}]\n"
    "resource-groups: [{name: default, container: outside}]\n"
)


def machine() -> dict[str, Any]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "java": java[0] if java else None,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def percentile(values: list[float], q: float) -> float:
    """The `q`th percentile, `q` in percent (95 for p95), nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
    }


def in_temporary_dir(run: Any) -> None:
    """Run `run(tmp)` in a fresh temporary directory, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="lakewarden-bench-"))
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_catalog(tmp: Path, app_name: str) -> tuple[Any, Any]:
    """An Iceberg SQL catalog `bench` (namespace `db`) in `tmp`, and a local[2] SparkSession on it."""
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.metadata.catalogs import initialize_catalog
    from lakewarden.spark.session import build_spark_session

    spec = CatalogSpec("bench", "sql", {"uri": f"sqlite:///{tmp}/catalog.db", "warehouse": str(tmp / "warehouse")})
    initialize_catalog(spec)
    spark = build_spark_session([spec], master="local[2]", driver_memory="4g", app_name=app_name)
    spark.sql("CREATE NAMESPACE bench.db")
    return spec, spark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(tmp: str, config: str) -> Iterator[str]:
    """A real `lakewarden server` process on a fresh data dir in `tmp`; yields its root URL.

    `config` is YAML appended right after the `ams:` block that sets the data dir and the port:
    indented lines add `ams` settings, unindented lines add top-level sections.
    """
    port = free_port()
    path = Path(tmp) / "lakewarden.yaml"
    path.write_text(f"ams:\n  data-dir: {tmp}/data\n  http-server: {{bind-port: {port}}}\n{config}")
    server = subprocess.Popen(
        [sys.executable, "-m", "lakewarden.cli.main", "server", "-c", str(path), "--log-level", "warning"]
    )
    root = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                if httpx.get(f"{root}/api/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield root
    finally:
        server.terminate()
        server.wait(120)  # a graceful stop lets its local optimizers finish their running tasks


def server_pid(tmp: str) -> int:
    """The pid of the server `running_server(tmp, …)` started (found by its config file on its command line)."""
    config = str(Path(tmp) / "lakewarden.yaml").encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if config in (proc / "cmdline").read_bytes():
                    return int(proc.name)
            except OSError:
                continue
    raise RuntimeError("the server's process was not found")


TICK = os.sysconf("SC_CLK_TCK")


def stat_cpu_seconds(stat: Path) -> float:
    """The CPU-seconds (user + system) in a /proc stat file: a process's (/proc/<pid>/stat, its ended threads'
    included) or one thread's (/proc/<pid>/task/<tid>/stat)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_seconds(pid: int) -> float:
    """The CPU-seconds (user + system) process `pid` has used so far, from /proc."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def quiet(server: int, limit: float = 120.0) -> None:
    """Wait until the server has finished with what the writes left it (evaluations, history, trends) and idles
    (under 5% of a core for a second): otherwise the first tool of the first round shares the cores with it."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = cpu_seconds(server)
        time.sleep(1.0)
        if cpu_seconds(server) - before < 0.05:
            return
    print(f"  the server did not idle within {limit:.0f} s")


def descendants(root: int) -> list[int]:
    """Every live process below `root` (e.g. a server's optimizers and their JVMs)."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def tree_cpu(pids: list[int]) -> float:
    """The CPU-seconds of these processes (those gone meanwhile count nothing)."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


class TreeCpu:
    """CPU-seconds spent by the processes under a root, sampled: a process that exits between two samples loses
    at most one interval of its time."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, float] = {}
        self.spent = 0.0
        self.most = 0

    def sample(self) -> None:
        pids = descendants(self.root)
        self.most = max(self.most, len(pids))
        for pid in pids:
            try:
                now = cpu_seconds(pid)
            except OSError:
                continue
            self.spent += now - self.seen.get(pid, now)
            self.seen[pid] = now


def admin_token(tmp: str) -> str:
    """The admin token a `running_server(tmp, …)` wrote at its first start."""
    return (Path(tmp) / "data" / "admin.token").read_text().strip()


def write(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **result}, indent=2) + "\n")
    print(f"results written to {path}")
    return path


def bar_chart(name: str, title: str, bars: dict[str, float], unit: str, goal: float | None = None) -> Path:
    """A PNG bar chart next to the JSON results (results/<name>.png); a dashed line marks the goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels, values = list(bars), list(bars.values())
    drawn = ax.bar(labels, values, color="tab:blue")
    ax.bar_label(drawn, fmt="%.3g")
    if goal is not None:
        ax.axhline(goal, color="tab:red", linestyle="--", label=f"goal {goal:g} {unit}")
        ax.legend()
    ax.set_ylabel(unit)
    ax.set_title(title)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    return _save(fig, name)


def line_charts(
    name: str, x_label: str, x: list[float], panels: list[tuple[str, str, dict[str, list[float]], bool]]
) -> Path:
    """Side-by-side line charts sharing an x axis (results/<name>.png); each panel is (title, y label,
    {line label: values}, logarithmic y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (title, y_label, lines, log) in zip(axes[0], panels, strict=True):
        for label, values in lines.items():
            ax.plot(x, values, "--" if "kept" in label else "-", marker=".", label=label)
        ax.set(title=title, xlabel=x_label, ylabel=y_label, yscale="log" if log else "linear")
        ax.legend(fontsize=7, ncol=2 if len(lines) > 4 else 1)
    return _save(fig, name)


def _save(fig: Any, name: str) -> Path:
    """The figure as results/<name>.png, closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = RESULTS / f"{name}.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot written to {path}")
    return path


def append_snapshot(
    io: Any, metadata: Any, spec: Any, schema: Any, manifest: str, manifest_list: str, files: list[Any], seed: int
) -> Any:
    """`metadata` with one more snapshot appending `files` (pyiceberg DataFiles): their manifest written at
    `manifest`, and a manifest list at `manifest_list` naming it and the parent's manifests (generated tables for
    the benches, written without a catalog)."""
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, write_manifest, write_manifest_list
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate

    from lakewarden.metadata.table_metadata import apply_updates

    parent = metadata.current_snapshot()
    snapshot_id = random.Random(seed).getrandbits(62)
    sequence = metadata.last_sequence_number + 1
    with write_manifest(2, spec, schema, io.new_output(manifest), snapshot_id, "deflate") as writer:
        for data in files:
            writer.add_entry(
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=data)
            )
    manifests = [writer.to_manifest_file(), *(parent.manifests(io) if parent else [])]
    parent_id = parent.snapshot_id if parent else None
    with write_manifest_list(2, io.new_output(manifest_list), snapshot_id, parent_id, sequence, "deflate") as out:
        out.add_manifests(manifests)
    before = parent.summary.additional_properties if parent and parent.summary else {}
    total = len(files) + int(before.get("total-data-files", 0))
    size = sum(f.file_size_in_bytes for f in files) + int(before.get("total-files-size", 0))
    records = sum(f.record_count for f in files) + int(before.get("total-records", 0))
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        sequence_number=sequence,
        timestamp_ms=int(time.time() * 1000),
        manifest_list=manifest_list,
        schema_id=0,
        summary=Summary(
            Operation.APPEND,
            **{
                "added-data-files": str(len(files)),
                "total-data-files": str(total),
                "total-delete-files": "0",
                "total-records": str(records),
                "total-files-size": str(size),
            },
        ),
    )
    ref = SetSnapshotRefUpdate(
        ref_name="main",
        type=SnapshotRefType.BRANCH,
        snapshot_id=snapshot_id,
        max_ref_age_ms=None,
        max_snapshot_age_ms=None,
        min_snapshots_to_keep=None,
    )
    return apply_updates(metadata, [AddSnapshotUpdate(snapshot=snapshot), ref])
