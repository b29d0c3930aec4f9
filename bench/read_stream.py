"""The stream of `budgeted_optimizing.py`: a writer's commits and a skewed reader's queries on one clock, and the
ideal copies of the hot tables that the reader's queries are compared with."""

from __future__ import annotations

import argparse
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import percentile


@dataclass(frozen=True)
class Event:
    at: float  # seconds from the start
    table: int
    kind: str  # append, upsert, read


def stream(args: argparse.Namespace) -> list[Event]:
    """The writes and reads of one run, in time order: the same for every policy."""
    rng = random.Random(args.seed)
    seconds = args.minutes * 60
    events = []
    commits = [0] * args.tables
    at = 0.0
    while at < seconds:  # the writer visits the tables in turn, a commit every --write-every seconds
        table = int(at / args.write_every) % args.tables
        commits[table] += 1
        upsert = table < args.upserting and commits[table] % args.upsert_every == 0
        events.append(Event(at, table, "upsert" if upsert else "append"))
        at += args.write_every
    for table in range(args.hot + args.warm):
        every = args.hot_every if table < args.hot else args.warm_every
        at = rng.uniform(0, every)
        while at < seconds:
            events.append(Event(at, table, "read"))
            at += every
    return sorted(events, key=lambda e: (e.at, e.kind != "read"))


@dataclass
class Reads:
    times: list[tuple[float, int, float]] = field(default_factory=list)  # (at, table, seconds)
    ideal: list[float] = field(default_factory=list)  # the ideal copies' queries, beside the hot ones
    lock: threading.Lock = field(default_factory=threading.Lock)
    # per hot table: held while its ideal copy is queried or made anew
    copying: dict[int, threading.Lock] = field(default_factory=dict)


def rows(table: int, start: int, count: int, tag: str) -> Any:
    import pyarrow as pa

    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table({"id": ids, "v": pa.array([f"{table}-{tag}-{i:08d}-{'x' * 60}" for i in range(count)])})


def make_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))


def make_tables(catalog: Any, args: argparse.Namespace, optimizing: dict[str, str]) -> list[str]:
    schema = make_schema()
    catalog.create_namespace("db")
    names = []
    for t in range(args.tables):
        table = catalog.create_table(f"db.t{t}", schema, properties=optimizing)
        table.append(rows(t, 0, args.rows, "seed"))
        names.append(f"db.t{t}")
    return names


def write_and_read(root: str, token: str, args: argparse.Namespace, events: list[Event], reads: Reads) -> None:
    """Plays the stream: commits on this thread, reads on a thread of their own, both on the stream's clock."""
    from pyiceberg.catalog.rest import RestCatalog

    writer = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
    began = time.monotonic()
    written = [args.rows] * args.tables

    def read_all() -> None:
        reader = RestCatalog(
            "bench", uri=f"{root}/iceberg", warehouse="bench", token=token, **{"scan-planning-mode": "server"}
        )
        for e in (e for e in events if e.kind == "read"):
            wait = began + e.at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            started = time.perf_counter()
            reader.load_table(f"db.t{e.table}").scan().to_arrow()
            took = time.perf_counter() - started
            ideal = None
            if e.table < args.hot and e.at >= args.minutes * 30:  # the same query on the ideal copy, at once
                with reads.copying[e.table]:
                    started = time.perf_counter()
                    reader.load_table(f"db.ideal{e.table}").scan().to_arrow()
                    ideal = time.perf_counter() - started
            with reads.lock:
                reads.times.append((e.at, e.table, took))
                if ideal is not None:
                    reads.ideal.append(ideal)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    for e in (e for e in events if e.kind != "read"):
        wait = began + e.at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        table = writer.load_table(f"db.t{e.table}")
        if e.kind == "upsert":
            table.upsert(rows(e.table, written[e.table] - args.rows, args.rows, f"u{e.at:.0f}"), join_cols=["id"])
        else:
            table.append(rows(e.table, written[e.table], args.rows, f"a{e.at:.0f}"))
            written[e.table] += args.rows
        if e.table < args.hot and e.at >= args.minutes * 30 - args.write_every * args.tables:
            copy_ideally(writer, e.table, table.scan().to_arrow(), reads.copying[e.table])
    reader.join()


def make_ideal_copies(catalog: Any, args: argparse.Namespace, reads: Reads) -> None:
    """Each hot table ideally compacted (`db.ideal<t>`): made with the table's first rows, and anew after each of its
    commits from shortly before the half-way point on (`copy_ideally`)."""
    for t in range(args.hot):
        reads.copying[t] = threading.Lock()
        copy_ideally(catalog, t, rows(t, 0, args.rows, "seed"), reads.copying[t])


def copy_ideally(catalog: Any, table: int, data: Any, lock: threading.Lock) -> None:
    """`data` as the ideal copy of hot table `table`: one file in a table of one snapshot, self-optimizing off.
    The catalog's client plans its own scans, so the copy's making is no read the server counts."""
    name = f"db.ideal{table}"
    with lock:
        if catalog.table_exists(name):
            catalog.drop_table(name)
        copy = catalog.create_table(name, data.schema, properties={"self-optimizing.enabled": "false"})
        copy.append(data)


def idle_ideal_p95(root: str, token: str, args: argparse.Namespace) -> float:
    """The ideal copies' query once the run is over, with nothing else running (for reference)."""
    from pyiceberg.catalog.rest import RestCatalog

    reader = RestCatalog(
        "bench", uri=f"{root}/iceberg", warehouse="bench", token=token, **{"scan-planning-mode": "server"}
    )
    times = []
    for t in range(args.hot):
        for _ in range(20):
            started = time.perf_counter()
            reader.load_table(f"db.ideal{t}").scan().to_arrow()
            times.append(time.perf_counter() - started)
    return percentile(times, 95)
