"""Where a file may be: the confinement of every location lakewarden writes, reads on a client's word, or deletes.

A path is inside a root when, once normalised, it names the root or something below it: the same
scheme (s3, s3a and s3n are one) and bucket, and a path that starts with the root's path at a
segment boundary. A `..` segment is refused outright rather than resolved: a client has no reason
to send one. Local paths are also resolved through symlinks as far as they exist, so a link inside
the warehouse that points outside it does not make the outside look inside.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from urllib.parse import urlsplit

from lakewarden.domain.errors import InvalidField

_SAME_SCHEME = {"s3a": "s3", "s3n": "s3", "file": ""}


class OutsideRoot(ValueError):
    """A path that is not under the root it must stay under; the message says which and why."""


def _parts(path: str) -> tuple[str, str, str]:
    """(scheme, authority, path) with local paths (bare or file:) as ('', '', absolute path)."""
    split = urlsplit(path)
    scheme = _SAME_SCHEME.get(split.scheme.lower(), split.scheme.lower())
    if len(split.scheme) == 1:  # a Windows drive letter is not a scheme; treat the whole as local
        return "", "", path
    if scheme == "":
        return "", "", split.path if split.scheme else path
    return scheme, split.netloc, split.path


def _normal(scheme: str, path: str) -> str:
    if "\x00" in path:
        raise OutsideRoot(f"{path!r} has a NUL character")
    if any(segment == ".." for segment in path.split("/")):
        raise OutsideRoot(f"{path!r} has a '..' segment")
    if scheme == "":
        if not path.startswith("/"):
            raise OutsideRoot(f"{path!r} is not an absolute path")
        return os.path.realpath(path)  # symlinks resolved as far as the path exists
    return posixpath.normpath("/" + path.lstrip("/"))


def check_under(root: str, path: str, what: str = "path") -> None:
    """Raise OutsideRoot unless `path` is `root` or lies below it."""
    root_scheme, root_authority, root_path = _parts(root)
    scheme, authority, raw = _parts(path)
    if (scheme, authority) != (root_scheme, root_authority):
        raise OutsideRoot(f"{what} {path!r} is not under {root!r}")
    base = _normal(root_scheme, root_path).rstrip("/")
    target = _normal(scheme, raw)
    if target != base and not target.startswith(base + "/"):
        raise OutsideRoot(f"{what} {path!r} is not under {root!r}")


def is_under(root: str, path: str) -> bool:
    try:
        check_under(root, path)
    except OutsideRoot:
        return False
    return True


# table properties that point writers somewhere else than the table location
PATH_PROPERTIES = ("write.data.path", "write.metadata.path", "write.object-storage.path", "write.folder-storage.path")


def confine_table(warehouse: str, location: str, properties: Mapping[str, str]) -> None:
    """A table of an internal catalog lives under its warehouse, and so do the paths its properties give
    writers; raises InvalidField naming the location or the property."""
    for field, path in (("location", location), *((k, properties[k]) for k in PATH_PROPERTIES if k in properties)):
        try:
            check_under(warehouse, path, field)
        except OutsideRoot as exc:
            raise InvalidField(
                field, f"{exc}: a table of this catalog and its files stay under its warehouse"
            ) from None
