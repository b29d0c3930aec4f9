"""The REST catalog's hot paths at their depth (bench/rest_catalog.py measures them): routing by prefix, and
the system database's single-row reads, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pyiceberg.table.update import SetPropertiesUpdate
from sqlalchemy import event, text
from starlette.responses import Response
from starlette.routing import Match

from lakewarden._compat.fastapi import EffectiveRouteContext, endpoint_context_cache
from lakewarden.api.app import create_app
from lakewarden.api.fast_path.responses import JSONBytes
from lakewarden.api.fast_path.routing import PrefixRouter, RouteIndex
from lakewarden.api.routes.iceberg_rest import CommitTable
from lakewarden.config import HaConfig
from lakewarden.domain.errors import CommitFailed, NoSuchTable, WouldWait
from lakewarden.domain.events import CatalogEvent, EventType
from lakewarden.services.composition import rest_catalog
from lakewarden.services.rest_catalog import commits as table_commits
from lakewarden.services.rest_catalog import metadata_files
from lakewarden.services.rest_catalog.commits import TableCommits
from lakewarden.store import rest_catalog as store
from lakewarden.store.commit_statement import swap_and_record
from lakewarden.store.database import Database
from tests.conftest import as_admin, make_config

TABLE = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}
]}}  # fmt: skip
CATALOG_MODULES = {"lakewarden.api.routes.iceberg_oauth", "lakewarden.api.routes.iceberg_views"}
CATALOG_MODULES |= {"lakewarden.api.routes.iceberg_rest"}


@pytest.fixture
def table(client: TestClient) -> dict[str, Any]:
    """An internal table `lake.db.t`; its loadTable answer."""
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    created = client.post("/iceberg/v1/lake/namespaces/db/tables", json=TABLE)
    assert created.status_code == 200, created.text
    answer: dict[str, Any] = created.json()
    return answer


def _tried(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The modules of the endpoints whose routes are tried, from now on: by FastAPI's walk (a route, or a route
    as included) or found by a router's index (api/fast_path/routing.RouteIndex, which matches the route it chose
    itself)."""
    tried: list[str] = []
    for kind in (APIRoute, EffectiveRouteContext):
        original = kind.matches

        def matches(route: Any, scope: Any, original: Any = original) -> Any:
            tried.append(route.endpoint.__module__)
            return original(route, scope)

        monkeypatch.setattr(kind, "matches", matches)
    select = RouteIndex.select

    def selected(index: RouteIndex, method: str, path: str, scope: Any) -> Any:
        found = select(index, method, path, scope)
        if found is not None:
            tried.append(found[0].endpoint.__module__)
        return found

    monkeypatch.setattr(RouteIndex, "select", selected)
    return tried


