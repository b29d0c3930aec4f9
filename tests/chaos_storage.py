"""Where the chaos harness's tables live (tests/chaos.py), and how their storage fails.

- `LocalStorage`: the server's default catalogs in its data directory. Its fault, `storage-fails`, turns a
  table's directory immutable for a moment (`chattr +i`: not even root writes there).
- `ObjectStorage`: both catalogs on an S3 server (moto, with IAM authentication on), every client (the
  server, its optimizers, the writers' Spark and pyiceberg) reaching it through a proxy that can slow or refuse
  the requests under one table's prefix (tests/netproxy.py). Its faults: `storage-refuses` (S3's 503 SlowDown or
  500 InternalError to every request on the table's objects) and `storage-slows` (each such request held
  0.2 to 1.5 s). The checks list the bucket directly, past the proxy.

Both name a file the same way whatever a snapshot calls it (`key`), so that the files a table's metadata names
compare with the files its storage holds.
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import yaml

from tests.chaos_writers import local_path
from tests.netproxy import LatencyProxy
from tests.s3 import BUCKET, REGION, S3Server, s3_server


class Storage(Protocol):
    faults: tuple[str, ...]
    catalogs: str  # the server's `catalogs:` section ('' for its defaults)
    secrets: dict[str, dict[str, str]]  # per catalog, the properties the API shows redacted

    def begin(self, fault: str, location: str, rng: random.Random) -> str:
        """Starts `fault` on the table at `location`; says how (for the outcome)."""
        ...

    def end(self, fault: str, location: str) -> None: ...

    def key(self, location: str) -> str:
        """One name for a file, however a snapshot spells its location."""
        ...

    def files(self, location: str) -> set[str]:
        """The files under a table's location, as `key` names them."""
        ...


class LocalStorage:
    faults: tuple[str, ...] = ("storage-fails",)
    catalogs = ""
    secrets: dict[str, dict[str, str]] = {}  # noqa: RUF012  # read only

    def begin(self, fault: str, location: str, rng: random.Random) -> str:
        _immutable(Path(local_path(location)), True)
        return ""

    def end(self, fault: str, location: str) -> None:
        _immutable(Path(local_path(location)), False)

    def key(self, location: str) -> str:
        return local_path(location)

    def files(self, location: str) -> set[str]:
        # Hadoop's local file system keeps a `.<name>.crc` beside what it writes and hides it from listings, as
        # Iceberg's orphan cleanup lists: those are not counted
        root = Path(local_path(location))
        return {str(p) for p in root.rglob("*") if p.is_file() and not p.name.endswith(".crc")}


def _immutable(path: Path, on: bool) -> None:
    subprocess.run(["chattr", "-R", "+i" if on else "-i", str(path)], capture_output=True, check=False)


class ObjectStorage:
    faults: tuple[str, ...] = ("storage-refuses", "storage-slows")

    def __init__(self, s3: S3Server, proxy: LatencyProxy, data_dir: Path) -> None:
        self.s3 = s3
        self.proxy = proxy
        profile = {
            "s3.endpoint": proxy.endpoint,
            "s3.region": REGION,
            "s3.path-style-access": "true",
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
        }
        lake = {
            "warehouse": f"s3://{BUCKET}/chaos/lake",
            **profile,
            "credentials.role-arn": s3.role_arn,  # writers get temporary credentials for their table
            "credentials.sts-endpoint": proxy.endpoint,
        }
        local = {"uri": f"sqlite:///{data_dir / 'catalog.db'}", "warehouse": f"s3://{BUCKET}/chaos/local", **profile}
        self.catalogs = yaml.safe_dump(
            {
                "catalogs": [
                    {"name": "lake", "type": "internal", "properties": lake},
                    {"name": "local", "type": "sql", "properties": local},
                ]
            }
        )
        self.secrets = {"local": {"s3.secret-access-key": s3.secret_access_key}}

    def _prefix(self, location: str) -> str:
        """The request path of the objects under a table's location (path style), ending in `/` so that a
        neighbour whose name merely starts the same (`t1`, `t10`) is not hit."""
        return "/" + self.key(location).rstrip("/") + "/"

    def begin(self, fault: str, location: str, rng: random.Random) -> str:
        if fault == "storage-refuses":
            status = rng.choice((503, 500))
            self.proxy.refuse(self._prefix(location), status)
            return f": {status}"
        seconds = rng.uniform(0.2, 1.5)
        self.proxy.slow(self._prefix(location), seconds)
        return f": +{seconds:.1f}s a request"

    def end(self, fault: str, location: str) -> None:
        self.proxy.heal(self._prefix(location))

    def key(self, location: str) -> str:
        """`bucket/key` (`s3://` and `s3a://` name the same object)."""
        parts = urlsplit(location)
        return f"{parts.netloc}/{parts.path.lstrip('/')}"

    def files(self, location: str) -> set[str]:
        bucket, _, prefix = self.key(location).partition("/")
        return {f"{bucket}/{key}" for key in self.s3.keys(prefix.rstrip("/") + "/")}


@contextmanager
def object_storage(data_dir: Path) -> Iterator[ObjectStorage]:
    """An S3 server of the test process and the proxy every client reaches it through."""
    with s3_server() as s3:
        parts = urlsplit(s3.endpoint)
        proxy = LatencyProxy(parts.hostname or "127.0.0.1", parts.port or 80, 0.0)
        try:
            yield ObjectStorage(s3, proxy, data_dir)
        finally:
            proxy.close()
