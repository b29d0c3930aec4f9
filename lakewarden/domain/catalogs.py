"""Catalog registrations: types, required properties, filters and table defaults (pure rules)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.storage import S3_SCHEMES, StorageProfile

CATALOG_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
TABLE_DEFAULT_PREFIX = "table."
DATABASE_FILTER = "database-filter"
TABLE_FILTER = "table-filter"

# Properties every catalog type must carry; the message names the missing one.
REQUIRED_PROPERTIES: dict[str, tuple[str, ...]] = {
    "sql": ("uri", "warehouse"),
    "rest": ("uri",),
    # lakewarden's own REST catalog: `warehouse` is where data and metadata go; `uri` is this server
    "internal": ("uri", "warehouse"),
    # a Hive Metastore: `uri` is its thrift address (several, comma-separated, as Iceberg's HiveCatalog takes);
    # `warehouse` is where new databases' tables go when the metastore does not say
    "hive": ("uri",),
    # Iceberg's Hadoop catalog: tables are directories under `warehouse` (local or S3), versioned by hint files
    "filesystem": ("warehouse",),
    # AWS Glue, with pyiceberg's property names (`glue.region`, `glue.endpoint`, `glue.access-key-id`, ...)
    "glue": (),
    # Hudi tables under a local directory (metadata/hudi.py): shown and judged, not optimized
    "hudi": ("warehouse",),
    # a Paimon filesystem warehouse (metadata/paimon.py): shown and judged, not optimized
    "paimon": ("warehouse",),
}
# catalogs of tables of another format than Iceberg, by catalog type: lakewarden reads their files itself
FORMAT_OF_CATALOG = {"hudi": "hudi", "paimon": "paimon"}
TABLE_FORMATS = ("iceberg", *dict.fromkeys(FORMAT_OF_CATALOG.values()))
CATALOG_TYPES = tuple(REQUIRED_PROPERTIES)
# Values never shown by the API (they still reach the optimizer through its own endpoint).
SECRET_PROPERTIES = (
    "credential",
    "token",
    "jdbc.password",
    "password",
    "s3.secret-access-key",
    "s3.session-token",
    "glue.secret-access-key",
    "glue.session-token",
)
# a catalog whose tables any client may reach through lakewarden's REST catalog (`/iceberg/v1/<name>/…`), each
# request forwarded to the catalog of record
REST_ENDPOINT = "rest-endpoint.enabled"
# how long the REST catalog keeps an idempotency key's answer (api/idempotency.py), as `GET /v1/config` says it
IDEMPOTENCY_LIFETIME = timedelta(minutes=30)
IDEMPOTENCY_LIFETIME_ISO = "PT30M"
FORWARDABLE_TYPES = ("sql", "hive", "glue", "rest")
# catalogs whose tables lakewarden's optimizers reach through lakewarden's REST catalog, not directly: Spark has no
# Glue client without Maven (Iceberg's GlueCatalog needs the AWS SDK v2)
THROUGH_LAKEWARDEN = ("internal", "glue")


# how long one operation of an optimizer on the catalog's object store may wait for it, retries included, before
# the task fails naming the store (spark/session.py turns it into S3A's timeouts and retry limits)
STORAGE_TIMEOUT = "lakewarden.storage.timeout-ms"
DEFAULT_STORAGE_TIMEOUT_MS = 120_000
MIN_STORAGE_TIMEOUT_MS = 10_000  # below it S3A's five attempts no longer fit half of it


def storage_timeout_ms(properties: Mapping[str, str]) -> int:
    """The catalog's storage timeout in milliseconds; InvalidField naming the property when it is not one."""
    text = properties.get(STORAGE_TIMEOUT)
    if text is None:
        return DEFAULT_STORAGE_TIMEOUT_MS
    if not text.isdigit() or not MIN_STORAGE_TIMEOUT_MS <= int(text) <= 86_400_000:
        raise InvalidField(
            f"properties.{STORAGE_TIMEOUT}",
            f"{text!r} must be whole milliseconds from {MIN_STORAGE_TIMEOUT_MS} to 86400000",
        )
    return int(text)


