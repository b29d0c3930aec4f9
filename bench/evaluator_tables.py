"""Evaluator scale: 50,000 tables of which 5,000 changed, evaluated in one pass of the evaluator service.

The tables live in lakewarden's own catalog (pointers in a SQLite system database, metadata and
manifests under a local warehouse), each with its own metadata file, manifest list and manifest of
small data files (paths only: evaluation reads metadata, never data). lakewarden manages all of them
and has evaluated them (the steady state). Then 5,000 get a new commit — a new manifest, manifest
list and metadata file, the pointer swapped and the table runtime refreshed, as the metadata
service's events do — and the evaluator service's pass is timed: it must find the changed tables
among the 50,000 and evaluate each (its metadata and both of its manifests read cold, the verdict
stored, pending tables moved). Goal on 2 cores: <= 30 s.

    .venv/bin/python bench/evaluator_tables.py [--tables 50000] [--changed 5000] [--files 8]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pyiceberg.io import load_file_io
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.sorting import SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import append_snapshot, bar_chart, write
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.tables import TableIdentifier, TableSnapshot, effective_config
from lakewarden.metadata.table_metadata import new_metadata, write_metadata
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import TableLoads
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.services.tables.catalog_access import InternalTables
from lakewarden.services.tables.evaluation import TableEvaluator, _config_hash
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import rest_catalog as pointer_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, utcnow
from lakewarden.store.models import TableRuntimeRow

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "day", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))


def _internal(db: Database) -> InternalTables:
    """The internal catalog's tables as the server's evaluator reads them, in process."""
    return InternalTables(db, TableLoads(db, Warehouses(db), MetadataFiles(), TableHeads(), CredentialVendor()))


def _commit(io: Any, location: str, metadata: Any, files: int, seed: int) -> tuple[Any, int]:
    """A fast append of `files` small data files: a manifest, a manifest list, the metadata updated."""
    rng = random.Random(seed)
    data = []
    for k in range(files):
        day = f"d{k % 2}"
        data.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=f"{location}/data/day={day}/{uuid.uuid4()}.parquet",
                file_format=FileFormat.PARQUET,
                partition=Record(day),
                record_count=100,
                file_size_in_bytes=rng.randint(4_000, 400_000),
                spec_id=0,
            )
        )
    manifest = f"{location}/metadata/{uuid.uuid4()}-m0.avro"
    manifest_list = f"{location}/metadata/snap-{uuid.uuid4()}.avro"
    updated = append_snapshot(io, metadata, SPEC, SCHEMA, manifest, manifest_list, data, seed)
    return updated, int(updated.current_snapshot_id)


def build(args: tuple[str, int, int, int]) -> list[tuple[int, str, int]]:
    """Tables first..last-1: each a metadata file with one snapshot of `files` small files."""
    warehouse, first, last, files = args
    io = load_file_io({}, warehouse)
    built = []
    for i in range(first, last):
        location = f"{warehouse}/db/t{i:05d}"
        metadata, snapshot_id = _commit(io, location, new_metadata(SCHEMA, SPEC, SortOrder(), location, {}), files, i)
        metadata_location = f"{location}/metadata/00001-{uuid.uuid4()}.metadata.json"
        write_metadata(io, metadata_location, metadata)
        built.append((i, metadata_location, snapshot_id))
    return built


def change(args: tuple[str, list[tuple[int, str]], int]) -> list[tuple[int, str, str, int]]:
    """A new commit of `files` more small files to each table."""
    warehouse, tables, files = args
    io = load_file_io({}, warehouse)
    changed = []
    for i, metadata_location in tables:
        location = f"{warehouse}/db/t{i:05d}"
        metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
        metadata, snapshot_id = _commit(io, location, metadata, files, i + 1_000_000)
        new_location = f"{location}/metadata/00002-{uuid.uuid4()}.metadata.json"
        write_metadata(io, new_location, metadata)
        changed.append((i, metadata_location, new_location, snapshot_id))
    return changed


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    size = -(-n // parts)
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=50_000)
    parser.add_argument("--changed", type=int, default=5_000)
    parser.add_argument("--files", type=int, default=8, help="data files per commit")
    parser.add_argument("--threads", type=int, default=4, help="the evaluator's thread-count")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        warehouse = f"{tmp}/warehouse"
        started = time.perf_counter()
        with ProcessPoolExecutor(2) as pool:
            built = [
                t
                for part in pool.map(build, [(warehouse, a, b, args.files) for a, b in chunks(args.tables, 16)])
                for t in part
            ]
        print(f"built {len(built):,} tables' metadata in {time.perf_counter() - started:.0f} s", flush=True)

        db = Database(f"sqlite:///{tmp}/lakewarden.db")
        db.migrate()
        spec = CatalogSpec("bench", "internal", {"warehouse": warehouse})
        config = effective_config({}, {})
        evaluated: dict[str, Any] = {"config_hash": _config_hash(config), "type": None, "reasons": []}
        with db.write() as session:  # lakewarden manages every table and has evaluated it: the steady state
            catalog_store.create_catalog(session, spec)
            pointer_store.create_namespace(session, "bench", "db", {})
            for i, metadata_location, snapshot_id in built:
                pointer_store.create_pointer(session, "bench", "db", f"t{i:05d}", metadata_location)
                record = table_store.add_table(session, TableIdentifier("bench", "db", f"t{i:05d}"), "default", config)
                runtime = record.runtime
                runtime.metadata_location, runtime.current_snapshot_id = metadata_location, snapshot_id
                runtime.evaluated_snapshot_id, runtime.evaluated_at = snapshot_id, utcnow()
                runtime.evaluation = {**evaluated, "metadata_location": metadata_location}
                runtime.next_evaluation_at = None  # nothing time-based to wait for
        print(f"registered {len(built):,} tables in {time.perf_counter() - started:.0f} s", flush=True)

        picked = sorted(random.Random(7).sample([(i, loc) for i, loc, _ in built], args.changed))
        with ProcessPoolExecutor(2) as pool:
            changed = [
                c
                for part in pool.map(change, [(warehouse, picked[a:b], 4) for a, b in chunks(len(picked), 16)])
                for c in part
            ]
        with db.write() as session:  # what a REST catalog commit and its event do to pointer and runtime
            for i, old, new, snapshot_id in changed:
                name = f"t{i:05d}"
                assert pointer_store.swap_pointer(session, "bench", "db", name, old, 0, new)
                runtime = table_store.get_table(session, TableIdentifier("bench", "db", name)).runtime
                table_store.record_table_snapshot(
                    session, runtime, TableSnapshot(new, snapshot_id, {}, {}), "default", config
                )
        print(f"committed to {len(changed):,} of them", flush=True)

        evaluator = TableEvaluator(db, 3600, args.threads, 3600, internal=_internal(db))
        evaluation_started = time.perf_counter()
        evaluator.run_once()
        seconds = time.perf_counter() - evaluation_started
        with db.read() as session:
            rows = session.query(TableRuntimeRow).all()
            done = sum(1 for r in rows if r.evaluated_snapshot_id == r.current_snapshot_id)
            fresh = sum(1 for r in rows if (r.evaluation or {}).get("data_files") is not None)
            pending = sum(1 for r in rows if r.status_code == 600)
        db.dispose()

    assert done == args.tables and fresh == args.changed, (done, fresh)
    rate = args.changed / seconds
    print(
        f"evaluator pass over {args.tables:,} tables, {args.changed:,} changed: {seconds:.1f} s "
        f"({rate:.0f} tables/s; {pending:,} turned pending; goal <= 30 s)"
    )
    write(
        "evaluator_tables",
        {
            "tables": args.tables,
            "changed": args.changed,
            "files_per_commit": args.files,
            "threads": args.threads,
            "pass_seconds": round(seconds, 2),
            "tables_per_second": round(rate, 1),
            "turned_pending": pending,
            "goal_seconds": 30,
            "met": seconds <= 30,
        },
    )
    bar_chart(
        "evaluator_tables",
        f"One evaluator pass: {args.tables:,} tables, {args.changed:,} changed",
        {"evaluator pass": seconds},
        "seconds",
        goal=30,
    )


if __name__ == "__main__":
    main()
