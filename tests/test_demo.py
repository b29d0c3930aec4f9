"""The README's main command: `lakewarden demo` streams into tables while lakewarden compacts them;
Ctrl-C stops everything cleanly and every table holds exactly what was written."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import wait_for
from tests.servers import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_demo_compacts_live_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "demo.out"
    with log.open("wb") as out:
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lakewarden.cli.main",
                "demo",
                "--minutes",
                "10",
                "--tables",
                "2",
                "--rows",
                "50",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "demo"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        # the writer makes small files; lakewarden's local optimizer compacts them while it writes. Its MERGEs
        # touch every file without a pause, and lakewarden's rewrites yield to them (docs/rest-catalog.md): the
        # first one lands when a rewrite slips between two MERGEs, which can take minutes on two cores
        try:
            wait_for(
                "a compaction during the demo",
                lambda: demo.poll() is None and _succeeded(api, tmp_path / "demo"),
                timeout=540,
                interval=1,
            )
        except AssertionError as exc:
            raise AssertionError(_diagnosis(api, tmp_path / "demo", log)) from exc
        assert demo.poll() is None, log.read_text()
        demo.send_signal(signal.SIGINT)  # Ctrl-C
        code = demo.wait(240)
    finally:
        if demo.poll() is None:
            demo.kill()
    output = log.read_text()
    assert code == 0, output
    assert "interrupted: stopping the writer" in output
    assert output.count("verified:") == 2, output  # every table holds exactly the rows written
    assert "lake.demo.events_1" in output and "lake.demo.events_2" in output
    with pytest.raises(httpx.HTTPError):  # the server (and with it the optimizer) is gone
        httpx.get(f"{api}/health", timeout=2)  # open without a token
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path / "demo")], capture_output=True, text=True).stdout
    assert not leftovers.strip(), f"processes left running: {leftovers}"


def _auth(data_dir: Path) -> dict[str, str]:
    """The admin token the demo's server wrote at its first start (none yet while it starts)."""
    path = data_dir / "lakewarden" / "admin.token"
    return {"Authorization": f"Bearer {path.read_text().strip()}"} if path.exists() else {}


def _succeeded(api: str, data_dir: Path) -> bool:
    try:
        answer = httpx.get(f"{api}/processes", params={"status": "success"}, headers=_auth(data_dir), timeout=5)
    except httpx.HTTPError:
        return False
    if answer.status_code != 200:  # still starting (no token written yet, or no leader yet)
        return False
    return any(p["action"] == "optimizing" for p in answer.json())


def _diagnosis(api: str, data_dir: Path, log: Path) -> str:
    """What the demo, its server and its processes were doing, for a failure report."""
    parts = [f"demo output:\n{log.read_text()[-4000:]}"]
    server_log = data_dir / "server.log"
    if server_log.exists():
        parts.append(f"server log (end):\n{server_log.read_text()[-4000:]}")
    try:
        for p in httpx.get(f"{api}/processes", params={"limit": 20}, headers=_auth(data_dir), timeout=5).json():
            tasks = [(t["status"], t["attempt"], t["failure"], (t["error"] or "")[:160]) for t in p["tasks"]]
            parts.append(f"process {p['process_id']} {p['table']} {p['action']} {p['status']}: {tasks}")
    except httpx.HTTPError as exc:
        parts.append(f"processes: {exc}")
    return "\n".join(parts)


def test_demo_on_s3_runs_against_its_own_s3_server_with_the_same_checks(tmp_path: Path) -> None:
    """`--storage s3`: the catalog's warehouse is a bucket of an S3 server the demo starts itself (moto), the
    writer and the optimizer reach it with the credentials the catalog vends; every table checks out, and the
    S3 server stops with the demo."""
    log = tmp_path / "demo.out"
    data_dir = tmp_path / "demo"
    with log.open("wb") as out:
        demo = subprocess.run(
            [
                sys.executable,
                "-m",
                "lakewarden.cli.main",
                "demo",
                "--storage",
                "s3",
                "--minutes",
                "0.5",
                "--tables",
                "1",
                "--rows",
                "50",
                "--port",
                str(free_port()),
                "--data-dir",
                str(data_dir),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=480,
        )
    output = log.read_text()
    assert demo.returncode == 0, output
    assert "the tables go to s3://lakewarden-demo/warehouse" in output
    assert output.count("verified:") == 1, output
    with sqlite3.connect(data_dir / "lakewarden" / "lakewarden.db") as db:  # the server's own record of the table
        (location,) = db.execute("SELECT metadata_location FROM iceberg_table").fetchone()
    assert location.startswith("s3://lakewarden-demo/warehouse/demo/events_1-"), location
    leftovers = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True).stdout
    assert not leftovers.strip(), f"processes left running: {leftovers}"
    moto = subprocess.run(["pgrep", "-f", "moto.server"], capture_output=True, text=True).stdout
    assert not moto.strip(), f"the demo's S3 server is still running: {moto}"


def test_demo_refuses_a_storage_it_does_not_know(tmp_path: Path) -> None:
    answer = subprocess.run(
        [sys.executable, "-m", "lakewarden.cli.main", "demo", "--storage", "gcs", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert answer.returncode != 0 and "--storage: 'gcs' is none of local, s3" in answer.stderr, answer.stderr