# a namespace level, table or view name of an internal catalog: it becomes a path segment of the REST catalog's
# URLs (a '/' in it could not be addressed) and of the table's default location (nor could a NUL)
MAX_OBJECT_NAME = 255


def check_object_name(field_name: str, name: str) -> None:
    """InvalidField unless `name` can name a namespace level, table or view: 1-255 characters, no '/' and no
    control character."""
    if not name or len(name) > MAX_OBJECT_NAME:
        raise InvalidField(field_name, f"{name!r} must be 1-{MAX_OBJECT_NAME} characters")
    if "/" in name or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise InvalidField(field_name, f"{name!r} has a '/' or a control character")


@dataclass(frozen=True)
class CatalogSpec:
    """What a registered catalog is: enough to open it with pyiceberg or Spark."""

    name: str
    type: str
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def table_defaults(self) -> dict[str, str]:
        """`table.`-prefixed properties, without the prefix: defaults for every table of the catalog."""
        n = len(TABLE_DEFAULT_PREFIX)
        return {k[n:]: v for k, v in self.properties.items() if k.startswith(TABLE_DEFAULT_PREFIX)}

    @property
    def connection_properties(self) -> dict[str, str]:
        """Properties that configure the catalog client (filters and table defaults removed)."""
        return {
            k: v
            for k, v in self.properties.items()
            if not k.startswith(TABLE_DEFAULT_PREFIX) and k not in (DATABASE_FILTER, TABLE_FILTER)
        }


@dataclass(frozen=True)
class TableFilter:
    """The database and table regexes of a catalog; both must match the whole name."""

    database: re.Pattern[str] | None
    table: re.Pattern[str] | None

    @classmethod
    def of(cls, spec: CatalogSpec) -> TableFilter:
        return cls(
            _compile(spec.properties.get(DATABASE_FILTER), f"properties.{DATABASE_FILTER}"),
            _compile(spec.properties.get(TABLE_FILTER), f"properties.{TABLE_FILTER}"),
        )

    def accepts_database(self, database: str) -> bool:
        return self.database is None or self.database.fullmatch(database) is not None

    def accepts_table(self, database: str, table: str) -> bool:
        """The table filter matches `table` or `database.table`, as Amoro's does."""
        if not self.accepts_database(database):
            return False
        if self.table is None:
            return True
        return self.table.fullmatch(table) is not None or self.table.fullmatch(f"{database}.{table}") is not None


def _compile(pattern: str | None, field_name: str) -> re.Pattern[str] | None:
    if pattern is None or pattern == "":
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidField(field_name, f"is not a valid regular expression: {exc}") from exc


def validate_catalog(spec: CatalogSpec) -> None:
    """Raise InvalidField naming the first problem with a catalog registration."""
    if not CATALOG_NAME_PATTERN.match(spec.name):
        raise InvalidField("name", f"{spec.name!r} must match {CATALOG_NAME_PATTERN.pattern}")
    if spec.type not in REQUIRED_PROPERTIES:
        raise InvalidField("type", f"{spec.type!r} is not a catalog type; use one of {', '.join(CATALOG_TYPES)}")
    for key, value in spec.properties.items():
        if not isinstance(value, str):
            raise InvalidField(f"properties.{key}", "must be a string")
    for key in REQUIRED_PROPERTIES[spec.type]:
        if not spec.properties.get(key, "").strip():
            raise InvalidField(f"properties.{key}", f"is required for a {spec.type} catalog")
    TableFilter.of(spec)
    storage_timeout_ms(spec.properties)
    uri = spec.properties.get("uri", "")
    if spec.type == "sql":
        if uri.startswith("sqlite"):
            if not uri.startswith("sqlite:////"):
                raise InvalidField("properties.uri", "a SQLite catalog needs an absolute path: sqlite:////abs/path.db")
        elif not uri.startswith("postgresql"):
            raise InvalidField("properties.uri", "must be a sqlite:// or postgresql:// SQLAlchemy URL")
    if spec.type in ("rest", "internal") and not uri.startswith(("http://", "https://")):
        raise InvalidField("properties.uri", "must be an http:// or https:// URL")
    if spec.type == "internal":
        StorageProfile.of(spec.properties)
    if spec.type == "hive":
        _check_thrift_uris(uri)
    if spec.type == "filesystem":
        _check_warehouse(spec.properties["warehouse"])
    if spec.type in FORMAT_OF_CATALOG:
        _check_warehouse(spec.properties["warehouse"])
        if urlsplit(spec.properties["warehouse"]).scheme not in ("", "file"):
            raise InvalidField("properties.warehouse", f"a {spec.type} catalog's warehouse must be a local directory")
    if spec.type == "glue":
        _check_glue(spec.properties)
    if REST_ENDPOINT in spec.properties:
        if spec.properties[REST_ENDPOINT] not in ("true", "false"):
            raise InvalidField(f"properties.{REST_ENDPOINT}", "must be true or false")
        if spec.type not in FORWARDABLE_TYPES:
            raise InvalidField(
                f"properties.{REST_ENDPOINT}",
                f"{spec.type} catalogs cannot be served; only {', '.join(FORWARDABLE_TYPES)}",
            )


