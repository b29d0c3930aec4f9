"""Jars by Maven coordinates, pinned by checksum (`artifacts.toml`), fetched into a local cache laid out as a Maven
repository: from a repository over HTTP(S) (Maven Central, or a company mirror), or from a folder of jars.

A jar is kept only when its SHA-256 is the pinned one; once verified, a marker beside it (its size and modification
time) lets the next call trust it without reading it again, so a second run does no I/O beyond a stat per jar."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

PINS = Path(__file__).resolve().parent / "artifacts.toml"
PLACEMENTS = ("spark", "class-path", "driver", "engine")
REPOSITORY_ENV = "LAKEWARDEN_MAVEN_REPO"
DOWNLOAD_TIMEOUT_S = 60.0  # per socket operation, not per file: a large jar on a slow mirror still arrives
CHUNK = 1 << 20

Log = Callable[[str], None]


class ArtifactError(RuntimeError):
    """An artifact could not be had with its pinned checksum; the message names it and says why."""


@dataclass(frozen=True)
class Artifact:
    """One pinned jar: `group:name:version`, its SHA-256, and where Spark gets it (see artifacts.toml)."""

    group: str
    name: str
    version: str
    sha256: str
    placement: str
    engine: str | None = None

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}.jar"

    @property
    def repository_path(self) -> str:
        """Its path in a Maven repository's layout, below the repository's root."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.file_name}"


@dataclass(frozen=True)
class Pins:
    repository: str
    artifacts: tuple[Artifact, ...]

    def placed(self, placement: str, engine: str | None = None) -> tuple[Artifact, ...]:
        return tuple(a for a in self.artifacts if a.placement == placement and a.engine == engine)

    def named(self, name: str) -> Artifact:
        for artifact in self.artifacts:
            if artifact.name == name:
                return artifact
        raise ArtifactError(f"{PINS.name} pins no artifact named {name}")


