"""Real Flink jobs, run by PyFlink in `.venv-flink` (tests/flink_writer.py says what the job does and why it is an
environment of its own; bin/test makes it from tests/flink-writer.lock), with Iceberg's Flink runtime pinned in
lakewarden/spark/artifacts.toml and Hadoop's client from pyspark's jars on HADOOP_CLASSPATH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.tools import writer_python

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "flink_writer.py"


def flink_python() -> Path:
    return writer_python(Path(os.environ.get("LAKEWARDEN_FLINK_VENV", ROOT / ".venv-flink")), "PyFlink")


def iceberg_flink_runtime() -> list[str]:
    from lakewarden.spark.jars import ensure_spark_jars

    return list(ensure_spark_jars(quiet=True).engine("flink"))


def hadoop_classpath() -> str:
    """Hadoop's shaded client, as pyspark ships it (the Hadoop Iceberg's Flink runtime expects beside it)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    wanted = ("hadoop-client-api-", "hadoop-client-runtime-", "commons-logging-")
    return ":".join(str(p) for p in sorted(jars.glob("*.jar")) if p.name.startswith(wanted))


@dataclass
class FlinkJob:
    process: subprocess.Popen[bytes]
    log: Path
    job_id: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """As a machine dies: the job's process group (PyFlink and its JVM) at once, nothing cleaned up."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


@contextmanager
def flink_job(directory: Path, job: dict[str, Any], timeout: float = 180) -> Iterator[FlinkJob]:
    """The job of tests/flink_writer.py running (its `JOB <id>` line printed); killed on exit if still running."""
    directory.mkdir(parents=True, exist_ok=True)
    described = directory / "job.json"
    described.write_text(json.dumps(job))
    log = directory / "flink.out"
    env = {**os.environ, "HADOOP_CLASSPATH": hadoop_classpath()}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(flink_python()), str(WRITER), str(described)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            started = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("JOB ")]
            if started:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the Flink job did not start:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.5)
        yield FlinkJob(process, log, started[0].split()[1])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def latest_checkpoint(checkpoints: Path, job_id: str) -> Path:
    """The newest complete checkpoint the job retained (a `chk-<n>` directory with its `_metadata`)."""
    done = [p for p in (checkpoints / job_id).glob("chk-*") if (p / "_metadata").exists()]
    assert done, f"no complete checkpoint of job {job_id} in {checkpoints}"
    return max(done, key=lambda p: int(p.name.split("-")[1]))
