"""A real Hive Metastore for the tests: Hive 2.3.9's thrift metastore from pyspark's own jars, on Derby in a
directory of its own, listening on loopback (../shared/recipes/s3-and-hive-metastore.md).

Its lock tables are created first by Hive's own TxnDbUtil (hive/PrepareLocks.java): Iceberg's HiveCatalog locks
a table through the metastore on every commit. With an S3 server, the metastore reaches it through S3A (it
makes a table's directory when the table is created).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from tests.s3 import S3Server

PREPARE = Path(__file__).parent / "hive" / "PrepareLocks.java"
SERVE = Path(__file__).parent / "hive" / "LoopbackMetastore.java"


@dataclass(frozen=True)
class Metastore:
    uri: str  # thrift://127.0.0.1:PORT
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def port(self) -> int:
        return int(self.uri.rsplit(":", 1)[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _site(properties: dict[str, str]) -> str:
    rows = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


def _classpath(conf: Path, s3: bool) -> str:
    import pyspark

    parts = [str(conf), os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")]
    if s3:
        from lakewarden.spark.jars import ensure_spark_jars

        jars = ensure_spark_jars(quiet=True)
        parts += [j for j in jars.jars if Path(j).name.startswith(("hadoop-aws-", "aws-java-sdk-bundle-"))]
    return ":".join(parts)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the metastore exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the metastore did not listen on {port} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def start_metastore(directory: Path, s3: S3Server | None = None, port: int | None = None) -> Metastore:
    """Start a metastore keeping its database under `directory` (kept across restarts on the same directory)."""
    conf = directory / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    site = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={directory}/metastore_db;create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": f"file://{directory}/warehouse",
        "hive.async.log.enabled": "false",
        "hive.support.concurrency": "true",
        "hive.txn.manager": "org.apache.hadoop.hive.ql.lockmgr.DbTxnManager",
        "hive.metastore.event.db.notification.api.auth": "false",
    }
    if s3 is not None:
        site |= {
            "fs.s3a.endpoint": s3.endpoint,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.access.key": s3.access_key_id,
            "fs.s3a.secret.key": s3.secret_access_key,
            "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        }
    (conf / "hive-site.xml").write_text(_site(site))
    classpath = _classpath(conf, s3 is not None)
    env = {**os.environ, "HADOOP_USER_NAME": os.environ.get("HADOOP_USER_NAME", "lakewarden")}
    java_options = ["-Xmx512m", "-Djava.net.preferIPv4Stack=true", f"-Dderby.system.home={directory}"]
    if not (directory / "metastore_db").exists():
        prepared = subprocess.run(
            ["java", *java_options, "-cp", classpath, str(PREPARE)],
            cwd=directory,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if prepared.returncode != 0:
            raise RuntimeError(f"creating the metastore's lock tables failed:\n{prepared.stderr[-3000:]}")
    port = port or _free_port()
    log = directory / "metastore.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                "java",
                *java_options,
                "-cp",
                classpath,
                str(SERVE),
                str(port),
            ],
            cwd=directory,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        _wait_listening(port, process, log)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return Metastore(f"thrift://127.0.0.1:{port}", directory, process)


def stop_metastore(metastore: Metastore) -> None:
    metastore.process.terminate()
    try:
        metastore.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        metastore.process.kill()
        metastore.process.wait()


@contextmanager
def hive_metastore(s3: S3Server | None = None) -> Iterator[Metastore]:
    """A metastore for the duration of a block, its directory removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="lakewarden-hms-"))
    metastore = start_metastore(directory, s3)
    try:
        yield metastore
    except BaseException:
        log = directory / "metastore.log"
        if log.exists():  # what the metastore said, beside the test's failure
            print(f"metastore log:\n{log.read_text()[-6000:]}")
        raise
    finally:
        stop_metastore(metastore)
        shutil.rmtree(directory, ignore_errors=True)
