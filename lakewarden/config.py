"""Server configuration: a YAML file with Amoro-like keys (`ams:`, `containers:`, `resource-groups:`,
`catalogs:`), overridable from the environment.

Any key can be set by a variable named LAKEWARDEN_ and the key path, levels joined by `__`, dashes as `_`
(`LAKEWARDEN_AMS__HTTP_SERVER__BIND_PORT=1631`); values are read as YAML scalars. Durations are milliseconds or a
number with a unit (500ms, 30s, 3min, 1h, 1d). docs/operations.md lists every key and its default."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ByteSize, ConfigDict, Field, ValidationError, model_validator

from lakewarden.domain.durations import parse_duration
from lakewarden.domain.errors import InvalidField

ENV_PREFIX = "LAKEWARDEN_"
Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class SslConfig(_Model):
    """TLS for the server: a PEM certificate (chain) and its private key."""

    certfile: Path
    keyfile: Path


class HttpServerConfig(_Model):
    bind_port: int = Field(1630, alias="bind-port", ge=0, le=65535)
    max_body_size: int = Field(16 * 1024 * 1024, alias="max-body-size", ge=1024)  # bytes; larger: 413
    ssl: SslConfig | None = None


class AuthConfig(_Model):
    """Who may call the server (domain/security.py). On by default: the first start creates principal
    `admin` and writes its token to `<data-dir>/admin.token` (mode 0600), where the CLI finds it."""

    enabled: bool = True
    metrics: str = Field("token", pattern="^(open|token)$")  # /metrics: open to anyone, or a viewer's token
    # signs access, session and optimizer tokens; servers sharing a database must share it. Default:
    # LAKEWARDEN_SECRET_KEY, else <data-dir>/secret.key (created at first start)
    secret_key_file: Path | None = Field(None, alias="secret-key-file")
    access_token_ttl: Duration = Field(timedelta(hours=1), alias="access-token-ttl")  # OAuth2, REST catalog
    session_ttl: Duration = Field(timedelta(hours=12), alias="session-ttl")  # the dashboard's login
    # failed logins (password, client credentials) from one address before it must wait out the window
    failed_login_limit: int = Field(10, alias="failed-login-limit", ge=1)
    failed_login_window: Duration = Field(timedelta(minutes=5), alias="failed-login-window")
    # a cached token or principal is rechecked against the database after this (revocations on other servers)
    cache_ttl: Duration = Field(timedelta(seconds=10), alias="cache-ttl")


class DatabaseConfig(_Model):
    url: str | None = None  # a SQLAlchemy URL; None = SQLite file in the data directory


class RefreshCatalogsConfig(_Model):
    """External catalogs are explored every `interval`; those whose tables' metadata locations are read together
    in one pass (sql, hive, filesystem: only moved tables are loaded) every `watch-interval`, so a writer's commit
    is noticed in seconds. A `watch-interval` of null explores them on `interval` too."""

    interval: Duration = timedelta(minutes=3)
    watch_interval: Duration | None = Field(timedelta(seconds=5), alias="watch-interval")
    thread_count: int = Field(10, alias="thread-count", ge=1, le=256)

    @model_validator(mode="after")
    def _watch_not_too_often(self) -> RefreshCatalogsConfig:
        if self.watch_interval is not None and self.watch_interval < timedelta(seconds=1):
            raise ValueError("watch-interval must be at least 1s (or null: explore on interval)")
        return self


class RefreshInternalCatalogsConfig(_Model):
    """An internal catalog's creates, commits and drops reach lakewarden as events; its full sweep is a safety
    net, run when a node starts leading, when the catalog's table defaults change, and then this often."""

    interval: Duration = timedelta(hours=1)


class OptimizerConfig(_Model):
    heart_beat_timeout: Duration = Field(timedelta(minutes=1), alias="heart-beat-timeout")
    task_ack_timeout: Duration = Field(timedelta(seconds=30), alias="task-ack-timeout")
    task_execute_timeout: Duration = Field(timedelta(hours=1), alias="task-execute-timeout")
    # a task failed in a way a retry may pass waits task-retry-backoff * 2^retries (at most the max) first
    task_retry_backoff: Duration = Field(timedelta(seconds=5), alias="task-retry-backoff")
    task_retry_backoff_max: Duration = Field(timedelta(minutes=5), alias="task-retry-backoff-max")
    # optimizer threads' polls that may wait for a task at once on this node (each holds one of the server's
    # worker threads while it waits); past them a poll looks once and asks its optimizer to come back later
    max_long_polls: int = Field(16, alias="max-long-polls", ge=0)


