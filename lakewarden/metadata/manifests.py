"""Reading manifest lists and manifests, fast.

pyiceberg converts the Avro schema in every file's header to an Iceberg schema and resolves a reader
tree for it, file after file, although every manifest a writer produces carries the same schema;
for small manifests that is most of the cost. Here the resolved reader is kept per (header schema,
read schema), so each distinct schema is resolved once. Entries come back as pyiceberg's own
ManifestFile / ManifestEntry objects, with the same inheritance of snapshot ids and sequence numbers.
"""

from __future__ import annotations

import threading
from typing import Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import AvroFile
from pyiceberg.avro.resolver import resolve_reader
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    DEFAULT_READ_VERSION,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)
from pyiceberg.table.snapshots import Snapshot

from lakewarden._compat.pyiceberg import inherit_from_manifest

_ENTRY_TYPES: dict[int, Any] = {-1: ManifestEntry, 2: DataFile}
# positions of the fields of format version 3 in a DataFile read with read_version=3 (pyiceberg 0.12 has no
# accessors for them)
_V3_POSITIONS = {f.name: i for i, f in enumerate(DATA_FILE_TYPE[3].fields)}


def v3_field(data_file: DataFile, name: str) -> Any:
    """A field of format version 3 (`first_row_id`, `referenced_data_file`, `content_offset`,
    `content_size_in_bytes`) of a file read with read_version=3; None when the file has none."""
    position = _V3_POSITIONS[name]
    try:
        return data_file[position]
    except IndexError:
        return None


FILE_PATH_FIELD_ID = 2147483546  # the file_path column of position-delete files


def referenced_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position-delete file (or deletion vector) applies to, when it names it or its
    file_path bounds are equal; None when it may apply to several."""
    named = v3_field(delete_file, "referenced_data_file")
    if named:
        return str(named)
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_FIELD_ID)
    if lower is not None and lower == upper:
        try:
            return bytes(lower).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


_ENTRY_ENUMS: dict[int, Any] = {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}
_LIST_TYPES: dict[int, Any] = {-1: ManifestFile, 508: PartitionFieldSummary}
_LIST_ENUMS: dict[int, Any] = {517: ManifestContent}
_resolved: dict[tuple[str, int], tuple[Any, Any]] = {}
_lock = threading.Lock()


class _ResolvedOnceAvroFile(AvroFile[Any]):
    """pyiceberg's AvroFile, with the schema conversion and reader resolution shared across files.

    Relies on AvroFile's internals (pinned: pyiceberg==0.12.0): its `__enter__` steps and the attributes
    `input_file`, `decoder`, `header`, `schema`, `reader`, `read_schema`, `read_types`, `read_enums`,
    `_read_header`. tests/test_table_metadata.py compares what it reads with pyiceberg's own reading."""

    def __enter__(self) -> _ResolvedOnceAvroFile:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        key = (str(self.header.meta.get("avro.schema")), id(self.read_schema))
        with _lock:
            cached = _resolved.get(key)
        if cached is None:
            schema = self.header.get_schema()
            reader = resolve_reader(schema, self.read_schema or schema, self.read_types, self.read_enums)
            cached = (schema, reader)
            with _lock:
                if len(_resolved) > 256:  # a handful of schemas in practice; never grow without bound
                    _resolved.clear()
                _resolved[key] = cached
        self.schema, self.reader = cached
        if not self.read_schema:
            self.read_schema = self.schema
        return self


def manifests(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The manifests in the snapshot's manifest list."""
    read_schema = MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION]
    with _ResolvedOnceAvroFile(io.new_input(snapshot.manifest_list), read_schema, _LIST_TYPES, _LIST_ENUMS) as reader:
        return list(reader)


def entries(
    io: FileIO, manifest: ManifestFile, discard_deleted: bool = True, read_version: int = DEFAULT_READ_VERSION
) -> list[ManifestEntry]:
    """The manifest's entries (live ones only, unless `discard_deleted` is False). `read_version` 3 also reads
    the fields of format version 3 (a deletion vector's referenced data file and offset; None in older files)."""
    read_schema = MANIFEST_ENTRY_SCHEMAS[read_version]
    with _ResolvedOnceAvroFile(io.new_input(manifest.manifest_path), read_schema, _ENTRY_TYPES, _ENTRY_ENUMS) as reader:
        return [
            inherit_from_manifest(entry, manifest)
            for entry in reader
            if not discard_deleted or entry.status != ManifestEntryStatus.DELETED
        ]
