"""A million tables in lakewarden's own catalog, 1% of them changing a minute: do the explorer and evaluator stay
cheap, and the API's list pages quick?

**The tables** (generated, not committed one by one): `--tables` tables in `--namespaces` namespaces of an
internal catalog `bench`, each with a metadata file of its own (its uuid and location; one snapshot of 8 data
files of 128 MiB: healthy, nothing to optimize), whose manifest list and manifest it shares with the tables of
its template (`--templates`): evaluating a table reads its metadata and manifests, never its data. Pointers,
managed tables and their verdicts are written straight into the system database (SQLite) as lakewarden leaves
them: every table evaluated, idle, no time-based trigger due.

**The run.** A real `lakewarden server` on that data directory. First one explorer pass over the whole catalog
(`POST /catalogs/bench/refresh`: every pointer compared with what lakewarden recorded). Then for `--minutes` the
bench changes `--percent` of the tables a minute (in batches every second), out of band: each gets a new
metadata file with one more snapshot, its pointer is swapped and its runtime moved to the new snapshot, as the
commit's event would. The evaluator must find them among the million and evaluate each (the new manifest list
and one-entry manifest read, its verdict stored). Then the API's list pages are timed.

Reported: the evaluator's and explorer's CPU (`lakewarden_service_cpu_seconds_total`) as a share of one core over
the changing minutes; how far the evaluator lags (tables changed but not yet evaluated, sampled); the explorer's
full pass; a minute's worth of changes landing at once and the time until every one is evaluated; p50/p99 of
`/api/v1/tables` pages (by offset at the start, middle and end; one namespace; by status) and the overview.
Goals: evaluator + explorer < 25% of a core; a full pass < 5 min; list pages < 200 ms. Maintenance runs
on the default schedules, its looks generated as a steady state leaves them (each table's last look at a moment of
the last interval, nothing to do until it changes): its trigger's CPU is reported apart, with the processes it
created for the changed tables (no optimizer runs them here).

    .venv/bin/python bench/million_tables.py [--tables 1000000] [--namespaces 1000] [--percent 1] [--minutes 5]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from pyiceberg.io import load_file_io
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType
from sqlalchemy import func, insert, select, update

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, append_snapshot, bar_chart, percentile, running_server, write
from lakewarden.config import Config
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.processes import Action
from lakewarden.domain.tables import TableStatus, effective_config
from lakewarden.metadata.table_metadata import metadata_json, new_metadata
from lakewarden.services.composition import maintenance_schedules
from lakewarden.services.maintenance.trigger import MaintenanceTrigger, schedules_fingerprint
from lakewarden.services.tables.evaluation import _config_hash
from lakewarden.services.tables.explorer import defaults_fingerprint
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import rest_catalog as pointer_store
from lakewarden.store import service_state
from lakewarden.store.database import Database, utcnow
from lakewarden.store.models import IcebergTableRow, ProcessRow, TableIdentifierRow, TableRuntimeRow

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
PLACE = "/placeholder-location"  # replaced by each table's location
BIG = 128 * 1024 * 1024  # the target size: these files are not small, nothing to optimize
NAMESPACE_UUID = uuid.UUID("6f1c3a52-0d1e-4c55-9a53-2f4b8f6a9d10")


def _snapshot(io: Any, shared: str, metadata: Any, files: int, seed: int, tag: str) -> Any:
    """`metadata` with one more snapshot of `files` data files of 128 MiB, its manifest and manifest list written
    under `shared` (the template's files)."""
    data = []
    for k in range(files):
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=f"{shared}/data/{tag}-{k}.parquet",
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=1_000_000,
            file_size_in_bytes=BIG,
        )
        data_file.spec_id = 0
        data.append(data_file)
    manifest, manifest_list = f"{shared}/{tag}-m0.avro", f"{shared}/{tag}-snap.avro"
    return append_snapshot(io, metadata, PartitionSpec(), SCHEMA, manifest, manifest_list, data, seed)


