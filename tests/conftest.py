"""Shared fixtures: one real SparkSession per test session, real servers on real SQLite databases."""

from __future__ import annotations

import gc
import itertools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi.testclient import TestClient

from lakewarden.api.app import create_app
from lakewarden.config import Config, load_config
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.heap import HeapFreezer
from tests.postgres import fresh_database, postgres_server
from tests.servers import FAST_EVALUATOR, ServerProcess, free_port, started_server
from tests.tools import tool_missing

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_catalog_numbers = itertools.count(1)


class _CollectorPauses:
    """Time the test process spends in full garbage collections: a suite that keeps what its tests built makes
    every later full collection (and every test that collects) slower, which only a total across the run shows."""

    def __init__(self) -> None:
        self.full, self.seconds, self._started = 0, 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.full += 1
            self.seconds += time.perf_counter() - self._started


_pauses = _CollectorPauses()
gc.callbacks.append(_pauses)
# as the server does (lakewarden/heap.py): what a full collection leaves is frozen, so later full collections walk
# only what the tests built since, not everything every earlier test kept
HeapFreezer().install()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"full garbage collections: {_pauses.full} taking {_pauses.seconds:.1f} s; "
        f"{len(gc.get_objects())} objects tracked and {gc.get_freeze_count()} frozen at the end"
    )


def make_config(data_dir: Path, **ams: Any) -> Config:
    """A server config on a fresh data directory, with no catalogs unless a test registers them."""
    env = {
        "LAKEWARDEN_AMS__DATA_DIR": str(data_dir),
        "LAKEWARDEN_CATALOGS": "[]",
        "LAKEWARDEN_RESOURCE_GROUPS": "[{name: default, container: local}]",
    }
    for key, value in ams.items():  # database__url=… sets ams.database.url
        env[f"LAKEWARDEN_AMS__{key.upper()}"] = str(value)
    return load_config(environ=env)


@pytest.fixture(scope="session")
def postgres() -> Iterator[str | None]:
    with postgres_server(free_port()) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Config:
    """The system database is SQLite by default and PostgreSQL by URL: API tests run on both."""
    if request.param == "sqlite":
        return make_config(tmp_path / "data")
    server = request.getfixturevalue("postgres")
    if server is None:
        tool_missing("PostgreSQL (Debian's postgresql)")
    return make_config(tmp_path / "data", database__url=fresh_database(server))


@pytest.fixture
def client(config: Config) -> Iterator[TestClient]:
    """The real server app (migrations, seeds, routes) over ASGI, background loops left to the test."""
    with TestClient(create_app(config, start_services=False)) as test_client:
        yield as_admin(test_client, config)


def as_admin(test_client: TestClient, config: Config) -> TestClient:
    """The client with the admin token the server's first start wrote to its data directory."""
    token = (config.data_dir / "admin.token").read_text().strip()
    test_client.headers["Authorization"] = f"Bearer {token}"
    return test_client


# an internal catalog's table for in-process API tests: `managed_table`
TABLES = "/iceberg/v1/lake/namespaces/db/tables"
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "day", "type": "string", "required": False},
        {"id": 3, "name": "region", "type": "string", "required": False},
    ],
}
BY_DAY_AND_REGION = {
    "spec-id": 0,
    "fields": [
        {"source-id": 2, "field-id": 1000, "name": "day", "transform": "identity"},
        {"source-id": 3, "field-id": 1001, "name": "region", "transform": "identity"},
    ],
}


@pytest.fixture
def managed_table(client: TestClient) -> str:
    """`lake.db.t` of an internal catalog `lake`, partitioned by day and region, managed; its REST path."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    created = client.post(TABLES, json={"name": "t", "schema": SCHEMA, "partition-spec": BY_DAY_AND_REGION})
    assert created.status_code == 200, created.text
    assert client.post("/api/v1/catalogs/lake/refresh").status_code == 200
    return f"{TABLES}/t"


@pytest.fixture
def sql_catalog(tmp_path: Path) -> CatalogSpec:
    """A fresh Iceberg SQL catalog on SQLite, with a name no other test uses (Spark caches catalogs by name)."""
    name = f"cat{next(_catalog_numbers)}"
    root = tmp_path / name
    root.mkdir()
    return CatalogSpec(name, "sql", {"uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": str(root / "warehouse")})


@pytest.fixture
def server_settings() -> str:
    """The `ams:` lines of the test's server; a module overrides this fixture to change them."""
    return FAST_EVALUATOR


@pytest.fixture
def server(tmp_path: Path, server_settings: str) -> Iterator[ServerProcess]:
    """A real `lakewarden server` process on a fresh data directory (maintenance off, no optimizer)."""
    with started_server(tmp_path, extra=server_settings) as process:
        yield process


@pytest.fixture
def lake(server: ServerProcess, spark: SparkSession) -> tuple[ServerProcess, httpx.Client]:
    """The server, an API client of it, and Spark on its catalogs `local` and `lake`, each with `db`."""
    from tests.helpers import open_lake

    return server, open_lake(server, spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from lakewarden.spark.session import build_spark_session

    os.environ.setdefault("LAKEWARDEN_SPARK_LOG_LEVEL", "ERROR")
    # with its web UI (on loopback): tests compare what lakewarden records of Spark's work with the UI's figures
    session = build_spark_session(
        app_name="lakewarden-tests",
        driver_memory="2g",
        master="local[2]",
        extra_conf={
            "spark.ui.enabled": "true",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",  # the driver and its web UI listen on loopback only
        },
    )
    yield session
    session.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium (Debian's, driven by Selenium with the system driver) for the dashboard's tests."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        tool_missing("Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)  # the system driver: nothing downloaded
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
