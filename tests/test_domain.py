"""Pure rules, tested with plain values."""

from __future__ import annotations

import pytest

from lakewarden.domain.catalogs import CatalogSpec, TableFilter, redact, validate_catalog
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.groups import validate_group
from lakewarden.domain.tables import TABLE_DEFAULTS, TableIdentifier, TableStatus, effective_config

SQL = {"uri": "sqlite:////tmp/c.db", "warehouse": "/tmp/w"}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (CatalogSpec("1bad", "sql", SQL), "name"),
        (CatalogSpec("ok", "delta", SQL), "type"),
        (CatalogSpec("ok", "hudi", {"warehouse": "relative/path"}), "properties.warehouse"),
        (CatalogSpec("ok", "paimon", {"warehouse": "s3://bucket/w"}), "properties.warehouse"),
        (CatalogSpec("ok", "sql", {"uri": "sqlite:////tmp/c.db"}), "properties.warehouse"),
        (CatalogSpec("ok", "sql", {"uri": "sqlite:///relative.db", "warehouse": "/w"}), "properties.uri"),
        (CatalogSpec("ok", "sql", {"uri": "mysql://h/db", "warehouse": "/w"}), "properties.uri"),
        (CatalogSpec("ok", "rest", {"uri": "ftp://x"}), "properties.uri"),
        (CatalogSpec("ok", "sql", {**SQL, "database-filter": "("}), "properties.database-filter"),
        (CatalogSpec("ok", "sql", {**SQL, "table-filter": "[a-"}), "properties.table-filter"),
    ],
)
def test_invalid_catalogs_name_the_field(spec: CatalogSpec, field: str) -> None:
    with pytest.raises(InvalidField) as info:
        validate_catalog(spec)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("valid", "invalid", "field"),
    [  # each valid registration, and the same one a step past a boundary
        (CatalogSpec("lake_1", "sql", SQL), CatalogSpec("_lake_1", "sql", SQL), "name"),
        (CatalogSpec("l" * 64, "sql", SQL), CatalogSpec("l" * 65, "sql", SQL), "name"),
        (
            CatalogSpec("lake-2", "sql", {"uri": "postgresql+psycopg://u:p@h/db", "warehouse": "s3://b/w"}),
            CatalogSpec("lake-2", "sql", {"uri": "postgresql+psycopg://u:p@h/db", "warehouse": " "}),
            "properties.warehouse",
        ),
        (
            CatalogSpec("r", "rest", {"uri": "http://localhost:8181", "credential": "id:secret"}),
            CatalogSpec("r", "rest", {"uri": "localhost:8181", "credential": "id:secret"}),
            "properties.uri",
        ),
        (
            CatalogSpec("i", "internal", {"uri": "https://lw/iceberg", "warehouse": "/w"}),
            CatalogSpec("i", "internal", {"uri": "https://lw/iceberg", "warehouse": "/w", "s3.region": "x"}),
            "s3.region",
        ),
        (
            CatalogSpec("t", "sql", {**SQL, "lakewarden.storage.timeout-ms": "10000"}),
            CatalogSpec("t", "sql", {**SQL, "lakewarden.storage.timeout-ms": "9999"}),
            "properties.lakewarden.storage.timeout-ms",
        ),
        (
            CatalogSpec("t", "sql", {**SQL, "lakewarden.storage.timeout-ms": "86400000"}),
            CatalogSpec("t", "sql", {**SQL, "lakewarden.storage.timeout-ms": "2min"}),
            "properties.lakewarden.storage.timeout-ms",
        ),
    ],
)
def test_valid_catalogs_pass_and_a_step_past_a_boundary_does_not(
    valid: CatalogSpec, invalid: CatalogSpec, field: str
) -> None:
    validate_catalog(valid)
    with pytest.raises(InvalidField) as info:
        validate_catalog(invalid)
    assert info.value.field.endswith(field), info.value


def test_filters_match_whole_names() -> None:
    spec = CatalogSpec("c", "sql", {**SQL, "database-filter": "sales|ops", "table-filter": "sales\\.orders|events_.*"})
    flt = TableFilter.of(spec)
    assert flt.accepts_table("sales", "orders")
    assert flt.accepts_table("ops", "events_1")
    assert not flt.accepts_table("sales", "customers")
    assert not flt.accepts_table("sales_eu", "orders")  # fullmatch, not search
    assert not flt.accepts_database("hr")
    assert TableFilter.of(CatalogSpec("c", "sql", SQL)).accepts_table("any", "thing")