def templates(warehouse: str, count: int) -> list[dict[str, Any]]:
    """Per template: the metadata JSON of its first version and of its changed one (one more snapshot), with
    the placeholder location and uuid to replace, and their snapshot ids."""
    io = load_file_io({}, warehouse)
    made = []
    for k in range(count):
        shared = f"{warehouse}/shared/t{k}"
        first = _snapshot(io, shared, new_metadata(SCHEMA, PartitionSpec(), SortOrder(), PLACE, {}), 8, k, "a")
        second = _snapshot(io, shared, first, 1, 1_000_000 + k, "b")
        made.append(
            {
                "uuid": str(first.table_uuid),
                "first": metadata_json(first),
                "second": metadata_json(second),
                "first_id": first.current_snapshot_id,
                "second_id": second.current_snapshot_id,
            }
        )
    return made


def table_uuid(i: int) -> str:
    return str(uuid.uuid5(NAMESPACE_UUID, f"t{i}"))


def location_of(warehouse: str, namespaces: int, i: int) -> tuple[str, str, str]:
    """(namespace, table name, table location)."""
    namespace = f"ns{i % namespaces:04d}"
    return namespace, f"t{i:07d}", f"{warehouse}/{namespace}/t{i:07d}"


def metadata_text(template: dict[str, Any], version: str, i: int, location: str) -> str:
    return str(template[version]).replace(template["uuid"], table_uuid(i)).replace(PLACE, location)


def write_tables(args: tuple[str, int, int, int, list[dict[str, Any]]]) -> list[str]:
    """Tables first..last-1: each its metadata file (in its namespace's directory); returns their locations."""
    warehouse, namespaces, first, last, made = args
    written = []
    for i in range(first, last):
        namespace, name, location = location_of(warehouse, namespaces, i)
        path = f"{warehouse}/{namespace}/{name}-00001.metadata.json"
        Path(path).write_text(metadata_text(made[i % len(made)], "first", i, location))
        written.append(path)
    return written


