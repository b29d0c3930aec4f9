"""Local files through lakewarden's StorageFileIO (LocalFiles, `lakewarden/spark/java/`): java.io instead of
Hadoop's local FileSystem, with the locations Iceberg records kept exactly as asked for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _io(spark: SparkSession) -> Any:
    jvm: Any = spark._jvm
    io = jvm.io.lakewarden.iceberg.StorageFileIO()
    io.initialize(jvm.java.util.HashMap())
    return io


def _write(io: Any, location: str, data: bytes, overwrite: bool = False) -> Any:
    out = io.newOutputFile(location)
    stream = out.createOrOverwrite() if overwrite else out.create()
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    return out


@pytest.mark.parametrize("form", ["file:{}", "file://{}", "{}"])
def test_a_local_file_keeps_the_location_it_was_named_by(spark: SparkSession, tmp_path: Path, form: str) -> None:
    io = _io(spark)
    location = form.format(tmp_path / "new dir" / "a.parquet")  # a directory made on the way, a space kept
    out = _write(io, location, b"twelve bytes")
    assert out.location() == location and out.toInputFile().location() == location
    assert (tmp_path / "new dir" / "a.parquet").read_bytes() == b"twelve bytes"
    assert not list((tmp_path / "new dir").glob(".*.crc"))  # no checksum file beside it
    read = io.newInputFile(location)
    assert read.location() == location and read.getLength() == 12 and read.exists()
    stream = read.newStream()
    try:
        stream.seek(7)
        assert bytes(bytearray(stream.readAllBytes())) == b"bytes"
    finally:
        stream.close()
    assert io.newInputFile(location, 12).getLength() == 12


def test_creating_a_local_file_that_exists_fails_and_overwriting_replaces_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    io = _io(spark)
    location = f"file:{tmp_path / 'm.avro'}"
    _write(io, location, b"first")
    with pytest.raises(Exception, match="AlreadyExistsException"):
        _write(io, location, b"second")
    assert (tmp_path / "m.avro").read_bytes() == b"first"
    _write(io, location, b"second", overwrite=True)
    assert (tmp_path / "m.avro").read_bytes() == b"second"


def test_a_missing_local_file_reads_as_not_found(spark: SparkSession, tmp_path: Path) -> None:
    io = _io(spark)
    missing = io.newInputFile(f"file:{tmp_path / 'gone.parquet'}")
    assert not missing.exists()
    with pytest.raises(Exception, match="NotFoundException"):
        missing.getLength()
    with pytest.raises(Exception, match="NotFoundException"):
        missing.newStream()


def test_deleting_a_local_file_takes_the_checksum_hadoop_wrote_beside_it(spark: SparkSession, tmp_path: Path) -> None:
    io = _io(spark)
    (tmp_path / "old.parquet").write_bytes(b"data")
    (tmp_path / ".old.parquet.crc").write_bytes(b"crc")
    (tmp_path / "other.parquet").write_bytes(b"kept")
    io.deleteFile(f"file:{tmp_path / 'old.parquet'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.parquet"]
    io.deleteFile(str(tmp_path / "old.parquet"))  # already gone: not an error
