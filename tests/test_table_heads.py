"""The heads a server keeps of its tables (services/rest_catalog/heads.py): the only server on its system database
answers loads from them, and they follow every change of a pointer it makes; a second server on that database
is refused (store/claim.py); a claim lost on PostgreSQL is not counted on, and the heads are forgotten when it
is taken again."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pyiceberg.table.update import SetPropertiesUpdate

from lakewarden.api.app import create_app
from lakewarden.config import Config
from lakewarden.services.composition import rest_catalog
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.store import rest_catalog as store
from lakewarden.store.claim import SOLE_LOCK, VALID_SECONDS, DatabaseInUse, hold_alone
from lakewarden.store.database import Database
from tests.conftest import as_admin, make_config
from tests.servers import LAKEWARDEN

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
TABLES = "/iceberg/v1/lake/namespaces/db/tables"


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The pointer reads made from now on (the loads' awaited ones and the others)."""
    reads: list[tuple[str, ...]] = []
    read, read_async = store.pointer_head, store.pointer_head_async

    def counted(db: Database, *key: str) -> tuple[str, int]:
        reads.append(key)
        return read(db, *key)

    async def counted_async(db: Database, *key: str) -> tuple[str, int]:
        reads.append(key)
        return await read_async(db, *key)

    monkeypatch.setattr(store, "pointer_head", counted)
    monkeypatch.setattr(store, "pointer_head_async", counted_async)
    return reads


def _location(client: TestClient, name: str) -> Any:
    answer = client.get(f"{TABLES}/{name}")
    return answer.json()["metadata-location"] if answer.status_code == 200 else answer.status_code


