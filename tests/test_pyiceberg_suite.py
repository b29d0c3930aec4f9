"""pyiceberg's own REST catalog integration tests, from its source distribution, against a lakewarden server.

pyiceberg's suite expects Iceberg's reference REST server at http://localhost:8181 (its docker setup), with
no credential, a namespace `default`, and tables that a Spark job provisions. Here a lakewarden server
takes that place: on 127.0.0.1:8181 with authentication off, serving its REST catalog at the root too
(`/v1/…`, as the reference server does), with `default` created and the provisioned tables the chosen
tests read written by Spark through lakewarden's catalog, as pyiceberg's `dev/provision.py` writes them.

Every test of the chosen files runs, except what EXCLUDED lists, each with its reason: the one place
where a skip is justified. pyiceberg's own skips (features its RestCatalog client does not have) are
reported by the run and counted below.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.servers import ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow, pytest.mark.spark]

VERSION = "0.12.0"  # the pyiceberg of requirements.lock
SDIST = f"pyiceberg-{VERSION}.tar.gz"
SDIST_SHA256 = "19f165d298054f9436108691098b60fa0fa99d0eff5fb884700c43b29334a39d"
PORT = 8181  # where pyiceberg's suite looks for its REST catalog

FILES = [
    "tests/integration/test_rest_catalog.py",  # namespaces, views
    "tests/integration/test_rest_schema.py",  # schema evolution, identifier fields, transactions
    "tests/integration/test_catalog.py",  # the catalog API (its REST parameters)
    "tests/integration/test_partition_evolution.py",
    "tests/integration/test_sort_order_update.py",
    "tests/integration/test_snapshot_operations.py",  # tags, branches, set-current-snapshot
    "tests/integration/test_statistics_operations.py",
]
# the parameters of test_catalog.py and friends that are other catalogs (in memory, SQLite, Hive)
OTHER_CATALOGS = "not hive and not memory_catalog and not sqlite_catalog"
EXCLUDED = {
    "tests/integration/test_catalog.py::test_rest_custom_namespace_separator": (
        "asserts a setting of the reference server's docker setup (namespace-separator '.'); lakewarden "
        "advertises the spec's default, %1F, which Java clients expect"
    ),
}
# the other files of tests/integration drive Spark through Spark Connect (sc://localhost:15002) or need
# storage and Hive services of the docker setup; lakewarden's own Spark tests cover Spark on its catalog.
EXPECTED_PYICEBERG_SKIPS = 4  # "RestCatalog does not support slash in namespace / table name", twice each


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pyiceberg's tests and pytest settings, from its source distribution (fetched from PyPI once, checked
    against its hash, kept in the cache)."""
    cache = Path(os.environ.get("LAKEWARDEN_CACHE_DIR", Path.home() / ".cache" / "lakewarden"))
    archive = cache / SDIST
    if not archive.exists() or hashlib.sha256(archive.read_bytes()).hexdigest() != SDIST_SHA256:
        index = httpx.get("https://pypi.org/simple/pyiceberg/", timeout=60, follow_redirects=True)
        index.raise_for_status()
        url = re.search(rf'href="([^"#]*/{re.escape(SDIST)})', index.text)
        assert url is not None, f"{SDIST} is not on PyPI's index"
        data = httpx.get(url.group(1), timeout=300, follow_redirects=True).content
        assert hashlib.sha256(data).hexdigest() == SDIST_SHA256, f"{SDIST} from PyPI does not match its hash"
        cache.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(data)
    root = tmp_path_factory.mktemp("pyiceberg-suite")
    top = f"pyiceberg-{VERSION}/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith((top + "tests/", top + "pyproject.toml"))]
        for member in members:
            member.name = member.name.removeprefix(top)
        tar.extractall(root, members=members, filter="data")
    return root  # without pyiceberg's sources beside the tests: they import the installed pyiceberg


@pytest.fixture(scope="module")
def reference_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind(("127.0.0.1", PORT))
        except OSError:
            pytest.fail(f"port {PORT} is taken: pyiceberg's suite needs its REST catalog there")
    server = ServerProcess(tmp_path_factory.mktemp("server"), extra="  auth: {enabled: false}\n", port=PORT)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def provision(server: ServerProcess, spark: SparkSession) -> None:
    """What pyiceberg's dev/provision.py gives the chosen tests: the namespace `default`, and the table of
    test_snapshot_operations.py (four inserts and a delete, by Spark)."""
    created = httpx.post(f"{server.url}/iceberg/v1/lake/namespaces", json={"namespace": ["default"]}, timeout=30)
    assert created.status_code == 200, created.text
    # Spark's catalog `pyi` is the server's internal catalog `lake`
    conf = {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "rest", ".uri": f"{server.url}/iceberg"}
    for key, value in {**conf, ".warehouse": "lake"}.items():
        spark.conf.set(f"spark.sql.catalog.pyi{key}", value)
    table = "pyi.default.test_table_snapshot_operations"
    spark.sql(f"CREATE TABLE {table} (number integer) USING iceberg TBLPROPERTIES ('format-version'='2')")
    for statement in ("VALUES (1)", "VALUES (2)", "DELETE", "VALUES (3)", "VALUES (4)"):
        if statement == "DELETE":
            spark.sql(f"DELETE FROM {table} WHERE number = 2")
        else:
            spark.sql(f"INSERT INTO {table} {statement}")


def test_pyiceberg_rest_integration_suite(suite: Path, reference_place: ServerProcess, spark: SparkSession) -> None:
    provision(reference_place, spark)
    env = {
        **os.environ,
        # test_catalog.py's `rest_test_catalog` parameter: a catalog named by the environment
        "PYICEBERG_TEST_CATALOG": "lakewarden",
        "PYICEBERG_CATALOG__LAKEWARDEN__TYPE": "rest",
        "PYICEBERG_CATALOG__LAKEWARDEN__URI": f"{reference_place.url}/iceberg",
    }
    deselect = [arg for test in EXCLUDED for arg in ("--deselect", test)]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:logging",
            "-q",
            "-rs",
            "-m",
            "integration",
            "-k",
            OTHER_CATALOGS,
            *deselect,
            *FILES,
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|skipped|failed|error)", summary)}
    assert counts.get("passed", 0) >= 500, summary  # 501 with pyiceberg 0.12.0
    assert counts.get("skipped", 0) == EXPECTED_PYICEBERG_SKIPS, run.stdout[-4000:]
    assert "does not support slash" in run.stdout
