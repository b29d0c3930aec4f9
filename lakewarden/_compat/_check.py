"""What the compatibility modules share: a clear error when an installed library breaks a private contract."""

from __future__ import annotations

from importlib.metadata import version


class PrivateContractBroken(ImportError):
    """An installed library no longer has a private name lakewarden uses (or it behaves otherwise)."""


def broken(library: str, supported: str, what: object) -> PrivateContractBroken:
    """The error for a private name of `library` that is gone or changed, naming the installed and supported
    versions (`supported`: the module's SUPPORTED, the range pyproject.toml pins)."""
    return PrivateContractBroken(
        f"lakewarden needs {library}{supported} (see lakewarden/_compat/{library.lower()}.py), "
        f"found {version(library)}: {what}"
    )