class SelfOptimizingConfig(_Model):
    """The server's self-optimizing settings that are not a table's or a group's (Amoro's
    `self-optimizing.*` of the AMS configuration)."""

    # an optimizer thread whose poll found no task within its tables' quotas, and no table to plan, takes a
    # planned task beyond its table's quota (Amoro's default: true)
    break_quota_limit_enabled: bool = Field(True, alias="break-quota-limit-enabled")


class EvaluatorConfig(_Model):
    """How often the evaluator looks for due tables (`interval`). A table is due when its snapshot or its
    configuration changed, or when its last verdict said a time-based trigger (minor or full interval) can
    fire, a process of it ended, or a chart's sample waits; `recheck-interval`, when set, also re-evaluates
    every table at least that often (off by default: a table that does not change is not read)."""

    interval: Duration = timedelta(seconds=10)
    thread_count: int = Field(4, alias="thread-count", ge=1, le=64)
    recheck_interval: Duration | None = Field(None, alias="recheck-interval")


class ActionSchedule(_Model):
    """When a maintenance action is looked at on each table (a table may override `interval` with
    its own `<prefix>.interval` property)."""

    enabled: bool = True
    interval: Duration


ACTION_INTERVALS = {
    "expire-snapshots": timedelta(hours=1),
    "clean-orphan-files": timedelta(days=1),
    "clean-dangling-delete-files": timedelta(days=1),
    "data-expiration": timedelta(days=1),
    "auto-create-tags": timedelta(minutes=1),
    "rewrite-manifests": timedelta(hours=1),
}


def _schedule(alias: str) -> Any:
    return Field(default_factory=lambda: ActionSchedule(interval=ACTION_INTERVALS[alias]), alias=alias)


class HaConfig(_Model):
    """Several servers on one PostgreSQL system database (services/leadership.py): the holder of the lease
    leads (runs the loops and the local containers); every node serves the REST catalog and the API's reads.
    `node-url` is how the other nodes and the optimizers reach this one (default: its own bind address)."""

    enabled: bool = False
    # a leader that cannot renew within it is replaced: a dead leader's work resumes within the lease and a second
    lease: Duration = Field(timedelta(seconds=10))
    node_url: str | None = Field(None, alias="node-url")

    @model_validator(mode="after")
    def _lease_long_enough(self) -> HaConfig:
        if self.lease < timedelta(seconds=3):
            raise ValueError("lease must be at least 3s (it is renewed every third of it)")
        return self


class ScanPlanningConfig(_Model):
    """The REST catalog's server-side scan planning (services/rest_catalog/scan_planning.py): a plan done within
    `sync-timeout` is answered at once (`completed`); a longer one is `submitted` and polled (0: every plan). Plans not
    fetched whole are kept for `plan-ttl` after their last use. With `read-ahead` the manifests of every commit
    to an internal catalog are parsed into the manifest cache as it lands, so the first plan after a write
    finds them parsed, and at start the cache is warmed with the tables committed last."""

    # long enough for a cold plan of a large table: pyiceberg 0.12 does not poll a `submitted` plan
    sync_timeout: Duration = Field(timedelta(seconds=30), alias="sync-timeout")
    plan_ttl: Duration = Field(timedelta(minutes=10), alias="plan-ttl")
    read_ahead: bool = Field(True, alias="read-ahead")


class ManifestCacheConfig(_Model):
    """Parsed manifest lists and manifests, kept for the evaluator and scan planning alike
    (metadata/manifest_cache.py), up to `max-size` (bytes, or a size with a unit: 512MiB, 2GB)."""

    max_size: ByteSize = Field(ByteSize(1024**3), alias="max-size", ge=1024 * 1024)


class Retention(_Model):
    """Rows older than `keep-time`, or beyond the newest `keep-count`, are deleted."""

    keep_time: Duration = Field(alias="keep-time")
    keep_count: int = Field(alias="keep-count", ge=1)


class Sampling(Retention):
    interval: Duration = Field(description="At most one sample per table (group) this often")


class OptimizerLogsConfig(_Model):
    """The local optimizers' logs (<data-dir>/optimizers): a log past `max-size` is rotated, `backups` older
    copies kept; a log (or copy) not written for `keep-time` is deleted."""

    max_size: ByteSize = Field(ByteSize(64 * 1024**2), alias="max-size", ge=1024)
    backups: int = Field(2, ge=0, le=100)
    keep_time: Duration = Field(timedelta(days=7), alias="keep-time")


RETENTIONS: dict[str, dict[str, Any]] = {
    "processes": {"keep-time": timedelta(days=30), "keep-count": 100},  # per table and action
    "timeline": {"keep-time": timedelta(days=30), "keep-count": 1000},  # per table
    "events": {"keep-time": timedelta(days=7), "keep-count": 100_000},  # in all
    # scans and commits reported, per table: a week is what a table's reads are summed over
    "reads": {"keep-time": timedelta(days=8), "keep-count": 50_000},
    # samples for the dashboard's charts: per table, per group
    "table-shapes": {"keep-time": timedelta(days=30), "keep-count": 2000, "interval": timedelta(minutes=5)},
    "group-load": {"keep-time": timedelta(days=7), "keep-count": 10_080, "interval": timedelta(minutes=1)},
}


