"""SQLAlchemy's private names, as store/driver.py uses them: the hottest writes (a REST commit's pointer swap,
timeline entry and event) run on the driver's connection with their arguments converted by SQLAlchemy's own bind
processors, without SQLAlchemy building the parameters anew on every call. tests/test_compat.py checks the
contract here against the installed SQLAlchemy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LIBRARY = "sqlalchemy"
SUPPORTED = ">=2.1,<2.2"  # pyproject.toml pins the same


def bind_processors(compiled: Any) -> Mapping[str, Any]:
    """A compiled statement's converters of its parameters by name (`SQLCompiler._bind_processors`): what
    SQLAlchemy's execution applies to each value (dates, JSON) before handing it to the driver."""
    processors: Mapping[str, Any] = compiled._bind_processors
    return processors
