"""The rooms of the package and the one-way dependencies between them (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lakewarden"

# what each room may import of lakewarden's own ("" is the package itself, for __version__)
ALLOWED = {
    "_compat": {"_compat"},  # the libraries' private names (lakewarden/_compat/): below every room, used by any
    "protocol": {"protocol"},
    "domain": {"domain", "protocol"},
    "metadata": {"metadata", "domain", "_compat"},
    "store": {"store", "domain", "_compat"},
    "services": {"services", "store", "metadata", "domain", "protocol", "config"},
    "api": {"", "api", "services", "store", "metadata", "domain", "protocol", "config", "_compat"},
    "spark": {"spark", "domain", "_compat"},
    "optimizer": {"optimizer", "spark", "domain", "protocol"},
}
# the wings of services/, lowest first: a wing imports only the wings before it (and itself), so no two wings
# import each other; composition.py, which wires them all, comes last
SERVICE_WINGS = ["loop", "leadership", "access", "rest_catalog", "tables", "processes", "maintenance", "resources"]
SERVICE_WINGS += ["composition"]
# the libraries whose private names (a module or a name beginning with `_`) only _compat/ imports
FRAMEWORKS = {"fastapi", "starlette", "sqlalchemy", "pyiceberg", "pyspark", "pydantic", "pydantic_core", "uvicorn"}
FRAMEWORKS |= {"alembic", "typer", "click", "prometheus_client", "httpx", "anyio"}
# pyspark's own modules: only where Spark runs (the server never imports pyspark); _compat/pyspark.py is spark/'s
PYSPARK_ALLOWED = {"spark", "optimizer", "demo", "_compat"}


def _imports(path: Path, imported: bool = False) -> list[str]:
    """The modules a file imports (absolute names), wherever in the file (a function's imports too); with
    `imported`, also each name imported from one (`from package import module` imports that module)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            if imported:
                names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
            assert room != "_compat" or path.name == "pyspark.py", f"{path.name} imports pyspark"
        if name == "lakewarden._compat.pyspark":
            assert room == "spark", f"{room}/{path.name} imports pyspark's compatibility module"
        if room in ALLOWED and (name == "lakewarden" or name.startswith("lakewarden.")):
            target = name.split(".")[1] if "." in name else ""
            target = target.removesuffix(".py")
            assert target in ALLOWED[room], f"{room}/{path.name} imports lakewarden.{target}"


def _wing(module: str) -> str | None:
    """The wing of services/ a module of lakewarden's belongs to (None outside services/)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["lakewarden", "services"]:
        return None
    return parts[2]


@pytest.mark.parametrize(
    "path", sorted({p for p in _files() if _room(p) == "services"}), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_wings_of_services_import_one_way(path: Path) -> None:
    own = _wing(_module(path))
    if own is None:  # services/__init__.py
        return
    assert own in SERVICE_WINGS, f"services/{own} is a wing: give it its place in SERVICE_WINGS"
    allowed = set(SERVICE_WINGS[: SERVICE_WINGS.index(own) + 1])
    for name in _imports(path, True):
        wing = _wing(name)
        if wing is not None and wing != own:
            assert wing in allowed, f"services/{own} ({path.name}) imports services/{wing}, a wing after it"


def _private_imports(path: Path) -> list[str]:
    """The private names of FRAMEWORKS a file imports: a module or a name that begins with `_`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            names = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            if module.split(".")[0] not in FRAMEWORKS:
                continue
            if any(part.startswith("_") for part in module.split(".")):
                found.append(module)
            found += [f"{module}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
    return found


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_private_framework_names_are_imported_in_compat_only(path: Path) -> None:
    if _room(path) == "_compat":
        return
    private = _private_imports(path)
    assert not private, f"{path.name} imports {private}: import them in lakewarden/_compat/, with the reason"


def test_the_rules_find_what_they_forbid(tmp_path: Path) -> None:
    """Each rule fails on a file that breaks it."""
    bad = tmp_path / "bad.py"
    bad.write_text("from starlette._utils import is_async_callable\nfrom fastapi.routing import _merge\nimport os\n")
    assert _private_imports(bad) == ["starlette._utils", "fastapi.routing._merge"]
    assert _wing("lakewarden.services.rest_catalog.loads") == "rest_catalog"
    assert _wing("lakewarden.services.composition") == "composition"
    assert _wing("lakewarden.store.rest_catalog") is None


MODULE_DOCSTRING_CHARS = 700  # what a module is and why, in a few lines; reference goes to docs/


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_says_what_it_is_in_a_few_lines(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    assert len(docstring) <= MODULE_DOCSTRING_CHARS, (
        f"{path.name}'s docstring is {len(docstring)} characters: say what it is and why; reference goes to docs/"
    )
    assert "DESIGN.md" not in path.read_text(), f"{path.name} points at DESIGN.md, which is not in the repository"


def import_graph() -> dict[str, set[str]]:
    """lakewarden's modules and the modules of lakewarden's each imports (TYPE_CHECKING and function imports too)."""
    modules = {_module(p): p for p in _files()}
    return {name: {m for m in _imports(path, True) if m in modules and m != name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: each strongly connected set of two or more modules (Tarjan's algorithm,
    iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_module_imports_itself_through_others() -> None:
    circles = cycles(import_graph())
    assert not circles, "import circles (each part should receive what it uses, not import its user): " + "; ".join(
        " <-> ".join(c) for c in circles
    )


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"], ["e", "e2"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
