"""Reading Hudi tables under a base path (a `hudi` catalog): which tables there are, and what each one is.

A `hudi` catalog's `warehouse` is a directory of tables: a table is a directory with `.hoodie/hoodie.properties`,
either right under the warehouse (database `default`) or one level down (the level's name is its database).
The timeline and the file slices are read from the names of the files on storage (domain/hudi.py parses them);
`hudi` (hudi-rs) opens each table too, so a table it cannot read is reported as such, and gives its schema.
Local paths only: a warehouse on object storage is refused when the catalog is registered.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lakewarden.domain.hudi import FileSlice, HudiTableState, Instant, slices_of, timeline_of
from lakewarden.domain.tables import TableSnapshot
from lakewarden.metadata.local import local_warehouse

HOODIE = ".hoodie"
PROPERTIES = "hoodie.properties"
PARTITION_MARKER = ".hoodie_partition_metadata"
DEFAULT_DATABASE = "default"


class NotAHudiTable(Exception):
    """The directory is not a Hudi table lakewarden can read (the message says why)."""


def is_table(path: Path) -> bool:
    return (path / HOODIE / PROPERTIES).is_file()


def find_tables(warehouse: str) -> dict[tuple[str, str], Path]:
    """The tables under the warehouse, by (database, table)."""
    root = local_warehouse(warehouse)
    found: dict[tuple[str, str], Path] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        if is_table(entry):
            found[(DEFAULT_DATABASE, entry.name)] = entry
            continue
        for table in sorted(entry.iterdir()):
            if table.is_dir() and is_table(table):
                found[(entry.name, table.name)] = table
    return found


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file (`key=value` or `key:value` lines, `#` and `!` comments, backslash escapes)."""
    properties = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key: list[str] = []
        value: list[str] = []
        target, escaped = key, False
        for char in line:
            if escaped:
                target.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif target is key and char in "=:":
                target = value
            else:
                target.append(char)
        properties["".join(key).strip()] = "".join(value).strip()
    return properties


def _instant_files(table: Path) -> list[str]:
    hoodie = table / HOODIE
    names = [p.name for p in hoodie.iterdir() if p.is_file()]
    timeline = hoodie / "timeline"  # layout 2 (table version 8)
    if timeline.is_dir():
        names += [p.name for p in timeline.iterdir() if p.is_file()]
    return names


def read_timeline(table: Path) -> list[Instant]:
    """The table's active timeline, each instant once in its newest state (domain/hudi.timeline_of)."""
    return timeline_of(_instant_files(table))


def change_token(table: Path) -> str:
    """What changes whenever the table's timeline does: the explorer's `metadata_location` for a Hudi table."""
    names = sorted(_instant_files(table))
    newest = max((n for n in names if n[:1].isdigit()), default="")
    return f"{table}/{HOODIE}#{len(names)}:{newest}"


def _partitions(table: Path) -> list[tuple[str, Path]]:
    """The table's partitions (relative paths; "" for a table without), each a directory Hudi marked."""
    found = []
    for folder, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        here = Path(folder)
        if PARTITION_MARKER in files:  # a table without partitions has its marker at its base path
            found.append(("" if here == table else str(here.relative_to(table)), here))
    return sorted(found)


def read_table(table: Path) -> HudiTableState:
    """What the table is, from its properties, its timeline and its files; NotAHudiTable when it cannot be read."""
    try:
        properties = read_properties(table / HOODIE / PROPERTIES)
    except (OSError, UnicodeDecodeError) as exc:
        raise NotAHudiTable(f"cannot read {HOODIE}/{PROPERTIES}: {exc}") from exc
    table_type = properties.get("hoodie.table.type", "")
    if table_type not in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        raise NotAHudiTable(f"hoodie.table.type is {table_type!r}, not COPY_ON_WRITE or MERGE_ON_READ")
    slices: list[FileSlice] = []
    partitions = []
    for name, folder in _partitions(table):
        partitions.append(name)
        files = [(p.name, p.stat().st_size) for p in folder.iterdir() if p.is_file()]
        slices += slices_of(name, files)
    return HudiTableState(
        name=properties.get("hoodie.table.name", table.name),
        table_type=table_type,
        properties=properties,
        timeline=timeline_of(_instant_files(table)),
        slices=slices,
        partitions=partitions,
    )


def opened(table: Path) -> Any:
    """The table as `hudi` opens it: raises when hudi-rs cannot read it."""
    from hudi import HudiTableBuilder

    return HudiTableBuilder.from_base_uri(str(table)).build()


def schema_of(table: Path) -> list[dict[str, str]]:
    """The table's columns as hudi-rs reads them (without Hudi's meta columns)."""
    schema = opened(table).get_schema()
    return [{"name": f.name, "type": str(f.type)} for f in schema]


def snapshot(table: Path) -> TableSnapshot:
    """What the explorer keeps of a Hudi table: its change token, properties and a summary."""
    state = read_table(table)
    try:
        opened(table)
    except Exception as exc:  # hudi-rs refuses it: the table is listed with the error
        raise NotAHudiTable(f"hudi cannot open it: {exc}") from exc
    latest = state.latest_slices()
    writes = state.completed()
    summary: dict[str, Any] = {
        "format": "hudi",
        "table-type": state.table_type,
        "table-version": state.properties.get("hoodie.table.version"),
        "location": str(table),
        "partitions": len(state.partitions),
        "file-groups": len(latest),
        "data-files": sum(1 for s in latest if s.base_file is not None),
        "log-files": sum(len(s.log_files) for s in latest),
        "files-size-bytes": sum(s.size for s in latest),
        "instants": len(state.timeline),
        "last-commit": writes[-1].timestamp if writes else None,
    }
    return TableSnapshot(
        metadata_location=change_token(table),
        current_snapshot_id=None,
        properties=dict(state.properties),
        summary=summary,
    )
