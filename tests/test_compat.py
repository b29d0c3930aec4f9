"""The private contracts lakewarden keeps with the libraries it stands on (lakewarden/_compat/), checked against the
versions installed: each library in the range its module was written for (and pyproject.toml pins), each private
function with the parameters lakewarden passes, each private attribute where lakewarden reads it. A library that
breaks one fails here, naming it, instead of failing somewhere in a request."""

from __future__ import annotations

import inspect
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import column, insert, table
from sqlalchemy.dialects import sqlite
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.responses import Response

from lakewarden._compat import fastapi as fastapi_compat
from lakewarden._compat import pyiceberg as pyiceberg_compat
from lakewarden._compat import pyspark as pyspark_compat
from lakewarden._compat import sqlalchemy as sqlalchemy_compat
from lakewarden._compat import starlette as starlette_compat

ROOT = Path(__file__).resolve().parent.parent
MODULES = [fastapi_compat, starlette_compat, sqlalchemy_compat, pyiceberg_compat, pyspark_compat]


def _pins() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(line) for line in project["dependencies"]]
    return {r.name.lower(): r.specifier for r in requirements}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.LIBRARY)
def test_the_installed_library_is_one_its_module_was_written_for(module: ModuleType) -> None:
    installed = version(module.LIBRARY)
    assert installed in SpecifierSet(module.SUPPORTED), (
        f"{module.LIBRARY} {installed} is installed; lakewarden/_compat/{module.LIBRARY}.py was written for "
        f"{module.LIBRARY}{module.SUPPORTED}: check each of its private names against the new version, then widen it"
    )
    assert _pins()[module.LIBRARY] == SpecifierSet(module.SUPPORTED), (
        f"pyproject.toml must pin {module.LIBRARY}{module.SUPPORTED}, the versions lakewarden/_compat supports"
    )


@pytest.mark.parametrize("module", [m for m in MODULES if hasattr(m, "CONTRACT")], ids=lambda m: m.LIBRARY)
def test_each_private_function_takes_what_lakewarden_passes(module: ModuleType) -> None:
    for name, expected in module.PARAMETERS.items():
        parameters = list(inspect.signature(module.CONTRACT[name]).parameters)
        assert parameters[: len(expected)] == expected, (
            f"{module.LIBRARY} {version(module.LIBRARY)}: {name} takes {parameters}, lakewarden passes {expected}"
        )


def test_fastapi_keeps_its_scope_routes_and_routers_as_the_fast_path_reads_them() -> None:
    seen: dict[str, Any] = {}
    inner = APIRouter()

    @inner.get("/items/{item}")
    async def item(item: int, request: Request) -> dict[str, int]:
        seen["scope"] = request.scope.get(fastapi_compat.FASTAPI_SCOPE)
        return {"item": item}

    router = APIRouter(prefix="/api")
    before = fastapi_compat.routes_version(router)
    router.include_router(inner)
    assert fastapi_compat.routes_version(router) != before, "FastAPI no longer counts a router's changes"
    app = FastAPI()
    app.include_router(router)
    assert not fastapi_compat.native_telemetry_on(app)
    assert TestClient(app).get("/api/items/3").json() == {"item": 3}
    scope = seen["scope"]
    assert isinstance(scope, dict), "FastAPI keeps no part of the scope of its own"
    included = scope[fastapi_compat.INCLUDED_ROUTER]
    context = scope[fastapi_compat.EFFECTIVE_ROUTE]
    assert isinstance(context, fastapi_compat.EffectiveRouteContext)
    for attribute in fastapi_compat.ROUTE_CONTEXT_ATTRIBUTES:
        assert hasattr(context, attribute), f"an effective route context has no {attribute}"
    for attribute in fastapi_compat.INCLUDED_ROUTER_ATTRIBUTES:
        assert hasattr(included, attribute), f"an included router has no {attribute}"
    assert context.path_format == "/api/items/{item}"
    assert isinstance(fastapi_compat.embeds_body_fields(context.original_route), bool)
    assert fastapi_compat.effective_route_context.get() is None  # set only while a route's handler is built
    fastapi_compat.extract_endpoint_context(item)
    assert id(item) in fastapi_compat.endpoint_context_cache, "FastAPI keeps endpoints' contexts otherwise"


def test_starlette_keeps_its_exception_handlers_where_the_fast_path_reads_them() -> None:
    def answer(request: Any, exc: Exception) -> Response:
        return Response(status_code=500)

    handlers: dict[Any, Any] = {ValueError: answer, 404: answer}
    by_class, by_status = starlette_compat.exception_handlers(ExceptionMiddleware(FastAPI(), handlers=handlers))
    assert ValueError in by_class and 404 in by_status
    assert starlette_compat.lookup_exception_handler(by_class, KeyError()) is None
    assert starlette_compat.lookup_exception_handler(by_class, UnicodeError()) is by_class[ValueError]


def test_sqlalchemy_keeps_a_compiled_statements_bind_processors() -> None:
    rows = table("t", column("a"), column("b"))
    compiled = insert(rows).values(a=1, b=2).compile(dialect=sqlite.dialect())
    processors = sqlalchemy_compat.bind_processors(compiled)
    assert set(processors) <= {"a", "b"}


def test_pyiceberg_keeps_the_sql_catalogs_view_filter(tmp_path: Path) -> None:
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    assert pyiceberg_compat.views_filter(catalog) is not None


def test_pyiceberg_keeps_the_hive_catalogs_thrift_client() -> None:
    from pyiceberg.catalog.hive import HiveCatalog

    catalog = HiveCatalog("h", uri="thrift://127.0.0.1:1")  # connects only when used
    client = pyiceberg_compat.hive_client(catalog)
    assert callable(client.__enter__) and callable(client.__exit__)


def test_pyiceberg_keeps_the_rest_catalogs_session_and_table_paths() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pyiceberg.catalog.rest import RestCatalog

    class Config(BaseHTTPRequestHandler):  # the one call a RestCatalog makes when it is created
        def do_GET(self) -> None:
            body = b'{"defaults": {}, "overrides": {}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Config)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        catalog = RestCatalog("r", uri=f"http://127.0.0.1:{server.server_address[1]}")
        assert callable(pyiceberg_compat.rest_session(catalog).get)
        path = pyiceberg_compat.rest_table_path(catalog, ("db", "a/b"))
        assert path == {"namespace": "db", "table": "a%2Fb"}
    finally:
        server.shutdown()


def test_pyspark_has_its_own_spark() -> None:
    assert (pyspark_compat.spark_home() / "jars").is_dir()
    assert (pyspark_compat.spark_home() / "bin" / "spark-submit").is_file()


@pytest.mark.parametrize("library", ["fastapi", "starlette", "pyiceberg"])
def test_a_library_that_lost_a_private_name_fails_with_what_lakewarden_needs(library: str) -> None:
    """A library version without one of the names: the import of its module names the library, the versions
    lakewarden supports and the name, instead of a bare ImportError deep in a request."""
    module = {"fastapi": "fastapi.telemetry._asgi", "starlette": "starlette._utils", "pyiceberg": "pyiceberg.manifest"}
    program = (
        "import sys, types\n"
        f"sys.modules[{module[library]!r}] = types.ModuleType({module[library]!r})  # a version without the names\n"
        f"import lakewarden._compat.{library}\n"
    )
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode != 0
    supported = {"fastapi": fastapi_compat, "starlette": starlette_compat, "pyiceberg": pyiceberg_compat}[library]
    assert f"PrivateContractBroken: lakewarden needs {library}{supported.SUPPORTED}" in run.stderr, run.stderr
