"""A Spark standalone cluster from pyspark's own jars, on loopback: for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from tests.helpers import wait_for
from tests.servers import free_port


def spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


@contextmanager
def standalone_cluster(tmp_path: Path, workers: int = 2) -> Iterator[tuple[str, str]]:
    """A Spark standalone master and `workers` workers of one core each, from pyspark's own jars, on loopback;
    yields the master URL and its web UI's URL."""
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    log = (tmp_path / "cluster.log").open("wb")
    master = f"spark://127.0.0.1:{port}"
    processes = [
        subprocess.Popen(
            [
                *(spark_bin("spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
                *("--port", str(port), "--webui-port", str(ui)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    ]
    for i in range(workers):
        work = tmp_path / f"worker-{i}"
        work.mkdir()
        processes.append(
            subprocess.Popen(
                [
                    *(spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"),
                    *("--cores", "1", "--memory", "1g", "--webui-port", str(free_port())),
                    *("--work-dir", str(work), master),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
    ui_url = f"http://127.0.0.1:{ui}"
    try:

        def alive() -> bool:
            try:
                state = httpx.get(f"{ui_url}/json/", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                return False
            return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") == workers

        wait_for("the standalone cluster", alive, timeout=120)
        yield master, ui_url
    finally:
        for process in processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            wait_or_kill(process, 30)
        log.close()


def wait_or_kill(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a process started in a session of its own; SIGKILL its whole group if it takes too long."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
