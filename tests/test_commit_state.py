"""A commit whose answer the system database lost: its state is unknown, and nothing it may have written goes.

PostgreSQL drops the connection of a commit held up on the pointer's row lock (pg_terminate_backend, as a
failover or a network cut would) after the commit was sent: the client gets 500 CommitStateUnknownException,
which Iceberg's clients neither retry nor clean up after, and the metadata file the pointer may now name is
kept. A transaction that loses its connection before its COMMIT committed nothing: 503 with Retry-After, and
its files are dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import text

from lakewarden.domain.errors import CommitStateUnknown
from lakewarden.store import database
from lakewarden.store import rest_catalog as store
from lakewarden.store.database import PING_AFTER_IDLE, Database

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@pytest.fixture
def db(client: TestClient) -> Database:
    database: Database = client.app.state.context.db  # type: ignore[attr-defined]
    if database.engine.dialect.name != "postgresql":
        pytest.skip("a connection dropped mid-commit is PostgreSQL's (SQLite is a file in this process)")
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    for name in ("t", "u"):
        created = client.post("/iceberg/v1/lake/namespaces/db/tables", json={"name": name, "schema": SCHEMA})
        assert created.status_code == 200, created.text
    return database


def _url(db: Database) -> str:
    return db.engine.url.render_as_string(False).replace("+psycopg", "")


def metadata_files(client: TestClient, name: str) -> set[str]:
    location = client.get(f"/iceberg/v1/lake/namespaces/db/tables/{name}").json()["metadata"]["location"]
    return {p.name for p in Path(location.removeprefix("file:"), "metadata").glob("*.metadata.json")}


@pytest.fixture
def locked(db: Database) -> Iterator[psycopg.Connection[Any]]:
    """Table t's pointer row locked by another transaction: a commit to t waits on it until released."""
    with psycopg.connect(_url(db)) as locker:
        locker.execute("SELECT 1 FROM iceberg_table WHERE table_name = 't' FOR UPDATE")
        yield locker
        locker.rollback()


def cut_the_waiting_commit(db: Database, query_start: str) -> None:
    """Terminate the backend whose statement (starting so) waits on the row lock, once it does."""
    with psycopg.connect(_url(db), autocommit=True) as admin:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                (query_start + "%",),
            ).fetchone()
            if row is not None:
                admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                return
            time.sleep(0.05)
    raise AssertionError(f"no statement starting {query_start!r} waited on the lock")


def in_thread(call: Any) -> tuple[threading.Thread, list[Response]]:
    answers: list[Response] = []
    thread = threading.Thread(target=lambda: answers.append(call()))
    thread.start()
    return thread, answers


def set_property(value: str) -> dict[str, Any]:
    return {"updates": [{"action": "set-properties", "updates": {"k": value}}]}


def test_a_commit_whose_answer_was_lost_is_state_unknown_and_keeps_its_file(
    client: TestClient, db: Database, locked: psycopg.Connection[Any]
) -> None:
    before = metadata_files(client, "t")
    head = store.pointer_head(db, "lake", "db", "t")
    thread, answers = in_thread(lambda: client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=set_property("1")))
    cut_the_waiting_commit(db, "WITH swapped AS")  # the one-statement commit, sent and waiting
    thread.join(60)
    locked.rollback()
    (answer,) = answers
    assert answer.status_code == 500, answer.text
    error = answer.json()["error"]
    assert error["type"] == "CommitStateUnknownException" and "unknown" in error["message"]
    kept = metadata_files(client, "t") - before
    assert len(kept) == 1  # the file the pointer might name was not deleted
    assert store.pointer_head(db, "lake", "db", "t") == head  # here the terminated statement did not apply
    again = client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=set_property("2"))
    assert again.status_code == 200, again.text
    assert store.pointer_head(db, "lake", "db", "t")[1] == head[1] + 1


def test_a_transaction_cut_before_its_commit_is_503_and_drops_its_files(
    client: TestClient, db: Database, locked: psycopg.Connection[Any]
) -> None:
    before = {name: metadata_files(client, name) for name in ("t", "u")}
    heads = {name: store.pointer_head(db, "lake", "db", name) for name in ("t", "u")}
    changes = [
        {"identifier": {"namespace": ["db"], "name": name}, "requirements": [], **set_property("x")} for name in "ut"
    ]
    thread, answers = in_thread(
        lambda: client.post("/iceberg/v1/lake/transactions/commit", json={"table-changes": changes})
    )
    cut_the_waiting_commit(db, "UPDATE iceberg_table")  # t's swap, in the transaction, before its COMMIT
    thread.join(60)
    locked.rollback()
    (answer,) = answers
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["error"]["type"] == "ServiceUnavailableException"
    for name in ("t", "u"):  # neither pointer moved (u's swap rolled back with t's) and no file stayed
        assert store.pointer_head(db, "lake", "db", name) == heads[name]
        assert metadata_files(client, name) == before[name]


def test_a_commit_sent_on_a_dropped_connection_is_state_unknown(db: Database) -> None:
    """Database.write: a COMMIT that fails because the connection broke may have been applied."""
    with (
        psycopg.connect(_url(db), autocommit=True) as admin,
        pytest.raises(CommitStateUnknown) as raised,
        db.write() as session,
    ):
        pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert "COMMIT" in str(raised.value)
    with db.write() as session:  # the pool replaced the broken connection
        assert session.execute(text("SELECT 1")).scalar_one() == 1


def _backend_gone(admin: psycopg.Connection[Any], pid: int) -> None:
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_pooled_connection_the_server_closed_is_replaced_unasked_and_an_idle_one_is_pinged(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store/database.ping_when_idle: a pooled connection that the server closed is replaced before anything is
    sent on it, with no round trip; one idle past the window is pinged first, and one that fails the ping is
    replaced (with the pool). A connection given back just now is used as it is."""
    pings: list[int] = []
    ping = db.engine.dialect.do_ping

    def counted(connection: Any) -> bool:
        pings.append(1)
        return ping(connection)

    monkeypatch.setattr(db.engine.dialect, "do_ping", counted)

    def backend() -> int:
        with db.write() as session:
            return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())

    with psycopg.connect(_url(db), autocommit=True) as admin:
        db.engine.dispose()
        first = backend()
        assert backend() == first and pings == []  # given back just now: used as it is
        _backend_gone(admin, first)
        replaced = backend()  # closed by the server: replaced unasked, and the write goes through
        assert replaced != first and pings == []
        time.sleep(PING_AFTER_IDLE + 0.2)
        assert backend() == replaced and pings == [1]  # idle past the window: pinged, alive, used
        # a connection whose end is not seen in its socket (a cut network): past the window, the ping finds it
        monkeypatch.setattr(database, "_closed_by_server", lambda _connection: False)
        _backend_gone(admin, replaced)
        time.sleep(PING_AFTER_IDLE + 0.2)
        after = backend()
        assert after not in (first, replaced) and pings == [1, 1]
