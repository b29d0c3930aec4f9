"""The rooms of the package and the one-way dependencies between them (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lakewarden"

# what each room may import of lakewarden's own ("" is the package itself, for __version__)
ALLOWED = {
    "protocol": set(),
    "domain": {"domain", "protocol"},
    "metadata": {"metadata", "domain"},
    "store": {"store", "domain"},
    "services": {"services", "store", "metadata", "domain", "protocol", "config"},
    "api": {"", "api", "services", "store", "metadata", "domain", "protocol", "config"},
    "spark": {"spark", "domain"},
    "optimizer": {"optimizer", "spark", "domain", "protocol"},
}
PYSPARK_ALLOWED = {"spark", "optimizer", "demo"}


def _imports(path: Path) -> list[str]:
    """The modules a file imports (absolute names)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _room(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_dependencies_point_one_way(path: Path) -> None:
    room = _room(path)
    for name in _imports(path):
        if name.split(".")[0] == "pyspark":
            assert room in PYSPARK_ALLOWED, f"{path.name} imports pyspark"
        if room in ALLOWED and (name == "lakewarden" or name.startswith("lakewarden.")):
            target = name.split(".")[1] if "." in name else ""
            target = target.removesuffix(".py")
            assert target in ALLOWED[room], f"{room}/{path.name} imports lakewarden.{target}"