def test_table_defaults_and_connection_properties() -> None:
    spec = CatalogSpec("c", "sql", {**SQL, "table-filter": "x", "table.self-optimizing.group": "g1"})
    assert spec.table_defaults == {"self-optimizing.group": "g1"}
    assert spec.connection_properties == SQL
    assert redact({"credential": "a:b", "uri": "u"}) == {"credential": "****", "uri": "u"}


def test_effective_config_precedence() -> None:
    config = effective_config(
        {"self-optimizing.group": "catalog-group", "self-optimizing.quota": "0.2"},
        {"self-optimizing.quota": "0.9", "write.format.default": "parquet"},
    )
    assert config["self-optimizing.group"] == "catalog-group"  # catalog default over built-in
    assert config["self-optimizing.quota"] == "0.9"  # table property over catalog default
    assert config["self-optimizing.target-size"] == TABLE_DEFAULTS["self-optimizing.target-size"]
    assert "write.format.default" not in config  # not a property lakewarden reads


def test_status_parse() -> None:
    assert TableStatus.parse("pending") is TableStatus.PENDING
    assert TableStatus.parse("MINOR_OPTIMIZING") is TableStatus.MINOR_OPTIMIZING
    assert TableStatus.parse("700") is TableStatus.IDLE
    with pytest.raises(InvalidField, match="status"):
        TableStatus.parse("sleeping")
    with pytest.raises(InvalidField, match="status"):
        TableStatus.parse("123")


def test_table_identifier_parse() -> None:
    assert TableIdentifier.parse("c.db.t") == TableIdentifier("c", "db", "t")
    assert TableIdentifier.parse("c.a.b.t") == TableIdentifier("c", "a.b", "t")
    with pytest.raises(InvalidField):
        TableIdentifier.parse("c.t")


@pytest.mark.parametrize(
    ("name", "container", "props", "field"),
    [
        ("bad name", "local", {}, "name"),
        ("-x", "local", {}, "name"),
        ("g", "yarn", {}, "container"),
        ("g", "local", {"scheduling-policy": "fifo"}, "properties.scheduling-policy"),
        ("g", "local", {"instances": "-1"}, "properties.instances"),
        ("g", "local", {"parallelism": "0"}, "properties.parallelism"),
    ],
)
def test_invalid_groups(name: str, container: str, props: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidField) as info:
        validate_group(name, container, props, {"local": "local"})
    assert info.value.field == field


@pytest.mark.parametrize("timeout_ms", [10_000, 120_000, 86_400_000])
def test_each_s3_clients_retries_fit_half_the_storage_timeout(timeout_ms: int) -> None:
    """Five attempts (connect, then a silent socket) and their longest back-offs, within half the catalog's storage
    timeout, for S3FileIO and for S3A; the other half is StoreSilence's, which ends Iceberg's own retries."""
    from lakewarden.spark.session import storage_bounds

    bounds = storage_bounds(timeout_ms)
    attempts = int(bounds["hadoop.fs.s3a.retry.limit"]) + 1
    per_attempt = int(bounds["hadoop.fs.s3a.connection.establish.timeout"]) + int(
        bounds["hadoop.fs.s3a.connection.timeout"]
    )
    interval = int(bounds["hadoop.fs.s3a.retry.interval"].removesuffix("ms"))
    back_off = 1.5 * sum(interval * 2**k for k in range(attempts - 1))  # Hadoop's exponential, 0.5-1.5 x
    assert bounds["hadoop.fs.s3a.attempts.maximum"] == "0"  # the SDK does not retry inside S3A's attempts
    assert attempts * per_attempt + back_off <= timeout_ms / 2
    assert bounds["hadoop.fs.s3a.lakewarden.timeout-ms"] == str(timeout_ms)

    # S3FileIO: the SDK's equal jitter waits at most min(base x 2^k, max) before its k-th retry, k from 1
    attempts = int(bounds["s3.retry.num-retries"]) + 1
    per_attempt = int(bounds["http-client.apache.connection-timeout-ms"]) + int(
        bounds["http-client.apache.socket-timeout-ms"]
    )
    base, most = int(bounds["s3.retry.min-wait-ms"]), int(bounds["s3.retry.max-wait-ms"])
    back_off = sum(min(base * 2**k, most) for k in range(1, attempts))
    assert attempts * per_attempt + back_off <= timeout_ms / 2
    assert bounds["lakewarden.storage.timeout-ms"] == str(timeout_ms)
