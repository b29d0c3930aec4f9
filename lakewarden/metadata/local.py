"""A local warehouse of tables of another format (a `hudi` or `paimon` catalog's), as a directory."""

from __future__ import annotations

from pathlib import Path


def local_warehouse(warehouse: str) -> Path:
    """The warehouse's directory (a path or a file: URI); FileNotFoundError when it is not one."""
    root = Path(warehouse.removeprefix("file://").removeprefix("file:"))
    if not root.is_dir():
        raise FileNotFoundError(f"the warehouse {warehouse} is not a directory")
    return root
