"""A real `lakewarden server` process driven by the real `lakewarden` CLI."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.spark.session import configure_catalogs
from tests.servers import LAKEWARDEN, REFRESH_SECONDS, ServerProcess, cli, cli_json, free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def server_settings() -> str:
    return ""  # the embedded default's own intervals


@pytest.mark.spark
@pytest.mark.slow
def test_table_created_by_spark_is_listed_within_one_refresh(server: ServerProcess, spark: SparkSession) -> None:
    # the embedded default: a `lake` REST catalog and a `local` SQL catalog in the data directory, a group
    lake, local = cli_json(server, "catalog", "list")
    assert [(c["name"], c["type"]) for c in (lake, local)] == [("lake", "internal"), ("local", "sql")]
    assert lake["properties"]["uri"] == f"{server.url}/iceberg"
    assert [g["name"] for g in cli_json(server, "group", "list")] == ["default"]
    configure_catalogs(spark, [CatalogSpec("local", "sql", local["properties"])])
    c = "local"  # Iceberg's JDBC catalog keys its rows by catalog name: Spark must use the same one
    spark.sql(f"CREATE NAMESPACE {c}.sales")
    # one commit (CTAS), so the explorer never sees the table half-written
    spark.sql(
        f"CREATE TABLE {c}.sales.orders USING iceberg AS SELECT * FROM VALUES (1L, 9.5D), (2L, 7.25D) AS v(id, amount)"
    )
    created = time.monotonic()

    while time.monotonic() - created < REFRESH_SECONDS * 3:
        tables = cli_json(server, "table", "list")
        if tables:
            break
        time.sleep(0.2)
    assert [t["identifier"] for t in tables] == ["local.sales.orders"]
    assert time.monotonic() - created <= REFRESH_SECONDS + 2  # one interval, plus the pass itself

    human = cli(server, "table", "list").stdout
    assert "local.sales.orders" in human and "idle" in human
    shown = cli_json(server, "table", "show", "local.sales.orders")
    assert shown["summary"]["records"] == 2
    assert "self-optimizing.group" in cli(server, "table", "show", "local.sales.orders").stdout
    evaluated = cli(server, "table", "evaluate", "local.sales.orders").stdout
    assert "local.sales.orders is idle" in evaluated
    assert "no partition needs optimizing" in evaluated
    assert "< minor.trigger.file-count 12" in evaluated  # the partition's own reason


def test_cli_commands_and_errors(server: ServerProcess, tmp_path: Path) -> None:
    wh = tmp_path / "extra"
    out = cli(
        server,
        "catalog",
        "add",
        "extra",
        "--type",
        "sql",
        "--uri",
        f"sqlite:///{wh}.db",
        "--warehouse",
        str(wh),
        "-p",
        "table-filter=keep_.*",
    ).stdout
    assert "registered" in out
    assert cli_json(server, "catalog", "show", "extra")["properties"]["table-filter"] == "keep_.*"
    assert "healthy" in cli(server, "catalog", "refresh", "extra").stdout
    assert "extra" in cli(server, "catalog", "list").stdout

    dup = cli(
        server, "catalog", "add", "extra", "--type", "sql", "--uri", f"sqlite:///{wh}.db", "--warehouse", "/w", ok=False
    )
    assert dup.returncode == 1
    assert dup.stderr.strip() == "error: catalog 'extra' already exists (HTTP 409)"
    bad = cli(server, "catalog", "add", "x", "--type", "sql", "--warehouse", "/w", ok=False)
    assert bad.returncode == 1
    assert "properties.uri: is required" in bad.stderr
    assert "Traceback" not in bad.stderr

    assert "created" in cli(server, "group", "add", "etl", "-p", "scheduling-policy=balanced").stdout
    assert "etl" in cli(server, "group", "list").stdout
    bad_group = cli(server, "group", "add", "g", "--container", "yarn", ok=False)
    assert bad_group.returncode == 1 and "container: 'yarn' is not a configured container" in bad_group.stderr
    assert "error: --property 'novalue'" in cli(server, "group", "add", "g", "-p", "novalue", ok=False).stderr
    assert "removed" in cli(server, "group", "rm", "etl").stdout

    assert (
        "status: 'asleep' is not a table status" in cli(server, "table", "list", "--status", "asleep", ok=False).stderr
    )
    assert "must be catalog.database.table" in cli(server, "table", "show", "nodots", ok=False).stderr
    assert "not managed" in cli(server, "table", "show", "a.b.c", ok=False).stderr
    assert "removed" in cli(server, "catalog", "rm", "extra").stdout
    assert "does not exist" in cli(server, "catalog", "rm", "extra", ok=False).stderr


def test_cli_without_a_server_says_so(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*LAKEWARDEN, "catalog", "list", "--server", f"http://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "cannot reach the lakewarden server" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("ams:\n  http-server: {bind-port: many}\n")
    proc = subprocess.run(
        [*LAKEWARDEN, "server", "--config", str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: invalid config: ams.http-server.bind-port")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_shutdown_and_restart_keeps_state(tmp_path: Path, sig: int) -> None:
    server = ServerProcess(tmp_path)
    server.start()
    try:
        cli(server, "group", "add", "keepme")
        assert server.stop(sig) == 0
        assert "lakewarden stopped" in server.log.read_text()
        server.start()  # same data directory: migrations are a no-op, state is there
        assert "keepme" in [g["name"] for g in cli_json(server, "group", "list")]
        assert server.stop(sig) == 0
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()


def test_a_started_server_has_frozen_its_heap_and_says_so(server: ServerProcess) -> None:
    """What the server builds at start is frozen out of garbage collection (server.py, heap.py), and /metrics shows
    the frozen objects and each generation's collections."""
    metrics = server.http.get(f"{server.url}/metrics").text
    samples = dict(
        line.rsplit(" ", 1) for line in metrics.splitlines() if line.startswith(("lakewarden_heap", "lakewarden_gc"))
    )
    assert float(samples["lakewarden_heap_frozen_objects"]) > 100_000, samples
    assert float(samples['lakewarden_gc_collections_total{generation="0"}']) > 0, samples
    assert 'lakewarden_gc_objects_collected_total{generation="2"}' in samples