def load_pins(path: Path = PINS) -> Pins:
    """The pinned list, checked: every entry a full coordinate with a SHA-256 and a known placement."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ArtifactError(f"cannot read {path}: {exc}") from exc
    artifacts = []
    for index, entry in enumerate(document.get("artifact", [])):
        where = f"{path.name}, artifact {index + 1}"
        parts = str(entry.get("coordinate", "")).split(":")
        if len(parts) != 3 or not all(parts):
            raise ArtifactError(f"{where}: coordinate must be group:name:version, not {entry.get('coordinate')!r}")
        digest = str(entry.get("sha256", ""))
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ArtifactError(f"{where} ({parts[1]}): sha256 must be 64 lowercase hex digits")
        placement = entry.get("placement")
        if placement not in PLACEMENTS:
            raise ArtifactError(f"{where} ({parts[1]}): placement must be one of {', '.join(PLACEMENTS)}")
        engine = entry.get("engine")
        if (placement == "engine") != bool(engine):
            raise ArtifactError(f"{where} ({parts[1]}): an `engine` is named exactly when placement is engine")
        artifacts.append(Artifact(parts[0], parts[1], parts[2], digest, placement, engine))
    repository = document.get("repository", {}).get("url")
    if not repository:
        raise ArtifactError(f"{path.name}: [repository] url is missing")
    return Pins(str(repository), tuple(artifacts))


def repository_url(pins: Pins) -> str:
    return (os.environ.get(REPOSITORY_ENV) or pins.repository).rstrip("/")


def sha256_of(path: Path) -> str:
    return _digest(path, "sha256")


def _digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


class MavenCache:
    """A local repository of pinned jars (`root/<group path>/<name>/<version>/<name>-<version>.jar`)."""

    def __init__(self, root: Path, log: Log) -> None:
        self.root = root
        self.log = log

    def path(self, artifact: Artifact) -> Path:
        return self.root / artifact.repository_path

    def resolve(self, artifacts: Iterable[Artifact], repository: str, source_dir: Path | None = None) -> list[Path]:
        """Each artifact's verified local path, fetching what the cache lacks from `source_dir` if given, else from
        `repository`."""
        wanted = list(artifacts)
        missing = [a for a in wanted if not self._verified(a)]
        if missing and source_dir is not None:
            self._copy_from(missing, source_dir)
        elif missing:
            for number, artifact in enumerate(missing, 1):
                self._download(artifact, repository, f"{number}/{len(missing)}")
        return [self.path(a) for a in wanted]

    def _marker(self, artifact: Artifact) -> Path:
        return self.path(artifact).with_name(artifact.file_name + ".verified")

    def _verified(self, artifact: Artifact) -> bool:
        jar, marker = self.path(artifact), self._marker(artifact)
        try:
            stat = jar.stat()
            recorded = json.loads(marker.read_text())
        except (OSError, ValueError):
            return False
        return bool(recorded == {"sha256": artifact.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})

    def _accept(self, artifact: Artifact, candidate: Path, origin: str) -> None:
        """Put a candidate file in place if its checksum is the pinned one; else refuse it, naming both."""
        actual = sha256_of(candidate)
        if actual != artifact.sha256:
            candidate.unlink(missing_ok=True)
            raise ArtifactError(
                f"{artifact.coordinate} from {origin} has SHA-256 {actual}, not the pinned {artifact.sha256}: "
                "a different file than the one pinned (a mirror serving another build, or a corrupt download)"
            )
        target = self.path(artifact)
        # a new inode, never a rewrite in place: a running JVM may have the old jar mapped
        os.replace(candidate, target)
        stat = target.stat()
        marker = self._marker(artifact)
        staging = marker.with_name(f".{marker.name}.{os.getpid()}.tmp")
        staging.write_text(json.dumps({"sha256": artifact.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}))
        os.replace(staging, marker)

    def staging(self, artifact: Artifact) -> Path:
        """A partial file beside the artifact's place (same file system: moved in place atomically), this process's."""
        target = self.path(artifact)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.with_name(f".{target.name}.{os.getpid()}.part")

    def _copy_from(self, artifacts: list[Artifact], source_dir: Path) -> None:
        if not source_dir.is_dir():
            raise ArtifactError(f"--from {source_dir}: not a directory")
        found: dict[str, Path] = {}
        names = {a.file_name for a in artifacts}
        for candidate in source_dir.rglob("*.jar"):
            if candidate.name in names and candidate.is_file():
                found.setdefault(candidate.name, candidate)
        absent = [a.coordinate for a in artifacts if a.file_name not in found]
        if absent:
            raise ArtifactError(f"--from {source_dir}: no jar for {', '.join(absent)} (looked for {', '.join(names)})")
        for artifact in artifacts:
            staging = self.staging(artifact)
            shutil.copyfile(found[artifact.file_name], staging)
            self._accept(artifact, staging, str(found[artifact.file_name]))
            self.log(f"took {artifact.coordinate} from {found[artifact.file_name]}")

    def _download(self, artifact: Artifact, repository: str, counter: str) -> None:
        url = f"{repository}/{artifact.repository_path}"
        staging = self.staging(artifact)
        self.log(f"[{counter}] fetching {artifact.coordinate} from {repository}")
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, staging.open("wb") as sink:
                size = int(response.headers.get("Content-Length") or 0)
                done, reported = 0, 0
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    sink.write(chunk)
                    done += len(chunk)
                    if size and done - reported >= 64 * CHUNK:
                        reported = done
                        self.log(f"[{counter}] {artifact.name}: {done >> 20} of {size >> 20} MiB")
        except urllib.error.HTTPError as exc:
            staging.unlink(missing_ok=True)
            raise ArtifactError(f"{artifact.coordinate}: {url} answered {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            staging.unlink(missing_ok=True)
            reason = getattr(exc, "reason", exc)
            raise ArtifactError(
                f"{artifact.coordinate}: cannot fetch {url} ({reason}); set {REPOSITORY_ENV} to a reachable mirror, "
                "or use `lakewarden setup-spark --from DIR` with the jars in DIR"
            ) from exc
        self._accept(artifact, staging, url)


def print_checksums(pins: Pins, cache: MavenCache, out: Callable[[str], None]) -> None:
    """For upgrading a pin: fetch each artifact whose cached copy does not match, check it against the repository's
    own SHA-1, and print its SHA-256. Nothing is put in the cache."""
    repository = repository_url(pins)
    for artifact in pins.artifacts:
        url = f"{repository}/{artifact.repository_path}"
        staging = cache.staging(artifact)
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, staging.open("wb") as sink:
                shutil.copyfileobj(response, sink, CHUNK)
            with urllib.request.urlopen(url + ".sha1", timeout=DOWNLOAD_TIMEOUT_S) as response:
                published = response.read().decode().split()[0].strip()
            sha1 = _digest(staging, "sha1")
            if sha1 != published:
                raise ArtifactError(f"{artifact.coordinate}: SHA-1 {sha1} is not the repository's {published}")
            out(f"{artifact.coordinate} sha256 = {sha256_of(staging)}")
        except urllib.error.URLError as exc:
            raise ArtifactError(f"{artifact.coordinate}: cannot fetch {url} ({exc})") from exc
        finally:
            staging.unlink(missing_ok=True)
