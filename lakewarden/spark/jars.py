"""The Spark jar set-up step (`lakewarden setup-spark`): the pinned Maven artifacts of `artifacts.toml` in a local
cache (`jars_dir()`), and lakewarden's own Java classes compiled against them. A second run with the same inputs
does nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden._compat.pyspark import spark_home
from lakewarden.spark.maven import ArtifactError, MavenCache, Pins, load_pins, repository_url, sha256_of

JAVA_JAR = "lakewarden-java.jar"  # lakewarden's own Java classes (java/), compiled here
JAVA_SOURCES = Path(__file__).resolve().parent / "java"
ICEBERG_RUNTIME = "iceberg-spark-runtime-3.5_2.12"


class JarSetupError(RuntimeError):
    """The jar set-up step could not produce a working set of jars; the message says why."""


@dataclass(frozen=True)
class SparkJars:
    """The jars a SparkSession with Iceberg needs, by where Spark gets them (see artifacts.toml's placements)."""

    spark: tuple[str, ...]  # spark.jars: Spark ships them (Iceberg's runtime, S3A, lakewarden's own classes)
    class_path: tuple[str, ...]  # the JVMs' own class path: the AWS SDK bundles
    driver: tuple[str, ...]  # the driver's class path only: JDBC drivers
    engines: dict[str, tuple[str, ...]] = field(default_factory=dict)  # Hudi's and Paimon's bundles, by engine

    @property
    def jars(self) -> tuple[str, ...]:
        """Every jar of an Iceberg session."""
        return (*self.spark, *self.class_path, *self.driver)

    @property
    def spark_jars(self) -> str:
        """For `spark.jars` (driver and executors; Spark ships them)."""
        return ",".join(self.spark)

    @property
    def driver_classpath(self) -> str:
        """The JDBC drivers (only the driver talks to a catalog) and the SDK bundles: on the JVM's own class path
        (not Spark's mutable loader), so the SQLite driver's native library is bound once, by the loader that lives
        longest, and the bundles, which refer to nothing of Spark's, are not copied for every local session."""
        return ":".join((*self.driver, *self.class_path))

    @property
    def executor_classpath(self) -> str:
        """The SDK bundles, on the executors' own class path (local executors share the driver's JVM)."""
        return ":".join(self.class_path)

    @property
    def shipped_jars(self) -> str:
        """Every jar an application on a cluster needs shipped (`--jars`): the bundles too, the JDBC drivers not."""
        return ",".join((*self.spark, *self.class_path))

    def engine(self, name: str) -> tuple[str, ...]:
        """The bundle(s) a session for `name`'s tables adds (hudi, paimon)."""
        if name not in self.engines:
            raise JarSetupError(f"artifacts.toml pins no jar for the {name} engine")
        return self.engines[name]


def jars_dir() -> Path:
    explicit = os.environ.get("LAKEWARDEN_JARS_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return (cache / "lakewarden" / "jars").resolve()


def maven_coordinates(pins: Pins | None = None) -> list[str]:
    """The coordinates an Iceberg session needs, for `--packages` on a cluster that reaches a Maven repository."""
    pins = pins or load_pins()
    return [a.coordinate for a in pins.artifacts if a.placement != "engine"]


def iceberg_version(pins: Pins | None = None) -> str:
    return (pins or load_pins()).named(ICEBERG_RUNTIME).version


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise JarSetupError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")


def _install(source: Path, target: Path) -> None:
    """Put a file in place atomically, as a new inode, and only when its bytes changed.

    A running JVM maps these jars; rewriting them in place (as a plain copy does) changes the pages under it and
    crashes it. os.replace leaves its mapping intact.
    """
    if target.is_file() and sha256_of(target) == sha256_of(source):
        return
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copy2(source, staging)
    os.replace(staging, target)


class _Log:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[lakewarden setup-spark] {message}", file=sys.stderr, flush=True)


def _java_jar(out: Path, classpath: list[Path], log: _Log) -> Path:
    """lakewarden's Java classes (StorageFileIO, the rewrite's bookkeeping, DeletionVectors), compiled from java/
    when their sources (or what they compile against) changed."""
    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.relative_to(JAVA_SOURCES).as_posix().encode() + b"\0" + source.read_bytes())
    for jar in classpath:
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    stamp = digest.hexdigest()[:16]
    jar = out / JAVA_JAR
    stamp_file = out / (JAVA_JAR + ".stamp")
    if jar.is_file() and stamp_file.is_file() and stamp_file.read_text().strip() == stamp:
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise JarSetupError("javac (a JDK 17) is needed to compile lakewarden's Java classes: install openjdk-17-jdk")
    log("compiling lakewarden's Java classes (storage with each table's settings, rewrites, deletion vectors)")
    with tempfile.TemporaryDirectory(prefix="lakewarden-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        path = ":".join([*(str(p) for p in classpath), str(spark_home() / "jars" / "*")])
        _run([javac, "-nowarn", "--release", "11", "-cp", path, "-d", str(classes), *map(str, sources)])
        built = Path(tmp) / JAVA_JAR
        with zipfile.ZipFile(built, "w") as archive:
            for name in [
                "META-INF/MANIFEST.MF",
                *sorted(str(p.relative_to(classes)) for p in classes.rglob("*.class")),
            ]:
                data = (
                    b"Manifest-Version: 1.0\r\n\r\n" if name.startswith("META-INF") else (classes / name).read_bytes()
                )
                info = zipfile.ZipInfo(name, (2000, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
        _install(built, jar)
    stamp_file.write_text(stamp + "\n")
    return jar


def ensure_spark_jars(quiet: bool = False, source_dir: Path | None = None) -> SparkJars:
    """Fetch (or reuse) the pinned jars and build lakewarden's own; `source_dir` takes the jars from a folder instead
    of the Maven repository (a machine with no network)."""
    log = _Log(quiet)
    out = jars_dir()
    try:
        pins = load_pins()
        cache = MavenCache(out / "maven", log)
        paths = cache.resolve(pins.artifacts, repository_url(pins), source_dir)
        resolved = dict(zip(pins.artifacts, paths, strict=True))
    except ArtifactError as exc:
        raise JarSetupError(str(exc)) from exc

    def placed(placement: str, engine: str | None = None) -> tuple[str, ...]:
        return tuple(str(resolved[a]) for a in pins.placed(placement, engine))

    spark, class_path = placed("spark"), placed("class-path")
    own = _java_jar(out, [Path(j) for j in (*spark, *class_path)], log)
    engines = {a.engine: placed("engine", a.engine) for a in pins.artifacts if a.engine}
    return SparkJars((*spark, str(own)), class_path, placed("driver"), engines)


def main() -> int:
    """`python -m lakewarden.spark.jars [--quiet]`, as bin/bootstrap runs it: progress on stderr only when there is
    work; the jars listed unless --quiet."""
    try:
        jars = ensure_spark_jars()
    except JarSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if "--quiet" not in sys.argv:
        print("\n".join(jars.jars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
