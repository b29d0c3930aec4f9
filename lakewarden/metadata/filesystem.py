"""Iceberg's Hadoop (filesystem) catalog, read as Iceberg's HadoopCatalog reads it: pyiceberg has none.

A namespace is a directory; a table is a directory whose `metadata` holds `v<N>.metadata.json` files (plain or
gzip'd). Its current version is `version-hint.text`, moved forward while `v<N+1>` exists (a writer may have died
between its rename and the hint), else the highest listed. Read-only: optimizers commit with Iceberg's own
HadoopCatalog in Spark."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from pyarrow import fs as pafs
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import StaticTable, Table

from lakewarden.domain.storage import S3_SCHEMES

METADATA_SUFFIXES = (".metadata.json", ".gz.metadata.json", ".metadata.json.gz")
VERSION = re.compile(r"^v([0-9]+)\..*")
MAX_DEPTH = 8


def pyarrow_filesystem(warehouse: str, properties: dict[str, str]) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a warehouse and the warehouse's path on it, reached with the catalog's `s3.*`
    properties (named as Iceberg's S3FileIO and pyiceberg name them)."""
    parts = urlsplit(warehouse)
    if parts.scheme in S3_SCHEMES:
        options: dict[str, Any] = {}
        endpoint = properties.get("s3.endpoint")
        if endpoint:
            endpoint_parts = urlsplit(endpoint)
            options["endpoint_override"] = endpoint_parts.netloc or endpoint
            options["scheme"] = endpoint_parts.scheme or "https"
        if properties.get("s3.access-key-id"):
            options["access_key"] = properties["s3.access-key-id"]
            options["secret_key"] = properties.get("s3.secret-access-key", "")
            if properties.get("s3.session-token"):
                options["session_token"] = properties["s3.session-token"]
        options["region"] = properties.get("s3.region", "us-east-1")
        return pafs.S3FileSystem(**options), f"{parts.netloc}{parts.path}".rstrip("/")
    return pafs.LocalFileSystem(), (parts.path if parts.scheme == "file" else warehouse).rstrip("/")


class FilesystemTables:
    """The tables under a warehouse directory, as Iceberg's HadoopCatalog lists and loads them."""

    def __init__(self, name: str, properties: dict[str, str]) -> None:
        self.name = name
        self.properties = properties
        self.warehouse = properties["warehouse"].rstrip("/")
        self.fs, self.root = pyarrow_filesystem(self.warehouse, properties)
        scheme = urlsplit(self.warehouse).scheme
        # metadata locations as Iceberg's HadoopCatalog writes them: `file:/…` on local disk, the warehouse's own
        # scheme and bucket on S3
        self._uri_prefix = self.warehouse[: len(self.warehouse) - len(self.root)] if scheme in S3_SCHEMES else "file:"

    # ---- paths

    def _path(self, levels: tuple[str, ...]) -> str:
        return "/".join((self.root, *levels))

    def _uri(self, path: str) -> str:
        return f"{self._uri_prefix}{path}"

    def _directories(self, path: str) -> list[str]:
        return [
            info.base_name
            for info in self.fs.get_file_info(pafs.FileSelector(path))
            if info.type == pafs.FileType.Directory
        ]

    def _metadata_names(self, table_path: str) -> list[str]:
        selector = pafs.FileSelector(f"{table_path}/metadata", allow_not_found=True)
        return [info.base_name for info in self.fs.get_file_info(selector) if info.type == pafs.FileType.File]

    def _is_table(self, path: str) -> bool:
        return any(name.endswith(".metadata.json") for name in self._metadata_names(path))

    def _is_directory(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type == pafs.FileType.Directory)

    # ---- the catalog calls lakewarden's services make

    def list_namespaces(self, namespace: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        path = self._path(tuple(namespace))
        if not self._is_directory(path):
            if namespace:
                raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist in {self.name}")
            return []  # a warehouse no writer has created yet holds nothing
        return [(*namespace, child) for child in self._directories(path) if not self._is_table(f"{path}/{child}")]

    def list_tables(self, namespace: tuple[str, ...]) -> list[tuple[str, ...]]:
        path = self._path(tuple(namespace))
        if not namespace or not self._is_directory(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist in {self.name}")
        return [(*namespace, child) for child in self._directories(path) if self._is_table(f"{path}/{child}")]

    def metadata_location(self, identifier: tuple[str, ...]) -> str:
        """The table's current metadata file, found as HadoopTableOperations finds it; NoSuchTableError if none."""
        table_path = self._path(tuple(identifier))
        names = set(self._metadata_names(table_path))
        version = self._hinted_version(table_path, names)
        if version is None:
            raise NoSuchTableError(f"{'.'.join(identifier)} is not a table of {self.name}")
        while self._file_of(version + 1, names) is not None:
            version += 1
        found = self._file_of(version, names)
        if found is None:
            raise NoSuchTableError(f"{'.'.join(identifier)}: metadata version {version} is missing")
        return self._uri(f"{table_path}/metadata/{found}")

    def _hinted_version(self, table_path: str, names: set[str]) -> int | None:
        if "version-hint.text" in names:
            try:
                with self.fs.open_input_stream(f"{table_path}/metadata/version-hint.text") as stream:
                    text = stream.read().decode("utf-8").strip()
                version = int(text)
                if self._file_of(version, names) is not None:
                    return version
            except (OSError, ValueError):
                pass  # unreadable or half-written hint: recover from the listing, as Iceberg does
        versions = [
            int(m.group(1)) for name in names if (m := VERSION.match(name)) and self._file_of(int(m.group(1)), names)
        ]
        return max(versions) if versions else None

    @staticmethod
    def _file_of(version: int, names: set[str]) -> str | None:
        for suffix in METADATA_SUFFIXES:
            if f"v{version}{suffix}" in names:
                return f"v{version}{suffix}"
        return None

    def load_table(self, identifier: tuple[str, ...]) -> Table:
        location = self.metadata_location(tuple(identifier))
        return StaticTable.from_metadata(location, self.properties)

    def table_locations(self) -> list[tuple[str, str, str]]:
        """(database, table, metadata location) of every table: a listing of each table's metadata directory."""
        return list(self._walk(()))

    def _walk(self, namespace: tuple[str, ...]) -> Iterator[tuple[str, str, str]]:
        if len(namespace) > MAX_DEPTH:
            return
        path = self._path(namespace)
        if not self._is_directory(path):
            return
        for child in self._directories(path):
            child_path = f"{path}/{child}"
            if self._is_table(child_path):
                if namespace:
                    try:
                        yield ".".join(namespace), child, self.metadata_location((*namespace, child))
                    except NoSuchTableError:
                        continue  # dropped while listed
            else:
                yield from self._walk((*namespace, child))

    def close(self) -> None:
        pass
