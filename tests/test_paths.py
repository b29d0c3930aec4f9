"""Confinement of paths to a root: schemes, '..', prefixes that are not parents, symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakewarden.metadata.paths import OutsideRoot, check_under, is_under


@pytest.mark.parametrize(
    ("root", "path", "inside"),
    [
        ("/w", "/w/db/t/metadata/v1.json", True),
        ("/w", "/w", True),
        ("/w/", "file:/w/db/t", True),
        ("file:///w", "/w/db/t", True),
        ("/w", "/wx/db/t", False),  # a prefix that is not a parent
        ("/w", "/etc/passwd", False),
        ("/w", "/w/db/../../etc/passwd", False),  # '..' is refused, not resolved
        ("/w", "w/db/t", False),  # relative
        ("s3://bucket/w", "s3a://bucket/w/db/t/data/a.parquet", True),
        ("s3://bucket/w", "s3://other/w/db/t", False),
        ("s3://bucket/w", "s3://bucket/w2/db/t", False),
        ("s3://bucket/w", "/w/db/t", False),
        ("s3://bucket/w", "gs://bucket/w/db/t", False),
        ("/w", "/w/db/t\x00/x", False),  # a NUL names no file (found by fuzzing the REST catalog)
        ("s3://bucket/w", "s3://bucket/w/db\x00", False),
    ],
)
def test_paths_under_a_root(root: str, path: str, inside: bool) -> None:
    assert is_under(root, path) is inside


def test_a_symlink_out_of_the_root_is_outside(tmp_path: Path) -> None:
    root, outside = tmp_path / "warehouse", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "link")
    assert is_under(str(root), str(root / "db" / "t"))
    assert not is_under(str(root), str(root / "link" / "t"))  # resolves to elsewhere/t
    with pytest.raises(OutsideRoot, match="location"):
        check_under(str(root), str(root / "link" / "t"), "location")
