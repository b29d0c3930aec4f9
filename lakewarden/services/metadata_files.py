"""The metadata files of lakewarden's internal catalogs, as the REST catalog serves them.

A metadata file never changes once written, so each is parsed once and kept (the most recently used
ones), and so is its loadTable response body, serialised once. A new metadata file is named under
its table's location; files written for a commit that lost its swap are discarded.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence

from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

from lakewarden.metadata.table_metadata import metadata_json, referenced_only

NO_CONFIG = b', "config": {}}'  # the end of a loadTable body that tells the client nothing more
REFS = "#snapshots=refs"  # the cache key's suffix of a body with the referenced snapshots only


class MetadataFiles:
    def __init__(self, max_metadata: int = 2000, max_bodies: int = 500) -> None:
        self.max_metadata = max_metadata
        self.max_bodies = max_bodies
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._bodies: OrderedDict[str, bytes] = OrderedDict()  # loadTable bodies (all but their end) by location
        self._lock = threading.Lock()

    def read(self, io: FileIO, location: str) -> TableMetadata:
        with self._lock:
            cached = self._metadata.get(location)
            if cached is not None:
                self._metadata.move_to_end(location)
                return cached
        metadata = FromInputFile.table_metadata(io.new_input(location))
        self._keep(location, metadata)
        return metadata

    def _keep(self, location: str, metadata: TableMetadata) -> None:
        with self._lock:
            self._metadata[location] = metadata
            while len(self._metadata) > self.max_metadata:
                self._metadata.popitem(last=False)

    def written(self, location: str, metadata: TableMetadata, text: str) -> None:
        """A metadata file just written by a commit, and its JSON: kept without reading it back."""
        self._keep(location, metadata)
        self._remember_body(location, text)

    def response_body(
        self, location: str, metadata: TableMetadata, snapshots: str = "all", tail: bytes = NO_CONFIG
    ) -> bytes:
        """`{"metadata-location", "metadata", …}` as JSON: the part serialised once per metadata file (and, with
        `snapshots=refs`, the one with only the referenced snapshots, cached beside it), then `tail`, the
        rest of the object (`config` and maybe `storage-credentials`, which are not the file's)."""
        body = self.cached_body(location, snapshots, tail)
        if body is not None:
            return body
        if snapshots == "refs":
            return self._remember_body(location, metadata_json(referenced_only(metadata)), REFS) + tail
        return self._remember_body(location, metadata_json(metadata)) + tail

    def cached_body(self, location: str, snapshots: str = "all", tail: bytes = NO_CONFIG) -> bytes | None:
        with self._lock:
            stem = self._bodies.get(location + (REFS if snapshots == "refs" else ""))
        return None if stem is None else stem + tail

    def _remember_body(self, location: str, metadata_text: str, variant: str = "") -> bytes:
        stem = f'{{"metadata-location": {json.dumps(location)}, "metadata": {metadata_text}'.encode()
        with self._lock:
            self._bodies[location + variant] = stem
            while len(self._bodies) > self.max_bodies:
                self._bodies.popitem(last=False)
        return stem

    @staticmethod
    def new_location(metadata: TableMetadata, version: int) -> str:
        return f"{metadata.location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"

    @staticmethod
    def discard(io: FileIO, locations: Sequence[str]) -> None:
        for location in locations:
            with contextlib.suppress(OSError):
                io.delete(location)