def table_format(spec: CatalogSpec) -> str:
    """The format of the catalog's tables: iceberg, or that of a catalog of another format's tables."""
    return FORMAT_OF_CATALOG.get(spec.type, "iceberg")


def serves_rest_endpoint(spec: CatalogSpec) -> bool:
    """Whether lakewarden's REST catalog forwards requests to this catalog: when enabled on it (off by default)."""
    return spec.type in FORWARDABLE_TYPES and spec.properties.get(REST_ENDPOINT) == "true"


def _check_glue(properties: Mapping[str, str]) -> None:
    endpoint = properties.get("glue.endpoint")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise InvalidField("properties.glue.endpoint", "must be an http:// or https:// URL")
    retries = properties.get("glue.max-retries")
    if retries is not None and not (retries.isdigit() and int(retries) <= 100):
        raise InvalidField("properties.glue.max-retries", "must be a whole number from 0 to 100")
    if bool(properties.get("glue.access-key-id")) != bool(properties.get("glue.secret-access-key")):
        raise InvalidField("properties.glue.secret-access-key", "glue.access-key-id and its secret come together")


def _check_thrift_uris(uri: str) -> None:
    """Each of a metastore's comma-separated URIs is thrift://host:port."""
    for one in uri.split(","):
        parts = urlsplit(one.strip())
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "thrift" or not parts.hostname or port is None or parts.path not in ("", "/"):
            raise InvalidField("properties.uri", f"{one.strip()!r} is not a metastore address: thrift://host:port")


def _check_warehouse(warehouse: str) -> None:
    """A filesystem catalog's warehouse: an absolute local path (or file: URI) or an S3 location with a bucket."""
    parts = urlsplit(warehouse)
    if parts.scheme in ("", "file"):
        if not parts.path.startswith("/"):
            raise InvalidField("properties.warehouse", f"{warehouse!r} must be an absolute path")
    elif parts.scheme in S3_SCHEMES:
        if not parts.netloc:
            raise InvalidField("properties.warehouse", f"{warehouse!r} names no bucket")
    else:
        raise InvalidField("properties.warehouse", f"{warehouse!r}: use a local path or an s3:// location")


def redact(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: ("****" if k in SECRET_PROPERTIES else v) for k, v in properties.items()}


def with_internal_defaults(spec: CatalogSpec, server_url: str, default_warehouse: str) -> CatalogSpec:
    """An internal catalog is served by this server: its `uri` is ours, its warehouse defaults under the data dir."""
    if spec.type != "internal":
        return spec
    properties = dict(spec.properties)
    properties["uri"] = f"{server_url.rstrip('/')}/iceberg"
    properties.setdefault("warehouse", default_warehouse)
    return CatalogSpec(spec.name, spec.type, properties)
