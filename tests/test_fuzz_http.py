"""Property-based fuzzing of the HTTP surface from the server's own OpenAPI document (schemathesis): every
operation of `/api/v1` and `/iceberg/v1`, with generated paths, queries and bodies, as an admin. No answer
may be a server error, and every answer must be documented: its status, its content type and its body's
schema. Bounded and derandomized here (the same examples every run); `bench/fuzz_http.py` runs longer,
randomized.

Two kinds of cases: anywhere (paths as generated: mostly names that do not exist) and aimed (the path's
catalog, namespace, table and group set to ones that exist, so the generated bodies reach the catalog's
and the API's work: creating, committing, renaming, dropping)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.servers import ServerProcess, started_server

pytestmark = [pytest.mark.slow]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# what exists on the fuzzed server, by the names the routes give their path parameters
KNOWN = {"prefix": "lake", "namespace": "db", "table": "t", "catalog": "lake", "database": "db", "name": "default"}
EXAMPLES = 10


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    with started_server(tmp_path_factory.mktemp("fuzz")) as server:
        catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
        catalog.create_namespace("db")
        catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=False)))
        yield server


def _document() -> dict[str, Any]:
    """The OpenAPI document the server serves at /openapi.json (built without starting one)."""
    from lakewarden.api.app import create_app
    from lakewarden.config import Config

    with tempfile.TemporaryDirectory() as data_dir:
        document: dict[str, Any] = create_app(Config.model_validate({"ams": {"data-dir": data_dir}})).openapi()
    return document


schema = schemathesis.openapi.from_dict(_document())
fuzzing = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@fuzzing
def test_anywhere(case: Any, fuzzed: ServerProcess) -> None:
    case.call_and_validate(base_url=fuzzed.url, headers=fuzzed.headers, checks=CHECKS)


@schema.parametrize()
@fuzzing
def test_aimed_at_what_exists(case: Any, fuzzed: ServerProcess) -> None:
    for name, value in KNOWN.items():
        if case.path_parameters and name in case.path_parameters:
            case.path_parameters[name] = value
    case.call_and_validate(base_url=fuzzed.url, headers=fuzzed.headers, checks=CHECKS)


def test_the_document_is_the_one_served(fuzzed: ServerProcess) -> None:
    assert fuzzed.http.get(f"{fuzzed.url}/openapi.json").json() == _document()


def test_the_fuzzed_server_is_still_sound(fuzzed: ServerProcess) -> None:
    """Whatever the fuzzing did, the server answers and its catalog still lists and loads what it holds."""
    assert fuzzed.http.get(f"{fuzzed.url}/api/v1/health").status_code == 200
    namespaces = fuzzed.http.get(f"{fuzzed.url}/iceberg/v1/lake/namespaces")
    assert namespaces.status_code == 200, namespaces.text
    for levels in namespaces.json()["namespaces"]:
        path = f"{fuzzed.url}/iceberg/v1/lake/namespaces/{quote(chr(0x1F).join(levels), safe='')}"
        tables = fuzzed.http.get(f"{path}/tables")
        assert tables.status_code == 200, tables.text
        for identifier in tables.json()["identifiers"]:
            loaded = fuzzed.http.get(f"{path}/tables/{quote(identifier['name'], safe='')}")
            assert loaded.status_code == 200, loaded.text