class HistoryConfig(_Model):
    """What the server keeps of the past (services/tables/history.py), pruned every `expire-interval` by the leader:
    ended processes with their tasks (`keep-count` per table and action; the newest of each always kept, since
    the maintenance schedule and its back-off read it), the commit timeline and the scans and commits reported
    (`keep-count` per table; the newest of each always kept), the event outbox (`keep-count` in all), and the
    local optimizers' logs. Amoro keeps 30 days of optimizing history (`self-optimizing.runtime-data-keep-time`),
    pruned hourly."""

    expire_interval: Duration = Field(timedelta(hours=1), alias="expire-interval")
    processes: Retention = Field(default_factory=lambda: Retention(**RETENTIONS["processes"]))
    timeline: Retention = Field(default_factory=lambda: Retention(**RETENTIONS["timeline"]))
    events: Retention = Field(default_factory=lambda: Retention(**RETENTIONS["events"]))
    reads: Retention = Field(default_factory=lambda: Retention(**RETENTIONS["reads"]))
    # a table's shape is sampled when the evaluator sees a change, at most every `interval`; a group's load
    # every `interval`
    table_shapes: Sampling = Field(default_factory=lambda: Sampling(**RETENTIONS["table-shapes"]), alias="table-shapes")
    group_load: Sampling = Field(default_factory=lambda: Sampling(**RETENTIONS["group-load"]), alias="group-load")
    optimizer_logs: OptimizerLogsConfig = Field(default_factory=OptimizerLogsConfig, alias="optimizer-logs")

    @model_validator(mode="before")
    @classmethod
    def _defaults_kept(cls, data: Any) -> Any:
        """`processes: {keep-count: 10}` keeps the default keep-time."""
        if isinstance(data, dict):
            for kind, defaults in RETENTIONS.items():
                given = data.get(kind)
                if isinstance(given, dict):
                    data = {**data, kind: {**defaults, **given}}
        return data


class CommitQueueConfig(_Model):
    """The internal catalogs' commits take turns per table, in a bounded line (services/rest_catalog/commit_queue.py);
    `enabled: false` lets every commit stage at once, retrying on a lost swap (how it was before; for comparison)."""

    enabled: bool = True

    max_waiting_per_table: int = Field(8, alias="max-waiting-per-table", ge=0)
    max_waiting: int = Field(32, alias="max-waiting", ge=0)
    max_wait: Duration = Field(timedelta(seconds=10), alias="max-wait")


class MetadataCacheConfig(_Model):
    """The internal catalogs' parsed metadata files and loadTable bodies (services/rest_catalog/metadata_files.py),
    up to `max-size`: each table's current metadata stays while it is used; a commit drops the version it replaced."""

    max_size: ByteSize = Field(ByteSize(256 * 1024**2), alias="max-size", ge=1024 * 1024)


class CostConfig(_Model):
    """The price processes are costed at (domain/costs.py): per core-hour of Spark executor time and per GB
    Spark wrote; a resource group's `cost.core-hour` / `cost.gb-written` properties override them. The defaults
    are about what a cloud vCPU-hour costs, so the numbers mean something before anyone sets them."""

    core_hour: float = Field(0.05, alias="core-hour", ge=0, allow_inf_nan=False)
    gb_written: float = Field(0.0, alias="gb-written", ge=0, allow_inf_nan=False)
    currency: str = Field("USD", max_length=16)


