"""The metadata files of lakewarden's internal catalogs, as the REST catalog serves them.

A metadata file never changes once written, so each is parsed once and kept, and so is its loadTable
response body, serialised once: in one LRU bounded by bytes (`ams.metadata-cache.max-size`; a parsed file
weighs about METADATA_BYTES_PER_JSON_BYTE times its JSON, tests/test_metadata_cache.py measures it, a body
its length). A commit drops the version it replaced, so what stays is each table's current metadata, not
its past. A new metadata file is named under its table's location; files written for a commit that lost
its swap are discarded.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from typing import cast

from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from lakewarden.domain.errors import WouldWait
from lakewarden.domain.lru import SizedLRU
from lakewarden.metadata.table_metadata import metadata_json, referenced_only

DEFAULT_MAX_BYTES = 256 * 1024**2
# a parsed TableMetadata, per byte of its JSON: an upper estimate, checked by tests/test_metadata_cache.py
METADATA_BYTES_PER_JSON_BYTE = 7
# the largest metadata (its JSON) a commit is staged on by the event loop (TableCommits.commit_table without
# `wait`): its serialisation, the largest part, takes about a millisecond at this size
LOOP_JSON_BYTES = 256 * 1024
NO_CONFIG = b', "config": {}}'  # the end of a loadTable body that tells the client nothing more
REFS = "#snapshots=refs"  # the cache key's suffix of a body with the referenced snapshots only


class MetadataFiles:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        # ("metadata", location) -> TableMetadata; ("body", location + variant) -> the start of a loadTable body
        # its bytes, hits, misses and evictions are the metrics'
        self.lru: SizedLRU[tuple[str, str], object] = SizedLRU(max_bytes)

    def read(self, io: FileIO, location: str, kept_at_most: int | None = None) -> TableMetadata:
        """The metadata file at `location`, parsed. With `kept_at_most` (JSON bytes: the event loop's commits)
        only a version kept here and about that size or smaller is given, else WouldWait: reading and parsing
        a file, or staging a commit on a large one, is a worker thread's work."""
        if kept_at_most is not None:
            kept = self.lru.peek(("metadata", location))
            if kept is None or kept[1] > kept_at_most * (METADATA_BYTES_PER_JSON_BYTE + 1):
                raise WouldWait("the table's metadata is not kept, or is large")
        cached = self.lru.get(("metadata", location))
        if cached is not None:
            return cast(TableMetadata, cached)
        with (
            io.new_input(location).open() as stream,
            Compressor.get_compressor(location).stream_decompressor(stream) as plain,
        ):
            text = plain.read().decode("utf-8")
        metadata = TableMetadataUtil.parse_raw(text)
        self._keep(location, metadata, len(text))
        return metadata

    def _keep(self, location: str, metadata: TableMetadata, json_length: int, per_byte: int = 0) -> None:
        self.lru.put(("metadata", location), metadata, json_length * (METADATA_BYTES_PER_JSON_BYTE + per_byte))

    def written(self, location: str, metadata: TableMetadata, text: str, replaced: str | None = None) -> None:
        """A metadata file just written by a commit, and its JSON: kept without reading it back; the version it
        `replaced` is no longer any table's current metadata, and is dropped."""
        if replaced is not None and replaced != location:
            for key in (("metadata", replaced), ("body", replaced), ("body", replaced + REFS)):
                self.lru.pop(key)
        # a version the server serialised also holds its snapshots' JSON (for the next commit's metadata_json)
        self._keep(location, metadata, len(text), per_byte=1)
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
            return _ending(self._remember_body(location, metadata_json(referenced_only(metadata)), REFS), tail)
        return _ending(self._remember_body(location, metadata_json(metadata)), tail)

    def cached_body(self, location: str, snapshots: str = "all", tail: bytes = NO_CONFIG) -> bytes | None:
        body = self.lru.get(("body", location + (REFS if snapshots == "refs" else "")))
        return _ending(body, tail) if isinstance(body, bytes) else None

    def _remember_body(self, location: str, metadata_text: str, variant: str = "") -> bytes:
        """The body kept is whole, ending with NO_CONFIG: the answer itself when the client is told nothing more
        (a local warehouse), sent as it is: putting a body together for every load would copy it and allocate
        what is freed once it is sent, a share of a cached load's time on the event loop."""
        body = f'{{"metadata-location": {json.dumps(location)}, "metadata": {metadata_text}'.encode() + NO_CONFIG
        self.lru.put(("body", location + variant), body, len(body))
        return body

    @staticmethod
    def new_location(metadata: TableMetadata, version: int) -> str:
        return f"{metadata.location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"

    @staticmethod
    def discard(io: FileIO, locations: Sequence[str]) -> None:
        for location in locations:
            with contextlib.suppress(OSError):
                io.delete(location)


def _ending(body: bytes, tail: bytes) -> bytes:
    """`body` (kept, ending with NO_CONFIG) with `tail` instead, in one copy when they differ."""
    if tail == NO_CONFIG:
        return body
    return b"".join((memoryview(body)[: -len(NO_CONFIG)], tail))
