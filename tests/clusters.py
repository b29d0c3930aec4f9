"""A Spark standalone cluster from pyspark's own jars, on loopback: for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.helpers import wait_for
from tests.servers import free_port


def spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


@dataclass
class Cluster:
    master: str  # spark://127.0.0.1:port
    ui: str  # the master's web UI
    workers: list[subprocess.Popen[bytes]]  # each in a process group of its own, with its executors
    worker_uis: list[str]

    def worker_of(self, app_id: str, executor_id: str) -> int:
        """The index of the worker that runs an application's executor (from the workers' own UIs)."""
        for index, ui in enumerate(self.worker_uis):
            state = httpx.get(f"{ui}/json/", timeout=5).json()
            if any(e["appid"] == app_id and str(e["id"]) == executor_id for e in state.get("executors", [])):
                return index
        raise AssertionError(f"no worker runs executor {executor_id} of {app_id}")

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and the executors it launched (they share its process group)."""
        os.killpg(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait()


@contextmanager
def standalone_cluster(tmp_path: Path, workers: int = 2, cores: int = 1) -> Iterator[Cluster]:
    """A Spark standalone master and `workers` workers of `cores` cores each, from pyspark's own jars, on
    loopback."""
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
    worker_uis = []
    for i in range(workers):
        work = tmp_path / f"worker-{i}"
        work.mkdir()
        worker_ui = free_port()
        worker_uis.append(f"http://127.0.0.1:{worker_ui}")
        processes.append(
            subprocess.Popen(
                [
                    *(spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"),
                    *("--cores", str(cores), "--memory", "1g", "--webui-port", str(worker_ui)),
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
        yield Cluster(master, ui_url, processes[1:], worker_uis)
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
