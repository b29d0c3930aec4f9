"""The Spark jar set-up step: pinned Maven artifacts, verified by checksum, cached, and never a file rewritten that a
running JVM may have mapped."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from lakewarden.spark.jars import JAVA_JAR, _install, ensure_spark_jars, iceberg_version, maven_coordinates
from lakewarden.spark.maven import Artifact, ArtifactError, MavenCache, load_pins
from tests.servers import LAKEWARDEN

SMALL = Artifact("org.example", "tiny", "1.0", "", "spark")


def test_second_run_is_a_cache_hit_that_leaves_files_in_place() -> None:
    first = ensure_spark_jars(quiet=True)
    inodes = {j: Path(j).stat().st_ino for j in first.jars}
    assert ensure_spark_jars(quiet=True) == first
    assert {j: Path(j).stat().st_ino for j in first.jars} == inodes
    names = [Path(j).name for j in first.jars]
    assert f"iceberg-spark-runtime-3.5_2.12-{iceberg_version()}.jar" in names
    # the JDBC drivers only on the driver's own class path; the SDK bundles on the JVMs' class paths, not copied
    # for every local session, and shipped to a cluster; S3A and lakewarden's own classes shipped by Spark
    assert "sqlite-jdbc" in first.driver_classpath and "sqlite-jdbc" not in first.spark_jars + first.shipped_jars
    assert "aws-java-sdk-bundle" in first.executor_classpath and "iceberg-aws-bundle" in first.executor_classpath
    assert "aws-java-sdk-bundle" not in first.spark_jars and "aws-java-sdk-bundle" in first.shipped_jars
    assert "hadoop-aws-3.3.4.jar" in first.spark_jars and JAVA_JAR in first.spark_jars
    # Hudi's and Paimon's bundles are fetched, and never beside Iceberg's unless a session asks for them
    assert [Path(j).name for j in first.engine("hudi")] == ["hudi-spark3.5-bundle_2.12-1.0.2.jar"]
    assert first.engine("paimon") and not any("hudi" in j or "paimon" in j for j in first.jars)
    with zipfile.ZipFile(next(j for j in first.jars if j.endswith(JAVA_JAR))) as built:
        assert "io/lakewarden/iceberg/StorageFileIO.class" in built.namelist()


def test_the_pins_are_the_one_place_a_version_is_set() -> None:
    pins = load_pins()
    coordinates = maven_coordinates(pins)
    assert f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{iceberg_version(pins)}" in coordinates
    assert not any("hudi" in c or "paimon" in c for c in coordinates)  # not on an Iceberg optimizer's cluster
    # no version of a jar is written anywhere else in lakewarden's code
    package = Path(__file__).resolve().parent.parent / "lakewarden"
    for artifact in pins.artifacts:
        for source in package.rglob("*.py"):
            assert f"{artifact.name}:{artifact.version}" not in source.read_text(), source


def test_a_bad_pin_list_is_refused_naming_the_entry(tmp_path: Path) -> None:
    pins = tmp_path / "artifacts.toml"
    pins.write_text('[repository]\nurl = "http://127.0.0.1:1"\n[[artifact]]\ncoordinate = "a:b"\nsha256 = "00"\n')
    with pytest.raises(ArtifactError, match=r"artifact 1: coordinate must be group:name:version"):
        load_pins(pins)
    pins.write_text(f'[repository]\nurl = "x"\n[[artifact]]\ncoordinate = "a:b:1"\nsha256 = "{"0" * 64}"\n')
    with pytest.raises(ArtifactError, match=r"\(b\): placement must be one of"):
        load_pins(pins)


class _Repository:
    """A Maven repository over HTTP on loopback, serving a folder, counting requests."""

    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        requests = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

            def log_message(self, format: str, *args: object) -> None:
                requests.append(self.path)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/maven2"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _jar(path: Path, content: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return hashlib.sha256(content).hexdigest()


def test_a_mirror_is_used_checksums_are_checked_and_a_second_run_fetches_nothing(tmp_path: Path) -> None:
    served = tmp_path / "served"
    digest = _jar(served / "maven2" / SMALL.repository_path, b"the pinned bytes")
    pinned = Artifact(SMALL.group, SMALL.name, SMALL.version, digest, "spark")
    repository = _Repository(served)
    try:
        cache = MavenCache(tmp_path / "cache", log=lambda _: None)
        (path,) = cache.resolve([pinned], repository.url)
        assert path.read_bytes() == b"the pinned bytes" and len(repository.requests) == 1
        inode = path.stat().st_ino
        assert cache.resolve([pinned], repository.url) == [path]  # verified once: no request, no rewrite
        assert len(repository.requests) == 1 and path.stat().st_ino == inode
        # the mirror now serves other bytes under the same coordinate: refused, the cached file untouched
        _jar(served / "maven2" / SMALL.repository_path, b"another build")
        other = Artifact(SMALL.group, SMALL.name, SMALL.version, "f" * 64, "spark")
        with pytest.raises(ArtifactError, match=r"org\.example:tiny:1\.0 from http://127\.0\.0\.1.* not the pinned"):
            cache.resolve([other], repository.url)
        assert path.read_bytes() == b"the pinned bytes" and not list(path.parent.glob(".*.part"))
        # a jar edited in the cache is no longer trusted: fetched again
        path.write_bytes(b"tampered")
        _jar(served / "maven2" / SMALL.repository_path, b"the pinned bytes")
        assert cache.resolve([pinned], repository.url)[0].read_bytes() == b"the pinned bytes"
        assert len(repository.requests) == 3
        missing = Artifact("org.example", "absent", "2.0", "0" * 64, "spark")
        with pytest.raises(ArtifactError, match=r"org\.example:absent:2\.0: .*absent-2\.0\.jar answered 404"):
            cache.resolve([missing], repository.url)
    finally:
        repository.close()
    with pytest.raises(ArtifactError, match="set LAKEWARDEN_MAVEN_REPO to a reachable mirror"):
        MavenCache(tmp_path / "other", log=lambda _: None).resolve([pinned], repository.url)


def test_jars_come_from_a_folder_for_a_machine_without_network(tmp_path: Path) -> None:
    folder = tmp_path / "carried"
    digest = _jar(folder / "deep" / SMALL.file_name, b"carried over")
    pinned = Artifact(SMALL.group, SMALL.name, SMALL.version, digest, "spark")
    cache = MavenCache(tmp_path / "cache", log=lambda _: None)
    (path,) = cache.resolve([pinned], "http://127.0.0.1:1", source_dir=folder)
    assert path.read_bytes() == b"carried over"
    absent = Artifact("org.example", "absent", "2.0", "0" * 64, "spark")
    with pytest.raises(ArtifactError, match=r"--from .*carried: no jar for org\.example:absent:2\.0"):
        cache.resolve([absent], "http://127.0.0.1:1", source_dir=folder)


def test_setup_spark_from_a_folder_end_to_end(tmp_path: Path) -> None:
    """The whole pinned set taken from a folder (a copy of the cache) into an empty cache, by the CLI, offline."""
    pins = load_pins()
    have = ensure_spark_jars(quiet=True)
    folder = tmp_path / "jars"
    folder.mkdir()
    everything = [*have.jars, *(j for engine in have.engines for j in have.engine(engine))]
    for jar in everything:
        if not jar.endswith(JAVA_JAR):
            (folder / Path(jar).name).symlink_to(jar)
    env = {**os.environ, "LAKEWARDEN_JARS_DIR": str(tmp_path / "cache"), "LAKEWARDEN_MAVEN_REPO": "http://127.0.0.1:1"}
    done = subprocess.run([*LAKEWARDEN, "setup-spark", "--from", str(folder)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = [Path(line).name for line in done.stdout.split()]
    assert JAVA_JAR in listed and f"iceberg-spark-runtime-3.5_2.12-{iceberg_version(pins)}.jar" in listed
    again = subprocess.run([*LAKEWARDEN, "setup-spark"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "fetching" not in again.stderr and "compiling" not in again.stderr
    shutil.rmtree(tmp_path / "cache" / "maven" / "org" / "postgresql")
    offline = subprocess.run([*LAKEWARDEN, "setup-spark"], env=env, capture_output=True, text=True)
    assert offline.returncode == 1 and "Traceback" not in offline.stderr
    assert "org.postgresql:postgresql" in offline.stderr and "LAKEWARDEN_MAVEN_REPO" in offline.stderr
    assert json.loads((next((tmp_path / "cache").rglob("*.verified"))).read_text())["sha256"]


def test_install_replaces_atomically_and_only_on_change(tmp_path: Path) -> None:
    source, target = tmp_path / "a.so", tmp_path / "b.so"
    source.write_bytes(b"one")
    _install(source, target)
    inode = target.stat().st_ino
    _install(source, target)  # same bytes: untouched
    assert target.stat().st_ino == inode
    source.write_bytes(b"two")
    _install(source, target)  # new bytes: a new file, the old inode (still mapped elsewhere) intact
    assert target.read_bytes() == b"two" and target.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.so", "b.so"]
