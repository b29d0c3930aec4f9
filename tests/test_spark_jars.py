"""The Spark jar set-up step: cached, and never rewriting a file a running JVM may have mapped."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lakewarden.spark.jars import AWS_SDK_JAR, JAVA_JAR, _install, ensure_spark_jars


def test_second_run_is_a_cache_hit_that_leaves_files_in_place() -> None:
    first = ensure_spark_jars(quiet=True)
    native = Path(first.native_library_dir) / "libsqlitejdbc.so"
    inode = native.stat().st_ino
    assert ensure_spark_jars(quiet=True) == first
    assert native.stat().st_ino == inode
    assert all(Path(j).is_file() for j in first.jars)
    assert "sqlite-jdbc.jar" in first.driver_classpath and "sqlite-jdbc" not in first.spark_jars
    # S3 through S3A: hadoop-aws and lakewarden's StorageFileIO shipped with Spark's jars; the AWS SDK on the
    # JVMs' own class paths (not copied for every local session), and shipped to a cluster
    assert "hadoop-aws-3.3.1.jar" in first.spark_jars and JAVA_JAR in first.spark_jars
    assert AWS_SDK_JAR not in first.spark_jars and AWS_SDK_JAR in first.driver_classpath
    assert first.executor_classpath.endswith(AWS_SDK_JAR) and AWS_SDK_JAR in first.shipped_jars
    with zipfile.ZipFile(next(j for j in first.jars if j.endswith(JAVA_JAR))) as built:
        assert "io/lakewarden/iceberg/StorageFileIO.class" in built.namelist()


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