def test_loads_take_the_heads_the_only_server_keeps_and_follow_every_change(
    client: TestClient, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each change of a pointer (create, commit, multi-table commit, register over a table, rename, drop) is
    answered by the next load as the database has it, without reading it."""
    context = client.app.state.context  # type: ignore[attr-defined]
    db: Database = context.db
    assert context.rest_catalog.heads.authoritative
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    for name in ("a", "b"):
        assert client.post(TABLES, json={"name": name, "schema": SCHEMA}).status_code == 200
    read = store.pointer_head  # the test's own reads, not counted
    reads = _reads(monkeypatch)

    def head(name: str) -> str | int:
        try:
            return read(db, "lake", "db", name)[0]
        except Exception:
            return 404

    def check(*names: str) -> None:
        """Each table's load answers what the database has; on SQLite none read it."""
        reads.clear()
        seen = {name: _location(client, name) for name in names}
        assert seen == {name: head(name) for name in names}
        assert reads == []

    check("a", "b")  # created by this server: known from the start
    change = {"updates": [{"action": "set-properties", "updates": {"k": "1"}}]}
    assert client.post(f"{TABLES}/a", json=change).status_code == 200
    check("a", "b")
    change = {"updates": [{"action": "set-properties", "updates": {"k": "2"}}]}
    both = [{"identifier": {"namespace": ["db"], "name": n}, **change} for n in ("a", "b")]
    assert client.post("/iceberg/v1/lake/transactions/commit", json={"table-changes": both}).status_code == 204
    check("a", "b")
    # b registered again over itself, from a's metadata file (a new version of b)
    other = client.get(f"{TABLES}/a").json()["metadata-location"]
    registered = client.post(
        "/iceberg/v1/lake/namespaces/db/register", json={"name": "b", "metadata-location": other, "overwrite": True}
    )
    assert registered.status_code == 200, registered.text
    check("a", "b")
    assert _location(client, "b") == other
    rename = {"source": {"namespace": ["db"], "name": "a"}, "destination": {"namespace": ["db"], "name": "c"}}
    assert client.post("/iceberg/v1/lake/tables/rename", json=rename).status_code == 204
    assert _location(client, "a") == 404
    assert _location(client, "c") == head("c")  # read once under its new name
    check("c")
    assert client.delete(f"{TABLES}/c").status_code == 204
    assert _location(client, "c") == 404
    assert client.post(TABLES, json={"name": "c", "schema": SCHEMA}).status_code == 200  # the name again
    check("c", "b")


def test_a_head_read_before_a_change_is_not_kept_over_it() -> None:
    """A reader that read a pointer before a writer told its change does not put the old head back."""
    heads = TableHeads()
    key = ("lake", "db", "t")
    stamp = heads.stamp()  # a reader starts reading the row...
    heads.wrote(key, ("/v2.json", 2))  # ...a commit ends meanwhile
    heads.learn(key, ("/v1.json", 1), stamp)  # the row the reader read is the one before
    assert heads.get(key) == ("/v2.json", 2)
    heads.wrote(key, None)  # dropped
    heads.learn(key, ("/v2.json", 2), stamp)
    assert heads.get(key) is None
    stamp = heads.stamp()
    heads.learn(key, ("/v3.json", 0), stamp)  # nothing told since: kept
    assert heads.get(key) == ("/v3.json", 0)
    heads.forget()
    assert heads.get(key) is None and len(heads) == 0


def test_a_second_server_on_one_sqlite_database_is_refused(tmp_path: Path) -> None:
    """The claim is held for as long as the server runs and let go when it stops: a second server is refused
    with a message (in process, and by the CLI, without a traceback); the next start after a stop is not."""
    config = make_config(tmp_path / "data")
    with TestClient(create_app(config, start_services=False)) as first:
        as_admin(first, config)
        second = TestClient(create_app(config, start_services=False))
        with pytest.raises(DatabaseInUse, match="another lakewarden server is running on the system database"):
            second.__enter__()
        (tmp_path / "c.yaml").write_text(f"ams:\n  data-dir: {config.data_dir}\n")
        refused = subprocess.run(
            [*LAKEWARDEN, "server", "-c", str(tmp_path / "c.yaml")], capture_output=True, text=True, timeout=120
        )
        assert refused.returncode != 0
        assert "another lakewarden server is running" in refused.stderr + refused.stdout
        assert "Traceback" not in refused.stderr + refused.stdout
        assert first.get("/api/v1/health").status_code == 200  # the first goes on
    with TestClient(create_app(config, start_services=False)) as again:  # stopped: its claim let go
        assert again.get("/api/v1/health").status_code == 200


def test_a_claim_on_postgresql_excludes_other_servers_and_is_not_counted_on_once_lost(
    client: TestClient, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second server (without high availability, or with it) is refused while the claim is held. When the
    claim's session ends, loads read the pointers at once; when it is taken again, the heads kept before are
    forgotten: another server may have changed pointers meanwhile (here another service on the database)."""
    context = client.app.state.context  # type: ignore[attr-defined]
    db: Database = context.db
    if db.engine.dialect.name != "postgresql":
        pytest.skip("a claim that can be lost is PostgreSQL's (SQLite's is a lock of this process's)")
    url = config.database_url
    with pytest.raises(DatabaseInUse, match="holds the system database"):
        hold_alone(url, wait_seconds=0)
    with pytest.raises(DatabaseInUse, match="without high availability"):
        hold_alone(url, shared=True, wait_seconds=0)
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    assert client.post(TABLES, json={"name": "t", "schema": SCHEMA}).status_code == 200
    before = _location(client, "t")
    heads = context.rest_catalog.heads
    assert heads.authoritative and heads.get(("lake", "db", "t")) is not None
    claim = context.claim
    relock = claim._lock
    monkeypatch.setattr(claim, "_lock", lambda: False)  # the database refuses it again, until the test says
    with db.engine.connect() as conn:  # the claim's session ends (an administrator, a restart)
        ended = conn.exec_driver_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' "
            f"AND objid = {SOLE_LOCK} AND granted "  # this test's database only: the server is shared by tests
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).scalar()
        conn.commit()
    assert ended == 1
    ended_at = time.monotonic()
    deadline = ended_at + 10
    while heads.authoritative and time.monotonic() < deadline:
        time.sleep(0.01)
    # seen at the next ping and not counted on from then: not left to run out (VALID_SECONDS)
    assert not heads.authoritative and time.monotonic() - ended_at < VALID_SECONDS - 1
    # meanwhile another writer moves the pointer: loads read it
    other = rest_catalog(context.config, db)
    moved = other.commits.commit_table("lake", "db", "t", [], [SetPropertiesUpdate(updates={"k": "v"})])
    assert moved.metadata_location != before
    reads = _reads(monkeypatch)
    assert _location(client, "t") == moved.metadata_location and reads  # read from the database
    monkeypatch.setattr(claim, "_lock", relock)
    while not heads.authoritative and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heads.authoritative  # taken again
    assert heads.get(("lake", "db", "t")) is None  # what was kept before is forgotten
    reads.clear()
    assert _location(client, "t") == moved.metadata_location
    assert _location(client, "t") == moved.metadata_location and len(reads) == 1  # read once, then kept
