"""Property-based fuzzing of lakewarden's HTTP surface, longer and randomized (the suite's
tests/test_fuzz_http.py runs a bounded, derandomized version of the same).

A real server on a fresh data dir, with a namespace `db` and a table `t` in its internal catalog `lake`.
Every operation of its OpenAPI document (`/api/v1` and `/iceberg/v1`) gets `--examples` generated requests
as an admin, half of them aimed at what exists (the path's catalog, namespace, table and group set to ones
that exist). Each answer is checked: no server error, a documented status and content type, a body of the
documented schema. Prints the failures with the seed that replays them (`--seed`).

With `--spec PATH` (the Iceberg REST spec's own document, `open-api/rest-catalog-open-api.yaml` of
apache/iceberg, which the project does not copy), the catalog's routes are fuzzed from that document too:
every operation the server advertises in `/v1/config`'s `endpoints`, checked against the spec's statuses,
content types and schemas.

    .venv/bin/python bench/fuzz_http.py [--examples 200] [--seed N] [--spec rest-catalog-open-api.yaml]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, write

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
KNOWN = {"prefix": "lake", "namespace": "db", "table": "t", "catalog": "lake", "database": "db", "name": "default"}


def aim(case: Any) -> Any:
    for name, value in KNOWN.items():
        if case.path_parameters and name in case.path_parameters:
            case.path_parameters[name] = value
    return case


def fuzzer(
    strategy: Any, run_seed: int, examples: int, requests: Counter[str], surface: str, url: str, headers: dict[str, str]
) -> Any:
    """A hypothesis test of one operation: each generated request sent and its answer checked."""

    @seed(run_seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def fuzz(case: Any) -> None:
        requests[surface] += 1
        case.call_and_validate(base_url=url, headers=headers, checks=CHECKS)

    return fuzz


ERROR_MODEL = "#/components/schemas/ErrorModel"
ERROR_RESPONSE = "#/components/schemas/IcebergErrorResponse"


def corrected_spec(path: Path) -> dict[str, Any]:
    """The spec's document, with one known defect corrected in memory: some error answers of the view routes
    name the schema `ErrorModel` (the inner object) where every other route, the spec's own examples for
    them and Iceberg's clients (Java's ErrorResponseParser, pyiceberg) use the `{"error": ErrorModel}`
    wrapper, `IcebergErrorResponse` (apache/iceberg#8914 moved the other routes to it)."""
    import yaml

    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    corrected = []
    for route, item in spec.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict):
                continue
            for status, response in operation.get("responses", {}).items():
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                if not str(status).startswith("2") and schema.get("$ref") == ERROR_MODEL:
                    schema["$ref"] = ERROR_RESPONSE
                    corrected.append(f"{method.upper()} {route} {status}")
    print(f"the spec's document: {len(corrected)} error answers named ErrorModel, read as IcebergErrorResponse")
    return spec


def spec_operations(path: Path, url: str, headers: dict[str, str]) -> list[tuple[Any, str]]:
    """The operations of the Iceberg REST spec's document that the server advertises in `/v1/config`, each with
    the base URL its paths are under (the spec's paths start at `/v1`)."""
    import httpx

    config = httpx.get(f"{url}/iceberg/v1/config", params={"warehouse": "lake"}, headers=headers).json()
    advertised = set(config.get("endpoints") or [])
    schema = schemathesis.openapi.from_dict(corrected_spec(path))
    found = []
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            continue
        operation = result.ok()
        if f"{operation.method.upper()} {operation.path}" in advertised:
            found.append((operation, f"{url}/iceberg"))
    print(f"the spec's document: {len(found)} operations the server advertises")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200, help="per operation, half of them aimed")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--spec", type=Path, default=None, help="the Iceberg REST spec's OpenAPI document")
    args = parser.parse_args()
    run_seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"seed {run_seed} (replay with --seed {run_seed})")
    requests: Counter[str] = Counter()
    failures: list[tuple[str, str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lakewarden-fuzz-") as tmp, running_server(tmp, "") as url:
        token = admin_token(tmp)
        headers = {"Authorization": f"Bearer {token}"}
        catalog = RestCatalog("lake", uri=f"{url}/iceberg", warehouse="lake", token=token)
        catalog.create_namespace("db")
        catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=False)))
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=headers)
        operations = [(result.ok(), url) for result in schema.get_all_operations() if isinstance(result, Ok)]
        if args.spec is not None:
            operations += spec_operations(args.spec, url, headers)
        for number, (operation, base) in enumerate(operations, 1):
            label = f"{operation.method.upper()} {operation.path}"
            surface = (
                "iceberg (spec's document)"
                if base != url
                else "iceberg"
                if operation.path.startswith("/iceberg")
                else "api"
            )
            for aimed in (False, True):
                strategy = operation.as_strategy().map(aim) if aimed else operation.as_strategy()

                fuzz = fuzzer(strategy, run_seed, max(1, args.examples // 2), requests, surface, base, headers)
                try:
                    fuzz()
                except BaseException as exc:  # a failure group of schemathesis: reported, the run goes on
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    failures.append((f"{label} ({'aimed' if aimed else 'anywhere'})", str(exc)[:2000]))
            print(f"\r{number}/{len(operations)} operations, {sum(requests.values()):,} requests", end="", flush=True)
    seconds = time.perf_counter() - started
    print()
    for label, problem in failures:
        print(f"FAILED {label}:\n{problem}\n")
    print(
        f"{sum(requests.values()):,} requests to {len(operations)} operations in {seconds:.0f} s: "
        f"{len(failures)} failing (goal: 0); seed {run_seed}"
    )
    write(
        "fuzz_http",
        {
            "seed": run_seed,
            "examples_per_operation": args.examples,
            "operations": len(operations),
            "requests": dict(requests),
            "failures": [label for label, _ in failures],
            "seconds": round(seconds, 1),
        },
    )
    bar_chart("fuzz_http", "Fuzzed requests by surface (failures: 0 goal)", dict(requests), "requests")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