def register(
    db: Database, warehouse: str, count: int, namespaces: int, made: list[dict[str, Any]], now: datetime
) -> None:
    """Pointers, managed tables, verdicts and maintenance looks as lakewarden leaves them: every table evaluated
    and idle, nothing to maintain until it changes."""
    config = effective_config({}, {})
    spec = CatalogSpec("bench", "internal", {"warehouse": warehouse})
    with db.write() as session:
        # the schedules the looks below were made with: a start with the same ones reads no table
        service_state.put_state(session, MaintenanceTrigger.STATE, schedules_fingerprint(SCHEDULES))
        catalog_store.create_catalog(session, spec)
        # as a refresh that loaded every table records it: the next loads only tables that moved
        catalog_store.record_refresh(session, "bench", None, defaults_fingerprint(spec))
        for n in range(namespaces):
            pointer_store.create_namespace(session, "bench", f"ns{n:04d}", {})
    for start in range(0, count, 20_000):
        pointers, identifiers, runtimes = [], [], []
        for i in range(start, min(count, start + 20_000)):
            namespace, name, _ = location_of(warehouse, namespaces, i)
            metadata_location = f"{warehouse}/{namespace}/{name}-00001.metadata.json"
            snapshot_id = made[i % len(made)]["first_id"]
            pointers.append(
                {
                    "catalog_name": "bench",
                    "namespace": namespace,
                    "table_name": name,
                    "metadata_location": metadata_location,
                    "version": 1,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            identifiers.append(
                {
                    "table_id": i + 1,
                    "catalog_name": "bench",
                    "db_name": namespace,
                    "table_name": name,
                    "format": "iceberg",
                    "created_at": now,
                }
            )
            runtimes.append(
                {
                    "table_id": i + 1,
                    "status_code": int(TableStatus.IDLE),
                    "status_changed_at": now,
                    "optimizing_group": "default",
                    "config": config,
                    "summary": {},
                    "metadata_location": metadata_location,
                    "current_snapshot_id": snapshot_id,
                    "last_refreshed_at": now,
                    "evaluated_snapshot_id": snapshot_id,
                    "evaluated_at": now,
                    "evaluation": {"config_hash": _config_hash(config), "type": None, "reasons": []},
                    # the maintenance trigger's last looks, spread over the last interval as a steady state leaves
                    # them: one snapshot, nothing to do until the table changes
                    "maintenance": looks(i, now, "none"),
                    "next_maintenance_at": None,
                }
            )
        with db.write() as session:
            session.execute(insert(IcebergTableRow), pointers)
            session.execute(insert(TableIdentifierRow), identifiers)
            session.execute(insert(TableRuntimeRow), runtimes)


SCHEDULES = maintenance_schedules(Config.model_validate({}))  # the server's defaults, as the bench runs it
LOOKED = [Action.EXPIRE_SNAPSHOTS, Action.CLEAN_DANGLING_DELETE_FILES, Action.REWRITE_MANIFESTS]  # on by default


def looks(i: int, now: datetime, found: str) -> dict[str, dict[str, str | None]]:
    """Table i's maintenance looks, each at a moment of the last interval (the same for a table's every call):
    `found` "none" (only a change brings work), or "changed" (as a new snapshot leaves them)."""
    entries: dict[str, dict[str, str | None]] = {}
    for action in LOOKED:
        checked = (now - SCHEDULES[action][1] * random.Random(i * 7 + len(action)).random()).isoformat()
        entries[action.value] = {"checked": checked, "next": checked if found == "changed" else None}
    return entries


class Changes:
    """Commits, out of band, to `per_minute` tables a minute (each table at most once: its second version)."""

    def __init__(
        self,
        db: Database,
        warehouse: str,
        namespaces: int,
        made: list[dict[str, Any]],
        count: int,
        registered: datetime,
    ) -> None:
        self.db, self.warehouse, self.namespaces, self.made = db, warehouse, namespaces, made
        self.registered = registered
        self.order = random.Random(7).sample(range(count), count)
        self.done = 0
        self.stop = threading.Event()

    def commit(self, tables: list[int]) -> None:
        rows = []
        for i in tables:
            namespace, name, location = location_of(self.warehouse, self.namespaces, i)
            path = f"{self.warehouse}/{namespace}/{name}-00002.metadata.json"
            template = self.made[i % len(self.made)]
            Path(path).write_text(metadata_text(template, "second", i, location))
            rows.append((i, namespace, name, path, template["second_id"]))
        now = utcnow()
        with self.db.write() as session:  # the pointer's swap, and what the commit's event does to the runtime
            for i, namespace, name, path, snapshot_id in rows:
                session.execute(
                    update(IcebergTableRow)
                    .where(
                        IcebergTableRow.catalog_name == "bench",
                        IcebergTableRow.namespace == namespace,
                        IcebergTableRow.table_name == name,
                    )
                    .values(metadata_location=path, version=2, updated_at=now)
                )
                session.execute(
                    update(TableRuntimeRow)
                    .where(TableRuntimeRow.table_id == i + 1)
                    # as record_table_snapshot does: the evaluation is due at once, maintenance after its interval
                    .values(
                        metadata_location=path,
                        current_snapshot_id=snapshot_id,
                        last_refreshed_at=now,
                        next_evaluation_at=now,
                        maintenance=looks(i, self.registered, "changed"),
                        next_maintenance_at=now,
                    )
                )
        self.done += len(rows)

    def next(self, n: int) -> list[int]:
        picked = self.order[self.done : self.done + n]
        return picked

    def run(self, per_minute: float) -> None:
        """Batches every second until stopped."""
        started = time.monotonic()
        while not self.stop.is_set():
            due = int(per_minute * (time.monotonic() - started) / 60) - self.done
            if due > 0:
                self.commit(self.next(due))
            self.stop.wait(1.0)


def lagging(db: Database) -> int:
    """Tables whose current snapshot is not the one evaluated."""
    with db.read() as session:
        return int(
            session.query(TableRuntimeRow)
            .filter(TableRuntimeRow.evaluated_snapshot_id.is_distinct_from(TableRuntimeRow.current_snapshot_id))
            .count()
        )


def maintenance_looks(db: Database, since: datetime) -> dict[str, int]:
    """Per action, the tables the maintenance trigger looked at since `since` (it read their metadata)."""
    found: dict[str, int] = {}
    with db.read() as session:
        rows = session.scalars(
            select(TableRuntimeRow.maintenance).where(TableRuntimeRow.next_maintenance_at.isnot(None))
        )
        for entries in rows:
            for action, entry in (entries or {}).items():
                if datetime.fromisoformat(entry["checked"]) > since:
                    found[action] = found.get(action, 0) + 1
    return found


def maintenance_processes(db: Database) -> dict[str, int]:
    """The maintenance processes the trigger created, by action (no optimizer runs them here)."""
    with db.read() as session:
        rows = session.execute(select(ProcessRow.action, func.count()).group_by(ProcessRow.action))
        return {action: int(count) for action, count in rows}


def service_cpu(api: httpx.Client) -> dict[str, float]:
    found = {}
    for line in api.get("/metrics").text.splitlines():
        if line.startswith("lakewarden_service_cpu_seconds_total{"):
            service = line.split('service="', 1)[1].split('"', 1)[0]
            found[service] = float(line.rsplit(" ", 1)[1])
    return found


def timed(api: httpx.Client, path: str, repeat: int = 20, **params: Any) -> dict[str, float]:
    """The first request apart (`cold_ms`: its rows may not be in the page cache yet), then p50/p99 of `repeat`."""
    times = []
    for _ in range(repeat + 1):
        started = time.perf_counter()
        response = api.get(path, params=params)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    cold, warm = times[0], times[1:]
    return {
        "cold_ms": round(cold, 1),
        "p50_ms": round(percentile(warm, 50), 1),
        "p99_ms": round(percentile(warm, 99), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=1_000)
    parser.add_argument("--templates", type=int, default=64)
    parser.add_argument("--percent", type=float, default=1.0, help="of the tables changing a minute")
    parser.add_argument("--minutes", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        run(args, tmp)


def run(args: argparse.Namespace, tmp: str) -> None:
    warehouse = f"{tmp}/warehouse"
    for n in range(args.namespaces):
        Path(f"{warehouse}/ns{n:04d}").mkdir(parents=True)
    started = time.perf_counter()
    made = templates(warehouse, args.templates)
    step = -(-args.tables // 32)
    with ProcessPoolExecutor(2) as pool:
        parts = [(warehouse, args.namespaces, a, min(args.tables, a + step), made) for a in range(0, args.tables, step)]
        for _ in pool.map(write_tables, parts):
            pass
    generated = time.perf_counter() - started
    print(f"{args.tables:,} tables' metadata written in {generated:.0f} s", flush=True)
    Path(f"{tmp}/data").mkdir(exist_ok=True)
    db = Database(f"sqlite:///{tmp}/data/lakewarden.db")
    db.migrate()
    registered = utcnow()
    register(db, warehouse, args.tables, args.namespaces, made, registered)
    print(f"registered in {time.perf_counter() - started - generated:.0f} s", flush=True)
    config = (
        f"catalogs: [{{name: bench, type: internal, properties: {{warehouse: '{warehouse}'}}}}]\n"
        "containers: [{name: outside, container-impl: external}]\n"
        "resource-groups: [{name: default, container: outside}]\n"
    )
    result: dict[str, Any] = {
        "tables": args.tables,
        "namespaces": args.namespaces,
        "percent": args.percent,
        "maintenance": "on, the default schedules (expiry, dangling deletes and manifests on every table)",
    }
    with running_server(tmp, config) as root:
        api = httpx.Client(base_url=root, headers={"Authorization": f"Bearer {admin_token(tmp)}"}, timeout=600)
        time.sleep(20)  # the server's start: its read-ahead warms the manifest cache from the newest tables
        pass_started = time.perf_counter()
        refreshed = api.post("/api/v1/catalogs/bench/refresh").json()
        result["explorer_full_pass_s"] = round(time.perf_counter() - pass_started, 2)
        result["explorer_full_pass_loaded"] = refreshed["loaded"]
        assert refreshed["tables"] == args.tables and refreshed["disposed"] == [], refreshed
        print(f"explorer full pass: {result['explorer_full_pass_s']} s, {refreshed['loaded']} tables read", flush=True)
        idle = service_cpu(api)
        idle_window = 30.0
        time.sleep(idle_window)
        idle_after = service_cpu(api)
        result["idle_cpu_share"] = round(
            sum(idle_after.get(k, 0) - idle.get(k, 0) for k in ("table-evaluator", "table-explorer")) / idle_window, 4
        )
        result["idle_maintenance_share"] = round(
            (idle_after.get("maintenance-trigger", 0) - idle.get("maintenance-trigger", 0)) / idle_window, 4
        )
        print(
            f"no change: evaluator + explorer {result['idle_cpu_share'] * 100:.1f}% of a core,"
            f" maintenance trigger {result['idle_maintenance_share'] * 100:.1f}%",
            flush=True,
        )

        changes = Changes(db, warehouse, args.namespaces, made, args.tables, registered)
        per_minute = args.tables * args.percent / 100
        writer = threading.Thread(target=changes.run, args=(per_minute,), daemon=True)
        steady_before = service_cpu(api)
        steady_started = time.monotonic()
        writer.start()
        lags = []
        while time.monotonic() - steady_started < args.minutes * 60:
            time.sleep(15)
            lags.append(lagging(db))
            print(f"  {changes.done:,} changed, {lags[-1]:,} waiting for the evaluator", flush=True)
        changes.stop.set()
        writer.join()
        steady_seconds = time.monotonic() - steady_started
        steady_after = service_cpu(api)
        spent = {k: steady_after.get(k, 0) - steady_before.get(k, 0) for k in steady_after}
        result["steady"] = {
            "seconds": round(steady_seconds),
            "changed": changes.done,
            "cpu_share": {k: round(v / steady_seconds, 4) for k, v in spent.items() if v > 0},
            "evaluator_and_explorer_share": round(
                (spent.get("table-evaluator", 0) + spent.get("table-explorer", 0)) / steady_seconds, 4
            ),
            "waiting_max": max(lags),
            "maintenance_looks": maintenance_looks(db, registered),
            "maintenance_processes": maintenance_processes(db),
        }
        print(f"steady: {json.dumps(result['steady'])}", flush=True)

        # a minute's worth of changes at once: how long until the evaluator has seen every one
        burst = int(per_minute)
        changes.commit(changes.next(burst))
        burst_started = time.perf_counter()
        while lagging(db) > 0:
            time.sleep(0.5)
        result["evaluator_burst"] = {"tables": burst, "seconds": round(time.perf_counter() - burst_started, 1)}
        print(f"evaluator: {burst:,} changed tables evaluated in {result['evaluator_burst']['seconds']} s", flush=True)

        last = max(0, args.tables - 100)
        result["api"] = {
            "tables, first page": timed(api, "/api/v1/tables", catalog="bench", limit=100),
            "tables, middle page": timed(api, "/api/v1/tables", catalog="bench", limit=100, offset=args.tables // 2),
            "tables, last page": timed(api, "/api/v1/tables", catalog="bench", limit=100, offset=last),
            "tables, a page deep in (keyset)": timed(
                api, "/api/v1/tables", limit=100, after=f"bench.{location_of('', args.namespaces, last)[0]}.t0000000"
            ),
            "tables named like": timed(api, "/api/v1/tables", name=f"t{last // 10:06d}", limit=100),
            "tables of one namespace": timed(api, "/api/v1/tables", catalog="bench", database="ns0500", limit=100),
            "idle tables": timed(api, "/api/v1/tables", status="idle", limit=100),
            "overview": timed(api, "/api/v1/overview", repeat=5),
        }
        for page, figures in result["api"].items():
            print(
                f"  {page}: first {figures['cold_ms']} ms, then p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms",
                flush=True,
            )
    db.dispose()
    write("million_tables", result)
    bar_chart(
        "million_tables",
        f"{args.tables:,} tables, {args.percent:g}% changing a minute: API pages (p99)",
        {page: figures["p99_ms"] for page, figures in result["api"].items()},
        "ms",
        goal=200,
    )


if __name__ == "__main__":
    main()
