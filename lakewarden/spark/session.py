"""One way to build a SparkSession with Iceberg configured for registered catalogs: tests, the optimizer and
the demo writer all call `build_spark_session`.

Jars come from the set-up step (`jars.py`: the pinned Maven artifacts), or from spark-submit's command line.
Tables on S3 are read and written through StorageFileIO with what the catalog gives each table: the REST catalog's
storage profile and vended credentials, or an SQL or REST catalog's `s3.*` properties. It reaches S3 through
Iceberg's S3FileIO, or through Hadoop's S3A for the catalogs whose tables Hadoop reads (`filesystem`, `hive`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from lakewarden.domain.catalogs import THROUGH_LAKEWARDEN, CatalogSpec, storage_timeout_ms
from lakewarden.spark.jars import ensure_spark_jars
from lakewarden.spark.tls import java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# what a session carries for another table format's engine (artifacts.toml's `engine` jars): its SQL extensions
# (its procedures' `CALL`s) and the settings its code requires. Hudi's writers and table services ship records
# with Kryo and its registrar, as Hudi's Spark guide sets up every session
ENGINE_EXTENSIONS = {
    "hudi": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "paimon": "org.apache.paimon.spark.extensions.PaimonSparkSessionExtensions",
}
ENGINE_CONF = {
    "hudi": {
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    },
}
# how a REST catalog client authenticates (Iceberg's RESTSessionCatalog / OAuth2 properties)
AUTH_PROPERTIES = frozenset({"token", "credential", "scope", "oauth2-server-uri", "token-refresh-enabled"})
STORAGE_FILE_IO = "io.lakewarden.iceberg.StorageFileIO"  # jars.py compiles it from java/
# StorageFileIO's client of S3: Iceberg's S3FileIO, or Hadoop's S3A where Hadoop is the catalog's contract
S3_CLIENT = "lakewarden.s3-client"
THROUGH_HADOOP = frozenset({"hive", "filesystem"})


def jdbc_properties(sqlalchemy_url: str) -> dict[str, str]:
    """Iceberg JdbcCatalog properties for the SQLAlchemy URL pyiceberg's SqlCatalog uses."""
    url = make_url(sqlalchemy_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {"uri": f"jdbc:sqlite:{url.database}"}
    if backend == "postgresql":
        props = {"uri": f"jdbc:postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database}"}
        if url.username:
            props["jdbc.user"] = url.username
        if url.password:
            props["jdbc.password"] = str(url.password)
        return props
    raise ValueError(f"no JDBC mapping for {backend} catalogs")


def catalog_conf(spec: CatalogSpec, spark_name: str | None = None) -> dict[str, str]:
    """`spark.sql.catalog.<name>.*` settings for one registered catalog (under `spark_name` if given)."""
    prefix = f"spark.sql.catalog.{spark_name or spec.name}"
    props = dict(spec.connection_properties)
    bounds = storage_bounds(storage_timeout_ms(spec.properties))
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    if spec.type == "sql":
        props.update(jdbc_properties(props["uri"]))
        # pyiceberg created the catalog tables (V1 layout); Spark must not try on SQLite (it locks).
        props.setdefault("jdbc.init-catalog-tables", "false")
        props.setdefault("jdbc.schema-version", "V1")
        conf[f"{prefix}.type"] = "jdbc"
    elif spec.type == "rest":
        conf[f"{prefix}.type"] = "rest"
    elif spec.type in THROUGH_LAKEWARDEN:  # lakewarden's REST catalog: the catalog's name is the warehouse
        conf[f"{prefix}.type"] = "rest"
        auth = {k: v for k, v in props.items() if k in AUTH_PROPERTIES}  # token=… or credential=id:secret
        props = {"uri": props["uri"], "warehouse": spec.name, **auth}
        # an S3 warehouse's files are reached with the credentials the catalog vends for each table
        props["header.X-Iceberg-Access-Delegation"] = "vended-credentials"
    elif spec.type == "hive":  # Iceberg's HiveCatalog with pyspark's own Hive client; it locks each commit
        conf[f"{prefix}.type"] = "hive"
    elif spec.type == "filesystem":  # Iceberg's HadoopCatalog: tables are directories under the warehouse
        conf[f"{prefix}.type"] = "hadoop"
        props["warehouse"] = hadoop_location(props["warehouse"])
        # it versions tables through Hadoop's FileSystem itself (not the FileIO): the catalog's own S3 settings
        props.update(hadoop_s3_overrides(props))
    else:
        raise ValueError(f"Spark cannot open {spec.type} catalogs")
    props.setdefault("io-impl", STORAGE_FILE_IO)  # a catalog's own `io-impl` stays its own
    if spec.type in THROUGH_HADOOP:
        props.setdefault(S3_CLIENT, "s3a")
    for key, value in bounds.items():
        props.setdefault(key, value)  # a catalog's own `hadoop.fs.s3a.*`, `s3.retry.*`, `http-client.*` stay its own
    for key, value in props.items():
        conf[f"{prefix}.{key}"] = value
    return conf


def storage_bounds(timeout_ms: int) -> dict[str, str]:
    """The catalog options that end an operation on a store that stopped answering (connections refused, or
    accepted and never answered) within the catalog's storage timeout, for S3FileIO (`s3.retry.*`,
    `http-client.apache.*`) and for S3A (`hadoop.fs.s3a.*`).

    The clients' defaults retry for far longer (S3A: the SDK's own 20 attempts inside each of S3A's, each waiting up
    to 200 s on a silent socket). Here either client's attempts fit half the timeout, B: five attempts of
    (connect B/24 + silence B/8), with back-offs of 1 + 2 + 4 + 8 times a base of B/240 (S3A: 1.5 x that), < B.
    S3FileIO backs off from throttling and from other failures alike (BoundedS3Clients), up to 16 times its base
    for a 503 SlowDown; S3A's own SDK does not retry and S3A retries throttling nine times. The other half of the
    timeout is StorageFileIO's (`StoreSilence`): Iceberg retries a failed operation itself (a metadata refresh twenty
    times), and once the store has been silent for the whole timeout it ends the task."""
    budget = timeout_ms // 2
    establish = min(5_000, budget // 24)
    silence = min(200_000, max(500, budget // 8))
    interval = max(10, min(500, budget // 240))
    throttle = max(10, min(100, budget // 1_200))  # 503 SlowDown: nine waits of 0.5-1.5 x 2^k x this
    return {
        "lakewarden.storage.timeout-ms": str(timeout_ms),
        "http-client.apache.connection-timeout-ms": str(establish),
        "http-client.apache.socket-timeout-ms": str(silence),
        "s3.retry.num-retries": "4",
        "s3.retry.min-wait-ms": str(interval),
        "s3.retry.max-wait-ms": str(interval * 16),
        "hadoop.fs.s3a.attempts.maximum": "0",
        "hadoop.fs.s3a.connection.establish.timeout": str(establish),
        "hadoop.fs.s3a.connection.timeout": str(silence),
        "hadoop.fs.s3a.retry.limit": "4",
        "hadoop.fs.s3a.retry.interval": f"{interval}ms",
        "hadoop.fs.s3a.retry.throttle.limit": "9",
        "hadoop.fs.s3a.retry.throttle.interval": f"{throttle}ms",
        "hadoop.fs.s3a.lakewarden.timeout-ms": str(timeout_ms),
    }


def hadoop_location(location: str) -> str:
    """A location as Hadoop's FileSystem opens it: S3 through S3A (`s3a://`), a bare path as a local file."""
    for scheme in ("s3://", "s3n://"):
        if location.startswith(scheme):
            return "s3a://" + location[len(scheme) :]
    return f"file:{location}" if location.startswith("/") else location


def hadoop_s3_overrides(props: Mapping[str, str]) -> dict[str, str]:
    """Iceberg's SparkCatalog passes `hadoop.*` catalog options to the catalog's Hadoop configuration: S3A settings
    of this catalog's own, from its `s3.*` properties, on a FileSystem not shared with other catalogs (Hadoop caches
    one per bucket and user, whatever its endpoint or keys)."""
    if not props.get("warehouse", "").startswith("s3a://"):
        return {}
    out = {"hadoop.fs.s3a.impl.disable.cache": "true"}
    mapping = {
        "s3.endpoint": "fs.s3a.endpoint",
        "s3.access-key-id": "fs.s3a.access.key",
        "s3.secret-access-key": "fs.s3a.secret.key",
        "s3.session-token": "fs.s3a.session.token",
        "s3.region": "fs.s3a.endpoint.region",
    }
    for key, hadoop_key in mapping.items():
        if props.get(key):
            out[f"hadoop.{hadoop_key}"] = props[key]
    if props.get("s3.path-style-access"):
        out["hadoop.fs.s3a.path.style.access"] = props["s3.path-style-access"]
    if props.get("s3.session-token"):
        out["hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return out


def build_spark_session(
    catalogs: Iterable[CatalogSpec] = (),
    master: str | None = None,
    app_name: str = "lakewarden",
    driver_memory: str = "2g",
    extra_conf: Mapping[str, str] | None = None,
    jvm_options: str = "",
    engines: Iterable[str] = (),
) -> SparkSession:
    """A SparkSession (created, or the active one extended) with Iceberg and the given catalogs. `jvm_options`
    go to the driver's JVM and the executors' (a JVM already running, under spark-submit, keeps its own).
    `engines`: other table formats' engines the session carries too (ENGINE_EXTENSIONS), their jars included."""
    from pyspark.sql import SparkSession

    engines = tuple(engines)
    conf: dict[str, str] = {
        "spark.sql.extensions": ",".join([ICEBERG_EXTENSIONS, *(ENGINE_EXTENSIONS[e] for e in engines)]),
        "spark.driver.memory": driver_memory,
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        # the console's progress bar is for a shell: its thread wakes five times a second for a screen nobody
        # watches (an optimizer, a server's jobs), and draws over a live view (the demo's)
        "spark.ui.showConsoleProgress": "false",
        # crash reports go to the temp dir, not into whatever directory Spark was started from
        "spark.driver.extraJavaOptions": f"-XX:ErrorFile={tempfile.gettempdir()}/lakewarden-hs_err_pid%p.log",
    }
    if not submitted():  # an application of its own (spark-submit) keeps its web UI: operators follow it there
        conf["spark.ui.enabled"] = "false"
    if submitted():
        pass  # spark-submit put the jars on its command line (`lakewarden setup-spark --submit-args`)
    else:
        jars = ensure_spark_jars(quiet=True)
        conf["spark.jars"] = jars.spark_jars
        # an engine's bundle goes on the JVMs' own class path, beside Spark's Avro: loaded by Spark's mutable
        # loader instead, Hudi's generated Avro classes are not found by Avro's reader of its log blocks
        bundles = [jar for e in engines for jar in jars.engine(e)]
        conf["spark.driver.extraClassPath"] = ":".join([jars.driver_classpath, *bundles])
        conf["spark.executor.extraClassPath"] = ":".join([jars.executor_classpath, *bundles])
    trusted = os.environ.get("LAKEWARDEN_TLS_CA")  # a lakewarden server's certificate (self-signed, often)
    if trusted:
        options = java_options(Path(trusted))
        conf["spark.driver.extraJavaOptions"] += f" {options}"
        conf["spark.executor.extraJavaOptions"] = options
    if jvm_options.strip():
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            conf[key] = f"{conf.get(key, '')} {jvm_options.strip()}".lstrip()
    for engine in engines:
        conf.update(ENGINE_CONF.get(engine, {}))
    for spec in catalogs:
        conf.update(catalog_conf(spec))
    conf.update(extra_conf or {})

    builder = SparkSession.builder.appName(app_name)
    if master is None and submitted():
        pass  # spark-submit chose the master
    else:
        master = master or os.environ.get("LAKEWARDEN_SPARK_MASTER", "local[2]")
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # stay on loopback; no hostname lookups
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # getOrCreate may reuse a running session: make sure it sees these catalogs too.
    configure_catalogs(spark, catalogs)
    spark.sparkContext.setLogLevel(os.environ.get("LAKEWARDEN_SPARK_LOG_LEVEL", "WARN"))
    return spark


def submitted() -> bool:
    """Whether this Python process was started by spark-submit (its JVM is already up, with a master)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def configure_catalogs(
    spark: SparkSession, catalogs: Iterable[CatalogSpec], spark_names: Mapping[str, str] | None = None
) -> None:
    """Add or redefine catalogs on a running session.

    Spark instantiates a catalog once per name and caches it; when a definition changes (a new
    warehouse, a new credential), the cache is reset so the next statement opens it afresh.
    """
    changed = False
    for spec in catalogs:
        for key, value in catalog_conf(spec, (spark_names or {}).get(spec.name)).items():
            if spark.conf.get(key, None) != value:
                spark.conf.set(key, value)
                changed = True
    if changed:
        spark._jsparkSession.sessionState().catalogManager().reset()
