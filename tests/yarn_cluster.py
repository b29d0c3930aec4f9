"""A real YARN for the tests: Hadoop's MiniYARNCluster (hadoop-minicluster from Maven Central, at pyspark's
Hadoop version), its ResourceManager and NodeManagers on loopback (yarn/LoopbackYarn.java). Spark reaches it as a
user's cluster: `HADOOP_CONF_DIR` names the directory holding the `yarn-site.xml` it writes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent / "yarn"
# Hadoop 3.3 on Java 17 reaches into these with reflection
JAVA_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("java.lang", "java.util", "java.lang.reflect", "java.io", "java.net", "sun.nio.ch")
]


@dataclass(frozen=True)
class YarnCluster:
    conf_dir: Path  # HADOOP_CONF_DIR for a client
    resource_manager: str  # host:port
    process: subprocess.Popen[str]


def minicluster_jars() -> Path:
    """hadoop-minicluster and its dependencies, copied from Maven Central once into a cache of their own."""
    stamp = hashlib.sha256((HERE / "pom.xml").read_bytes()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lakewarden" / "yarn" / stamp
    if (cache / ".complete").is_file():
        return cache
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed to fetch hadoop-minicluster for the YARN tests")
    partial = cache.with_name(cache.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(HERE / "pom.xml"), "dependency:copy-dependencies", f"-DoutputDirectory={partial}"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mvn could not fetch hadoop-minicluster:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    shutil.rmtree(cache, ignore_errors=True)
    partial.rename(cache)
    (cache / ".complete").write_text(stamp + "\n")
    return cache


@contextmanager
def yarn_cluster(directory: Path, nodes: int = 1, memory_mb: int = 6144, vcores: int = 4) -> Iterator[YarnCluster]:
    """A MiniYARNCluster working under `directory`, until the block ends."""
    jars = minicluster_jars()
    conf_dir = directory / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    log = (directory / "yarn.log").open("w")
    process = subprocess.Popen(
        [
            "java",
            "-Xmx1g",
            f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}",
            *JAVA_OPENS,
            "-cp",
            f"{jars}/*",
            str(HERE / "LoopbackYarn.java"),
            str(conf_dir),
            str(nodes),
            str(memory_mb),
            str(vcores),
        ],
        cwd=directory,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    ready: list[str] = []

    def await_ready() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("READY "):
                ready.append(line.split()[1])
                return

    waiter = threading.Thread(target=await_ready, daemon=True)
    waiter.start()
    waiter.join(timeout=180)
    try:
        if not ready:
            raise RuntimeError(f"YARN did not start:\n{(directory / 'yarn.log').read_text()[-4000:]}")
        yield YarnCluster(conf_dir, ready[0], process)
    finally:
        if process.stdin is not None:
            process.stdin.close()  # the cluster stops when its input ends
        try:
            # an orderly stop of every service takes the better part of a minute; the tests' applications have
            # ended by now, so what is left of the JVM after a short wait is not worth waiting for
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