class AmsConfig(_Model):
    server_bind_host: str = Field("127.0.0.1", alias="server-bind-host")
    http_server: HttpServerConfig = Field(default_factory=HttpServerConfig, alias="http-server")
    data_dir: Path = Field(Path("~/.lakewarden"), alias="data-dir")
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    refresh_external_catalogs: RefreshCatalogsConfig = Field(
        default_factory=RefreshCatalogsConfig, alias="refresh-external-catalogs"
    )
    refresh_internal_catalogs: RefreshInternalCatalogsConfig = Field(
        default_factory=RefreshInternalCatalogsConfig, alias="refresh-internal-catalogs"
    )
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    self_optimizing: SelfOptimizingConfig = Field(default_factory=SelfOptimizingConfig, alias="self-optimizing")
    evaluator: EvaluatorConfig = Field(default_factory=EvaluatorConfig)
    ha: HaConfig = Field(default_factory=HaConfig)
    scan_planning: ScanPlanningConfig = Field(default_factory=ScanPlanningConfig, alias="scan-planning")
    manifest_cache: ManifestCacheConfig = Field(default_factory=ManifestCacheConfig, alias="manifest-cache")
    metadata_cache: MetadataCacheConfig = Field(default_factory=MetadataCacheConfig, alias="metadata-cache")
    history: HistoryConfig = Field(default_factory=HistoryConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    commit_queue: CommitQueueConfig = Field(default_factory=CommitQueueConfig, alias="commit-queue")
    # maintenance actions, with Amoro's names and intervals
    expire_snapshots: ActionSchedule = _schedule("expire-snapshots")
    clean_orphan_files: ActionSchedule = _schedule("clean-orphan-files")
    clean_dangling_delete_files: ActionSchedule = _schedule("clean-dangling-delete-files")
    data_expiration: ActionSchedule = _schedule("data-expiration")
    auto_create_tags: ActionSchedule = _schedule("auto-create-tags")
    rewrite_manifests: ActionSchedule = _schedule("rewrite-manifests")

    @model_validator(mode="before")
    @classmethod
    def _action_intervals(cls, data: Any) -> Any:
        """`expire-snapshots: {enabled: false}` keeps the action's own default interval."""
        if isinstance(data, dict):
            for alias, interval in ACTION_INTERVALS.items():
                given = data.get(alias)
                if isinstance(given, dict) and "interval" not in given:
                    data = {**data, alias: {**given, "interval": interval}}
        return data


class ContainerConfig(_Model):
    """`local`: optimizers as child processes of the server; `spark`: optimizers submitted with spark-submit
    to a Spark master (services/resources/containers.py); `external`: optimizers started outside lakewarden (by people,
    a Kubernetes Deployment, a YARN job) register into its groups, and the server never starts or stops them."""

    name: str
    container_impl: Literal["local", "external", "spark"] = Field("local", alias="container-impl")
    properties: dict[str, str] = Field(default_factory=dict)


class GroupSeed(_Model):
    name: str
    container: str = "local"
    properties: dict[str, str] = Field(default_factory=dict)


class CatalogSeed(_Model):
    name: str
    type: str
    properties: dict[str, str] = Field(default_factory=dict)


class Config(_Model):
    ams: AmsConfig = Field(default_factory=AmsConfig)
    containers: list[ContainerConfig] = Field(default_factory=lambda: [ContainerConfig(name="local")])
    # the embedded default: one group whose local container keeps one Spark optimizer running
    resource_groups: list[GroupSeed] = Field(
        default_factory=lambda: [GroupSeed(name="default", properties={"instances": "1"})], alias="resource-groups"
    )
    catalogs: list[CatalogSeed] | None = None

    @property
    def data_dir(self) -> Path:
        return self.ams.data_dir.expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.ams.database.url or f"sqlite:///{self.data_dir / 'lakewarden.db'}"

    @property
    def container_names(self) -> list[str]:
        return [c.name for c in self.containers]

    @property
    def container_impls(self) -> dict[str, str]:
        """Each container's name and its container-impl (local, spark, external)."""
        return {c.name: c.container_impl for c in self.containers}

    def container(self, name: str) -> ContainerConfig | None:
        return next((c for c in self.containers if c.name == name), None)

    def catalog_seeds(self) -> list[CatalogSeed]:
        """The catalogs ensured at start. By default: `lake`, lakewarden's own REST catalog (type
        internal), and `local`, an Iceberg SQL catalog on SQLite; both inside the data directory."""
        if self.catalogs is not None:
            return list(self.catalogs)
        local = self.data_dir
        return [
            CatalogSeed(name="lake", type="internal", properties={"warehouse": str(local / "warehouse" / "lake")}),
            CatalogSeed(
                name="local",
                type="sql",
                properties={"uri": f"sqlite:///{local / 'catalog.db'}", "warehouse": str(local / "warehouse")},
            ),
        ]


def _apply_env(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    top_level = {"ams", "containers", "resource-groups", "catalogs"}
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [part.lower().replace("_", "-") for part in name[len(ENV_PREFIX) :].split("__")]
        if path[0] not in top_level:
            continue  # other LAKEWARDEN_* variables (LAKEWARDEN_SERVER, …) are not config keys
        node = raw
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = yaml.safe_load(value) if value != "" else ""
    return raw


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the YAML file (optional) and the environment; raise InvalidField naming a bad key."""
    environ = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    if path is not None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise InvalidField("config", f"{file} does not exist")
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise InvalidField("config", f"{file} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise InvalidField("config", f"{file} must hold a mapping at the top level")
        raw = loaded
    raw = _apply_env(raw, environ)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise InvalidField.of_validation(exc, "config") from exc
    if config.ams.ha.enabled and not (config.ams.database.url or "").startswith("postgresql"):
        raise InvalidField("ams.ha.enabled", "needs a PostgreSQL system database in ams.database.url")
    return config