def test_a_catalog_request_is_never_offered_to_the_management_api(
    client: TestClient, table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = _tried(monkeypatch)
    loaded = client.get("/iceberg/v1/lake/namespaces/db/tables/t")
    assert loaded.status_code == 200
    assert loaded.json()["metadata-location"] == table["metadata-location"]
    assert tried == ["lakewarden.api.routes.iceberg_rest"]  # the index's choice, and nothing else
    # and the other way round; the routing of each API is otherwise unchanged
    tried.clear()
    assert client.get("/api/v1/catalogs").status_code == 200
    # FastAPI's own walk of the management API's routes, and none of the catalog's
    assert tried[-1] == "lakewarden.api.routes.catalogs" and not any(m in CATALOG_MODULES for m in tried)
    assert client.get("/v1/lake/namespaces/db/tables/t").status_code == 200  # the catalog at the root too
    unsupported = client.get("/iceberg/v1/lake/no/such/route")
    assert unsupported.status_code == 406, unsupported.text
    assert client.get("/api/v1/no-such-route").status_code == 404
    assert client.get("/iceberg/v1x").status_code == 404  # a prefix is a whole path segment


def test_prefix_router_is_asked_only_under_its_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    router = PrefixRouter(prefix="/a")

    @router.get("/{anything:path}")
    def under_a(anything: str) -> str:
        return f"a:{anything}"

    app = FastAPI()
    app.include_router(router)

    @app.get("/{anything:path}")
    def elsewhere(anything: str) -> str:
        return f"root:{anything}"

    tried = _tried(monkeypatch)
    with TestClient(app) as client:
        assert client.get("/a/x").json() == "a:x"
        assert client.get("/a").json() == "root:a"  # no route of the router is `/a` itself: tried, not matched
        tried.clear()
        assert client.get("/ab/x").json() == "root:ab/x"
        assert client.get("/b").json() == "root:b"
    assert tried == [__name__, __name__]  # only `elsewhere`, once per request
    with pytest.raises(ValueError, match="prefix"):
        PrefixRouter(prefix="")


def _example_path(template: str, value: str) -> str:
    return re.sub(r"{[^}]+}", value, template)


def test_the_route_index_finds_the_route_fastapi_finds(client: TestClient) -> None:
    """For every route of the server (each method, paths built from its template, with values shaped to reach
    the catch-all and the routes that look alike), a router's index chooses the route FastAPI's walk chooses,
    and gives the same parameters; where FastAPI finds no full match the index finds none either."""
    app = client.app
    compared = 0
    for top in app.router.routes:  # type: ignore[attr-defined]
        router = getattr(top, "original_router", None)
        if not isinstance(router, PrefixRouter) or not router.indexed:
            continue
        index = router.index_of(top)
        assert index is not None, router.prefix
        contexts = list(top.effective_route_contexts())
        paths = {_example_path(c.path_format, v) for c in contexts for v in ("x", "a\x1fb", "plan", "tables")}
        paths |= {p + "/extra" for p in list(paths)} | {router.prefix + "/nope/nope/nope"}
        for path in sorted(paths):
            for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
                scope: dict[str, Any] = {"type": "http", "method": method, "path": path, "root_path": "", "fastapi": {}}
                expected = None
                for context in contexts:  # FastAPI's order, first full match wins
                    match, child = context.matches(scope)
                    if match == Match.FULL:
                        expected = (context, child["path_params"])
                        break
                found = index.select(method, path, scope)
                got = None if found is None else (found[0], found[1]["path_params"])
                assert found is None or found[1]["endpoint"] is found[0].endpoint
                assert got == expected, (method, path)
                compared += 1
    assert compared > 500  # the REST catalog's routes: the management API is not indexed


def test_no_dependency_of_a_route_is_run_in_the_thread_pool(client: TestClient) -> None:
    """FastAPI runs a dependency that is a plain function in its thread pool: a hop there and back per request
    for what only looks something up (it cost a commit a third of its time on the event loop). Every dependency
    of every route, the routers' own included, is async; endpoints doing real work may still be plain."""
    plain: set[str] = set()
    dependencies = 0

    def walk(dependant: Any) -> None:
        nonlocal dependencies
        for sub in dependant.dependencies:
            dependencies += 1
            if not asyncio.iscoroutinefunction(sub.call):
                plain.add(f"{sub.call.__module__}.{sub.call.__qualname__}")
            walk(sub)

    for top in client.app.router.routes:  # type: ignore[attr-defined]
        contexts = top.effective_route_contexts() if hasattr(top, "effective_route_contexts") else [top]
        for context in contexts:
            if hasattr(context, "dependant"):
                walk(context.dependant)
    assert dependencies > 100
    assert not plain, sorted(plain)


def test_every_route_is_prepared_before_the_first_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI prepares an included router's routes when a request is first matched against them (paid by the first
    caller, a noticeable wait for the REST catalog's): the server does it at start
    (api/fast_path/routing.prepare_routes)."""
    prepared: list[str] = []
    original = EffectiveRouteContext.from_api_route.__func__  # type: ignore[attr-defined]

    def from_api_route(cls: Any, *args: Any, **kwargs: Any) -> Any:
        context = original(cls, *args, **kwargs)
        prepared.append(context.original_route.path)
        return context

    monkeypatch.setattr(EffectiveRouteContext, "from_api_route", classmethod(from_api_route))
    config = make_config(tmp_path / "data")
    with TestClient(create_app(config, start_services=False)) as client:
        as_admin(client, config)
        at_start = set(prepared)
        assert {"/{prefix}/namespaces/{namespace}/tables/{table}", "/config", "/catalogs", "/overview"} <= at_start
        prepared.clear()
        # and each endpoint's source context, which FastAPI reads from its module's file on its first request
        contexts = set(endpoint_context_cache)
        assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
        assert client.get("/iceberg/v1/config", params={"warehouse": "lake"}).status_code == 200
        assert client.get("/iceberg/v1/lake/namespaces/db/tables/t").status_code == 404
        assert client.get("/api/v1/overview").status_code == 200
        assert prepared == []
        assert set(endpoint_context_cache) == contexts


def test_the_servers_heap_is_frozen_once_it_has_started(tmp_path: Path) -> None:
    """What the server builds at start lives as long as it does: frozen, no full collection walks it again (each
    would fall inside a request). Before that, the modules a first request would import are imported (pyiceberg's
    pyarrow FileIO, slow to import, inside a server's first loadTable or plan). Checked in a process of its own:
    freezing and imports are process-wide."""
    code = (
        "import gc, sys\n"
        "from fastapi.testclient import TestClient\n"
        "from lakewarden.api.app import create_app\n"
        "from lakewarden.server import FIRST_REQUEST_MODULES, _started\n"
        "from tests.conftest import make_config\n"
        "from pathlib import Path\n"
        "config = make_config(Path(sys.argv[1]))\n"
        "before = [m for m in FIRST_REQUEST_MODULES if m in sys.modules]\n"
        "with TestClient(create_app(config, start_services=False, on_started=_started)):\n"
        "    after = [m for m in FIRST_REQUEST_MODULES if m in sys.modules]\n"
        "    print(','.join(before) or '-', ','.join(after))\n"
        "    print(gc.get_freeze_count(), len(gc.get_objects(generation=2)))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "data")], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr
    imported_before, imported_after, freeze_count, oldest_count = ran.stdout.split()[-4:]
    assert imported_before == "-", "a module of FIRST_REQUEST_MODULES is imported anyway: no need to preload it"
    assert "pyiceberg.io.pyarrow" in imported_after.split(","), imported_after
    frozen, oldest = int(freeze_count), int(oldest_count)
    assert frozen > 100_000 and oldest < frozen // 20, (frozen, oldest)


def test_single_row_reads_see_every_commit_and_survive_a_lost_connection(
    client: TestClient, table: dict[str, Any]
) -> None:
    db: Database = client.app.state.context.db  # type: ignore[attr-defined]
    location, version = store.pointer_head(db, "lake", "db", "t")
    assert (location, version) == (table["metadata-location"], 0)
    body = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    committed = client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=body)
    assert committed.status_code == 200, committed.text
    driver = db.driver
    shapes = (dict(driver._shapes), dict(driver._write_shapes))  # the read's statement and (SQLite) the commit's
    assert store.pointer_head(db, "lake", "db", "t") == (committed.json()["metadata-location"], 1)
    with pytest.raises(NoSuchTable, match=r"db\.nope"):
        store.pointer_head(db, "lake", "db", "nope")
    assert (driver._shapes, driver._write_shapes) == shapes  # compiled once, whatever the parameters
    kept = driver._kept
    assert kept is not None  # a connection of its own, out of the pool, used again
    assert store.pointer_head(db, "lake", "db", "t")[1] == 1 and driver._kept is kept
    with driver._kept_lock:  # taken (another thread reading): a pooled connection serves, given back
        checked_out = driver._single_reads.pool.checkedout()  # type: ignore[attr-defined]
        assert store.pointer_head(db, "lake", "db", "t")[1] == 1
        assert driver._single_reads.pool.checkedout() == checked_out  # type: ignore[attr-defined]
    if db.engine.dialect.name == "postgresql":
        # the database drops every connection of the single-row reads' pool (as a restart or failover would)
        with db.engine.connect() as conn:
            dropped = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        assert dropped
        assert store.pointer_head(db, "lake", "db", "t")[1] == 1  # a new connection, the same answer


def test_the_event_loops_single_row_reads_overlap_and_survive_a_lost_connection(
    client: TestClient, table: dict[str, Any]
) -> None:
    """loadTable's pointer read on the event loop (`first_row_async`): on PostgreSQL awaited on an asyncio
    connection of the loop's own few, so that reads in flight overlap instead of taking turns; a connection the
    database dropped is replaced. On SQLite it is the blocking read (a local file)."""
    db: Database = client.app.state.context.db  # type: ignore[attr-defined]
    reads = db.driver._async_reads

    async def many(n: int) -> list[tuple[str, int]]:
        return list(await asyncio.gather(*(store.pointer_head_async(db, "lake", "db", "t") for _ in range(n))))

    assert asyncio.run(many(20)) == [(table["metadata-location"], 0)] * 20
    with pytest.raises(NoSuchTable, match=r"db\.nope"):
        asyncio.run(store.pointer_head_async(db, "lake", "db", "nope"))
    if db.engine.dialect.name != "postgresql":
        assert reads is None
        return
    assert reads is not None
    sleeps = "SELECT pg_sleep(0.3), $1::int"

    async def overlapping() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(reads.first_row(sleeps, [i]) for i in range(4)))  # four rows: not shared
        return time.perf_counter() - started

    assert asyncio.run(overlapping()) < 1.15  # four reads of 0.3 s at once: one after the other takes 1.2 s
    with db.engine.connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    assert asyncio.run(many(8)) == [(table["metadata-location"], 0)] * 8  # new connections, the same answer
    assert 0 < reads.connections() <= reads.size * 3  # at most `size` per loop (three loops above)
    reads.close()
    assert reads.connections() == 0


def test_callers_reading_one_row_at_once_share_reads_sent_after_they_came(
    client: TestClient, table: dict[str, Any]
) -> None:
    """Many loads of one table at once share their pointer reads on PostgreSQL: a caller that comes while a read of
    the same row is in flight waits for the next read, which answers everyone who came meanwhile. Not for the read
    in flight: it was sent before the caller came, and a commit that ended before the caller asked (its client's)
    may not be in it."""
    db: Database = client.app.state.context.db  # type: ignore[attr-defined]
    reads = db.driver._async_reads
    if reads is None:
        pytest.skip("the event loop's reads are PostgreSQL's (on SQLite the read is the blocking one)")

    async def many(n: int) -> list[tuple[str, int]]:
        return list(await asyncio.gather(*(store.pointer_head_async(db, "lake", "db", "t") for _ in range(n))))

    sent, shared = reads.sent, reads.shared
    assert asyncio.run(many(20)) == [(table["metadata-location"], 0)] * 20
    assert (reads.sent - sent, reads.shared - shared) == (2, 19)  # the first caller's read, and one for the rest

    with db.engine.begin() as conn:
        conn.execute(text("CREATE TABLE probe (k int PRIMARY KEY, v int)"))
        conn.execute(text("INSERT INTO probe VALUES (1, 0)"))
    slow = "SELECT v, pg_sleep(0.6)::text FROM probe WHERE k = $1"  # the row is read, then the read sleeps

    def change() -> None:
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE probe SET v = 1 WHERE k = 1"))

    async def a_commit_between() -> tuple[Any, Any]:
        first = asyncio.ensure_future(reads.first_row(slow, [1]))
        await asyncio.sleep(0.3)  # the first read is in flight, its row read
        await asyncio.to_thread(change)  # committed before the second caller asks
        second = await reads.first_row(slow, [1])
        return await first, second

    first, second = asyncio.run(a_commit_between())
    assert (first[0], second[0]) == (0, 1)
    reads.close()


def test_the_heap_freezer_freezes_what_the_caches_add(tmp_path: Path) -> None:
    """Long-lived objects added after start (a cache filling) are frozen right after a full collection leaves
    `freeze_after` of them, so full collections never walk them again; the cyclic garbage that collection found
    is gone, not frozen; below the bound nothing is frozen; the collector's own full collections trigger it. In a
    process of its own: freezing is process-wide."""
    code = (
        "import gc, time, weakref\n"
        "from lakewarden.heap import HeapFreezer, freeze\n"
        "freeze()\n"
        "freezer = HeapFreezer(freeze_after=50_000).install()\n"
        "kept = [[i] for i in range(20_000)]\n"
        "before = gc.get_freeze_count()\n"
        "gc.collect()\n"
        "print(freezer.freezes, gc.get_freeze_count() - before)\n"
        "kept += [[i] for i in range(60_000)]\n"
        "class Node: pass\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "gone = weakref.ref(a)\n"
        "del a, b\n"  # cyclic garbage, for the full collection
        "gc.collect()\n"
        "print(freezer.freezes, gc.get_freeze_count() - before, gone() is None, len(gc.get_objects(generation=2)))\n"
        "started = time.perf_counter(); gc.collect(); walked = time.perf_counter() - started\n"
        "more = [[i] for i in range(300_000)]\n"  # no explicit collection: the collector's own full ones
        "print(freezer.freezes > 1)\n"
        "freezer.uninstall(); gc.unfreeze()\n"
        "started = time.perf_counter(); gc.collect(); everything = time.perf_counter() - started\n"
        "print(walked < everything)\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    below, above, automatic, faster = ran.stdout.strip().splitlines()[-4:]
    assert below == "0 0"  # 20,000 objects: under the bound, nothing frozen
    freezes, frozen, collected, oldest = above.split()
    assert freezes == "1" and int(frozen) >= 80_000, above
    assert collected == "True"  # the collection found the cycle; it was not frozen with the rest
    assert int(oldest) < 1_000, above
    assert automatic == "True"
    assert faster == "True"  # a full collection after the freeze skips what it froze


def test_a_commit_takes_the_fewest_statements_and_a_lost_swap_writes_nothing(
    client: TestClient, table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a single table's commit swaps its pointer, writes its timeline entry and its event and
    notifies the other nodes in one statement (store/commit_statement.py); on SQLite it is those three statements
    in one transaction on the driver's connection, and the rows read back through the ORM as the ones it wrote.
    A swap that finds another commit's pointer writes none of it."""
    context = client.app.state.context  # type: ignore[attr-defined]
    db: Database = context.db
    postgresql = db.engine.dialect.name == "postgresql"
    assert db.driver.one_statements == postgresql
    published: list[CatalogEvent] = []
    context.rest_catalog.outbox.subscribe(published.append)
    body = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    sent: list[str] = []
    url = db.engine.url.render_as_string(False).replace("+psycopg", "")
    listener = psycopg.connect(url, autocommit=True) if postgresql else None
    if listener is not None:
        listener.execute(f"LISTEN {store.EVENTS_CHANNEL}")

    def traced(dbapi_connection: Any, *args: Any) -> None:  # SQLite's own trace of what its connection runs
        dbapi_connection.set_trace_callback(sent.append)

    def untraced(dbapi_connection: Any, *args: Any) -> None:
        dbapi_connection.set_trace_callback(None)

    # both run on the driver's connection: psycopg's every statement (SQLAlchemy's and the driver's own) goes
    # through its cursor's execute; SQLite traces its connection's
    execute = psycopg.Cursor.execute

    def seen(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    hooks = [] if postgresql else [("checkout", traced), ("checkin", untraced)]
    if postgresql:
        monkeypatch.setattr(psycopg.Cursor, "execute", seen)
    for name, hook in hooks:
        event.listen(db.engine, name, hook)
    try:
        committed = client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=body)
    finally:
        monkeypatch.undo()
        for name, hook in hooks:
            event.remove(db.engine, name, hook)
    assert committed.status_code == 200, committed.text
    location = committed.json()["metadata-location"]
    (announced,) = published
    assert announced.type == EventType.TABLE_COMMITTED and announced.table == "t"
    assert announced.payload["version"] == 1 and announced.payload["metadata_location"] == location
    with db.read() as session:
        (entry, created) = store.timeline(session, "lake", "db", "t")
        assert (entry.version, entry.operation, entry.metadata_location) == (1, "set-properties", location)
        assert (entry.client, entry.summary, created.version) == ("testclient", {}, 0)
        (row,) = store.events_after(session, announced.event_id - 1, 10)
        assert (row.event_id, row.type, row.payload) == (announced.event_id, "table-committed", announced.payload)
        assert store.stored_event(row) == announced
        last = store.last_event_id(session)
    touched = [s for s in sent if re.search(r"iceberg_table|commit_timeline|event_outbox", s)]
    written = [s for s in touched if not s.startswith("SELECT")]  # not the head's read, before
    if listener is None:
        assert len(written) == 3, written  # the swap and two inserts, in one transaction
        begun = sent.index("BEGIN IMMEDIATE")
        assert sent[begun + 1 : begun + 5] == [*written, "COMMIT"], sent
    else:
        assert len(written) == 1 and written[0].startswith("WITH swapped AS"), touched
        (notified,) = listener.notifies(timeout=5, stop_after=1)
        assert notified.payload == str(announced.event_id)
    # a swap from a pointer another commit moved on: no row written, no event, the pointer kept
    details: dict[str, Any] = {
        "operation": "set-properties",
        "snapshot_id": None,
        "parent_snapshot_id": None,
        "summary": {},
    }
    stale = swap_and_record(db, ("lake", "db", "t"), table["metadata-location"], 0, "/x.json", "c", details)
    assert stale is None
    with db.read() as session:
        assert len(store.timeline(session, "lake", "db", "t")) == 2 and store.last_event_id(session) == last
    assert store.pointer_head(db, "lake", "db", "t") == (location, 1)
    if listener is None:
        return
    # the database drops every connection (a restart, a failover): the next commit takes a new one
    with db.engine.connect() as conn:
        conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    body = {"updates": [{"action": "set-properties", "updates": {"k": "w"}}]}
    again = client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=body)
    assert again.status_code == 200, again.text
    assert store.pointer_head(db, "lake", "db", "t") == (again.json()["metadata-location"], 2)
    listener.close()


def test_only_a_commit_that_moves_the_current_snapshot_is_read_ahead(
    client: TestClient, table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that keeps the table's current snapshot (properties, schema) has no new manifests: the read-ahead
    hands nothing to its thread (a handoff and a read per commit, for nothing); one that moves it does."""
    read_ahead = client.app.state.context.rest_catalog.read_ahead  # type: ignore[attr-defined]
    handed: list[Any] = []
    submit = read_ahead._reader.submit

    def counted(*args: Any) -> Any:
        handed.append(args)
        return submit(*args)

    monkeypatch.setattr(read_ahead._reader, "submit", counted)
    published: list[CatalogEvent] = []
    client.app.state.context.rest_catalog.outbox.subscribe(published.append)  # type: ignore[attr-defined]
    body = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    assert client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=body).status_code == 200
    (event,) = published
    assert event.payload["snapshot_id"] == event.payload["parent_snapshot_id"]
    assert handed == []
    moved = dataclasses.replace(event, payload={**event.payload, "snapshot_id": 7, "parent_snapshot_id": None})
    read_ahead(moved)
    assert len(handed) == 1


def test_the_sole_node_commits_on_the_head_it_knows_and_checks_a_moved_one_again(
    client: TestClient, table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sole node stages a commit on the head it last swapped, without reading the pointer
    (services/rest_catalog/commits.py). A head moved by a commit outside the node (here another service on the same
    database, as a second process would) costs a lost swap, or a refusal checked again on the real head: the
    answer is the same as when the head was read."""
    context = client.app.state.context  # type: ignore[attr-defined]
    url = "/iceberg/v1/lake/namespaces/db/tables/t"
    reads: list[tuple[str, ...]] = []
    read = store.pointer_head

    def counted(db: Database, *key: str) -> tuple[str, int]:
        reads.append(key)
        return read(db, *key)

    monkeypatch.setattr(store, "pointer_head", counted)

    def commit(body: dict[str, Any]) -> Any:
        return client.post(url, json=body)

    assert commit({"updates": [{"action": "set-properties", "updates": {"a": "1"}}]}).status_code == 200
    reads.clear()
    answer = commit({"updates": [{"action": "set-properties", "updates": {"b": "2"}}]})
    assert answer.status_code == 200 and reads == []  # the head this node swapped last
    # another process adds a column: schema 1 is current; this node still knows the head before it
    other = rest_catalog(context.config, context.db)
    fields = [{"id": 1, "name": "id", "type": "long", "required": False}]
    schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [*fields, {"id": 2, "name": "v", "type": "string", "required": False}],
    }
    added = CommitTable.model_validate(
        {"updates": [{"action": "add-schema", "schema": schema}, {"action": "set-current-schema", "schema-id": -1}]}
    )
    moved = other.commits.commit_table("lake", "db", "t", added.requirements, added.updates)
    # a requirement met by the real head only: refused on the known one, checked again on the real one
    reads.clear()
    required = {
        "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 1}],
        "updates": [{"action": "set-properties", "updates": {"c": "3"}}],
    }
    answer = commit(required)
    assert answer.status_code == 200, answer.text
    metadata = answer.json()["metadata"]
    assert metadata["current-schema-id"] == 1 and metadata["properties"]["c"] == "3"
    assert answer.json()["metadata"]["metadata-log"][-1]["metadata-file"] == moved.metadata_location
    assert len(reads) == 2  # the known head checked, then the commit staged on the one read
    # moved again outside: a change that passes on the known head loses its swap and is made on the real one
    other.commits.commit_table("lake", "db", "t", [], [SetPropertiesUpdate(updates={"d": "4"})])
    answer = commit({"updates": [{"action": "set-properties", "updates": {"e": "5"}}]})
    assert answer.status_code == 200
    assert {"c", "d", "e"} <= set(answer.json()["metadata"]["properties"])
    # moved again: a change that changes nothing answers with the real head, not the one known
    moved = other.commits.commit_table("lake", "db", "t", [], [SetPropertiesUpdate(updates={"f": "6"})])
    answer = commit({"updates": [{"action": "set-current-schema", "schema-id": 1}]})  # schema 1 is current
    assert answer.status_code == 200 and answer.json()["metadata-location"] == moved.metadata_location
    # a refusal on the real head stays one (409), after the head was checked
    refused = commit({**required, "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}]})
    assert refused.status_code == 409, refused.text
    # a table dropped outside: 404, not a commit on the head known
    loaded = client.get(url).json()
    assert commit({"updates": [{"action": "set-properties", "updates": {"g": "7"}}]}).status_code == 200
    other.tables.drop_table("lake", "db", "t", purge=False)
    gone = commit({"updates": [{"action": "set-properties", "updates": {"h": "8"}}]})
    assert gone.status_code == 404, gone.text
    assert loaded["metadata"]["table-uuid"] == table["metadata"]["table-uuid"]


def test_nodes_of_a_cluster_read_the_head_at_every_commit(tmp_path: Path) -> None:
    """With high availability several nodes commit to one table: a head known to one is stale as often as not,
    so none is kept."""
    config = make_config(tmp_path)
    clustered = config.model_copy(update={"ams": config.ams.model_copy(update={"ha": HaConfig(enabled=True)})})
    heads = rest_catalog(clustered, Database(f"sqlite:///{tmp_path / 'x.db'}")).commits.heads
    key = ("lake", "db", "t")
    heads.wrote(key, ("/m.json", 1))
    heads.learn(key, ("/m.json", 1), heads.stamp())
    assert heads.get(key) is None and not heads.keeping


def test_a_commit_that_cannot_wait_is_made_on_the_event_loop_and_any_other_in_a_thread(
    client: TestClient, table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite with local files, a commit on a kept version whose requirements hold is made by the event loop
    itself (TableCommits.commit_table without `wait`). Whatever would make it wait is found before it has any
    effect, and the commit is made in a worker thread instead: another writer of this process or of another one
    at work, a version not kept or too large, a requirement that fails (the conflict strategy's work), PostgreSQL.
    Each commit writes one metadata file and one event, however it went."""
    context = client.app.state.context  # type: ignore[attr-defined]
    db: Database = context.db
    url = "/iceberg/v1/lake/namespaces/db/tables/t"
    files = Path(table["metadata"]["location"]) / "metadata"
    published: list[CatalogEvent] = []
    context.rest_catalog.outbox.subscribe(published.append)
    made: list[tuple[str, str]] = []
    commit_table = TableCommits.commit_table

    def recorded(commits: TableCommits, *args: Any) -> Any:
        where = "thread" if threading.current_thread().name.startswith("lakewarden-request") else "loop"
        try:
            answer = commit_table(commits, *args)
        except WouldWait:
            made.append((where, "would wait"))
            raise
        except CommitFailed:
            made.append((where, "refused"))
            raise
        made.append((where, "made"))
        return answer

    monkeypatch.setattr(TableCommits, "commit_table", recorded)
    versions = 0

    def commit(value: str, **body: Any) -> Any:
        nonlocal versions
        made.clear()
        answer = client.post(url, json={"updates": [{"action": "set-properties", "updates": {"k": value}}], **body})
        if answer.status_code == 200:
            versions += 1
            assert answer.json()["metadata"]["properties"]["k"] == value
        assert store.pointer_head(db, "lake", "db", "t")[1] == versions
        assert len(list(files.glob("*.metadata.json"))) == versions + 1  # nothing staged and left behind
        assert len(published) == versions
        return answer

    in_a_thread = [("loop", "would wait"), ("thread", "made")]
    assert commit("1").status_code == 200
    if db.driver.in_process:
        assert made == [("loop", "made")]
    else:  # PostgreSQL: found before anything was staged
        assert made == in_a_thread
        return

    def held(lock: Any, seconds: float = 0.3) -> threading.Thread:
        """A thread holding `lock` (a context manager) for `seconds`, started once it holds it."""
        holding = threading.Event()

        def hold() -> None:
            with lock:
                holding.set()
                time.sleep(seconds)

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(5)
        return holder

    # another writer of this process: its lock is taken when the loop's swap would take it
    holder = held(db._write_lock)
    assert commit("2").status_code == 200 and made == in_a_thread
    holder.join()

    # another process writes: SQLite's lock is taken
    @contextlib.contextmanager
    def other_process() -> Iterator[None]:
        other = sqlite3.connect(str(db.engine.url.database), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("COMMIT")
            other.close()

    holder = held(other_process())
    assert commit("3").status_code == 200 and made == in_a_thread
    holder.join()
    assert commit("4").status_code == 200 and made == [("loop", "made")]  # and the loop's writer works again

    # the version is not kept (read and parsed in the thread), or too large to stage on the loop
    context.rest_catalog.files.lru.clear()
    assert commit("5").status_code == 200 and made == in_a_thread
    monkeypatch.setattr(table_commits, "LOOP_JSON_BYTES", 100)
    assert commit("6").status_code == 200 and made == in_a_thread
    monkeypatch.setattr(table_commits, "LOOP_JSON_BYTES", metadata_files.LOOP_JSON_BYTES)
    # a requirement that fails: refused in the thread (where a conflict strategy may rebase it)
    stale = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}]
    assert commit("7", requirements=stale).status_code == 409
    assert made == [("loop", "would wait"), ("thread", "refused")]
    assert commit("8").status_code == 200 and made == [("loop", "made")]


@pytest.mark.parametrize("etag", [None, '"abc"'])
def test_an_answer_of_json_bytes_sends_the_headers_starlettes_response_sends(etag: str | None) -> None:
    """JSONBytes makes its headers in one step: the same ones, in the same order, as Starlette's Response."""
    body = b'{"metadata-location": "x"}'
    starlette = Response(body, media_type="application/json", headers=None if etag is None else {"ETag": etag})
    ours = JSONBytes(body, etag)
    assert ours.raw_headers == starlette.raw_headers
    assert (ours.status_code, ours.body, ours.background) == (200, body, None)
    assert ours.headers["content-length"] == str(len(body))
