"""The REST catalog's fast path from the root (api/fast_path/catalog.py) answers every request as the whole chain of
layers does. Compared side by side: two servers, one with the dispatch and one without, get the same requests (reads,
commits, every kind of error, the requests the dispatch leaves to the chain) and must give the same answers,
record the same latencies under the same routes and write the same audit log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.middleware.gzip import GZipMiddleware

from lakewarden.api.app import create_app
from lakewarden.api.fast_path.catalog import CatalogFastPath, UnknownChain
from lakewarden.services.rest_catalog.loads import TableLoads
from tests.conftest import as_admin, make_config
from tests.test_security import principal

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
TABLES = "/iceberg/v1/lake/namespaces/db/tables"
MAX_BODY = 4096
KEPT_HEADERS = ("content-type", "retry-after", "www-authenticate", "idempotent-replayed")


class Side:
    """One server of the comparison: its client, its data directory, and the requests its fast path served."""

    def __init__(self, tmp: Path, direct: bool) -> None:
        self.config = make_config(tmp / "data", http_server__max_body_size=MAX_BODY)
        self.app = create_app(self.config, start_services=False)
        self.app.use_fast_path = direct
        self.client = TestClient(self.app, raise_server_exceptions=False)
        self.served: list[str] = []
        self.root = str(tmp)

    def start(self) -> None:
        self.client.__enter__()
        as_admin(self.client, self.config)
        assert self.client.get("/api/v1/health").status_code == 200
        if self.app.use_fast_path:
            dispatch = self.app.fast_path
            assert dispatch is not None, "the fast path is off for the server's own application"
            serve = dispatch.serve

            async def counted(taken: Any, receive: Any, send: Any) -> None:
                self.served.append(f"{taken[0]['method']} {taken[0]['path']}")
                await serve(taken, receive, send)

            dispatch.serve = counted  # type: ignore[method-assign]

    def send(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The answer, with what differs between two servers by nature (their directories, table UUIDs, snapshot
        IDs and times, the ETags naming them) masked."""
        before = len(self.served)
        answer = self.client.request(method, path, **kwargs)
        headers = {k: answer.headers[k] for k in KEPT_HEADERS if k in answer.headers}
        if "etag" in answer.headers:
            headers["etag"] = "<etag>"
        return {
            "status": answer.status_code,
            "headers": headers,
            "body": _masked(answer.text, self.root),
            "direct": len(self.served) > before,
        }


def _masked(text: str, root: str) -> str:
    text = text.replace(root, "<dir>")
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)
    text = re.sub(r"-[0-9a-f]{12}\b", "-<hex>", text)  # a table's directory suffix
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+(\+00:00|Z)?", "<time>", text)
    return re.sub(r"\b\d{10,}\b", "<n>", text)


@pytest.fixture
def sides(tmp_path: Path) -> Iterator[tuple[Side, Side]]:
    direct, chain = Side(tmp_path / "direct", True), Side(tmp_path / "chain", False)
    for side in (direct, chain):
        side.start()
    yield direct, chain
    for side in (direct, chain):
        side.client.__exit__(None, None, None)


def _commit(uuid: str, value: str) -> dict[str, Any]:
    return {
        "identifier": {"namespace": ["db"], "name": "t"},
        "requirements": [{"type": "assert-table-uuid", "uuid": uuid}],
        "updates": [{"action": "set-properties", "updates": {"k": value}}],
    }


def test_the_dispatch_answers_every_request_as_the_whole_chain_does(
    sides: tuple[Side, Side], monkeypatch: pytest.MonkeyPatch
) -> None:
    direct, chain = sides
    setup: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/v1/catalogs", {"json": {"name": "lake", "type": "internal"}}),
        ("POST", "/iceberg/v1/lake/namespaces", {"json": {"namespace": ["db"]}}),
        ("POST", "/iceberg/v1/lake/namespaces", {"json": {"namespace": ["my ns"]}}),
        ("POST", TABLES, {"json": {"name": "t", "schema": SCHEMA}}),
        ("POST", "/iceberg/v1/lake/namespaces/my%20ns/tables", {"json": {"name": "u", "schema": SCHEMA}}),
    ]
    for method, path, kwargs in setup:
        a, b = direct.send(method, path, **kwargs), chain.send(method, path, **kwargs)
        assert a["status"] in (200, 201) and a == b, (path, a, b)
    uuids = [side.client.get(f"{TABLES}/t").json()["metadata"]["table-uuid"] for side in sides]
    etags = [side.client.get(f"{TABLES}/t").headers["etag"] for side in sides]
    reader = [principal(side.client, "rita", "viewer", lake="read") for side in sides]
    nobody = [principal(side.client, "nora", "viewer") for side in sides]

    # (method, path, keyword arguments, or a function of the side's index giving them; whether the dispatch
    # serves it)
    corpus: list[tuple[str, str, Any, bool]] = [
        ("GET", f"{TABLES}/t", {}, True),
        ("GET", "/v1/lake/namespaces/db/tables/t", {}, True),  # the catalog at the root
        ("GET", f"{TABLES}/t", lambda i: {"headers": {"If-None-Match": etags[i]}}, True),  # 304
        ("GET", f"{TABLES}/t", {"params": {"snapshots": "refs"}}, True),
        ("GET", f"{TABLES}/t", {"params": {"snapshots": "some"}}, True),  # 400 naming the parameter
        ("GET", f"{TABLES}/nope", {}, True),  # 404
        ("GET", "/iceberg/v1/lake/namespaces/my+ns/tables/u", {}, True),  # a space as Java encodes it
        ("GET", f"{TABLES}/t", {"headers": {"Authorization": ""}}, True),  # 401
        ("GET", f"{TABLES}/t", {"headers": {"Authorization": "Bearer not-a-token"}}, True),  # 401
        ("GET", f"{TABLES}/t", lambda i: {"headers": {"Authorization": f"Bearer {reader[i]}"}}, True),
        ("GET", f"{TABLES}/t", lambda i: {"headers": {"Authorization": f"Bearer {nobody[i]}"}}, True),  # 403
        ("HEAD", f"{TABLES}/t", {}, True),
        ("HEAD", f"{TABLES}/nope", {}, True),
        ("GET", "/iceberg/v1/lake/no/such/route", {}, True),  # 406: the catch-all's answer
        ("POST", f"{TABLES}/t", lambda i: {"json": _commit(uuids[i], "1")}, True),
        ("POST", f"{TABLES}/t", {"json": _commit("00000000-0000-0000-0000-000000000000", "2")}, True),  # 409
        ("POST", f"{TABLES}/t", {"content": b"{nope", "headers": {"content-type": "application/json"}}, True),
        ("POST", f"{TABLES}/t", {"json": {"requirements": "none"}}, True),  # 400 naming the field
        ("POST", f"{TABLES}/t", {"json": {"updates": [{"action": "x" * MAX_BODY}]}}, True),  # 413
        (
            "POST",
            f"{TABLES}/t",
            lambda i: {"json": _commit(uuids[i], "3"), "headers": {"Authorization": f"Bearer {reader[i]}"}},
            True,
        ),  # 403: a read grant
        # left to the chain
        ("GET", "/iceberg/v1/config", {"params": {"warehouse": "lake"}}, False),  # not planned: its answer is a model
        ("GET", TABLES, {}, False),  # the same
        ("GET", "/iceberg/v1/lake/namespaces", {}, False),
        ("POST", f"{TABLES}/t", lambda i: {"content": _chunks(_commit(uuids[i], "4"))}, False),  # chunked
        (
            "POST",
            f"{TABLES}/t",
            lambda i: {"json": _commit(uuids[i], "5"), "headers": {"Idempotency-Key": KEY}},
            False,
        ),
        (
            "POST",
            f"{TABLES}/t",
            lambda i: {"json": _commit(uuids[i], "5"), "headers": {"Idempotency-Key": KEY}},
            False,
        ),  # replayed
        ("PUT", f"{TABLES}/t", {"json": {}}, False),  # 406 from the catch-all, a change the audit log would record
        ("GET", "/iceberg/v1x", {}, False),  # 404
        ("POST", "/iceberg/v1/lake/namespaces", {"json": {"namespace": ["other"]}}, False),  # audited
        ("DELETE", f"{TABLES}/nope", {}, False),  # audited (a 404 is not recorded)
    ]
    for method, path, kwargs, served in corpus:
        a, b = (side.send(method, path, **(kwargs(i) if callable(kwargs) else kwargs)) for i, side in enumerate(sides))
        assert a["direct"] is served, (method, path, a)
        assert not b["direct"]
        a["direct"] = b["direct"]
        assert a == b, (method, path, a, b)
    statuses = {
        side.send(method, path, **(kwargs(i) if callable(kwargs) else kwargs))["status"]
        for i, side in enumerate(sides)
        for method, path, kwargs, _ in corpus[:1]
    }
    assert statuses == {200}

    # a commit whose table's line is full is shed before its body is read; an error no handler takes is a 500
    # from the handler of Exception, and the exception reaches the server
    for side in sides:
        monkeypatch.setattr(side.app.state.context.rest_catalog.queue, "full", lambda key: True)
    a, b = (side.send("POST", f"{TABLES}/t", json=_commit(uuids[i], "6")) for i, side in enumerate(sides))
    assert a["status"] == 503 and "Retry-After".lower() in a["headers"] and a["direct"]
    a["direct"] = b["direct"]
    assert a == b

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(TableLoads, "cached_load", broken)
    a, b = (side.send("GET", f"{TABLES}/t") for side in sides)
    assert a["status"] == 500 and "RuntimeError" in a["body"] and a["direct"]
    a["direct"] = b["direct"]
    assert a == b
    for side in sides:  # the exception reaches the server: the test client raises it
        with pytest.raises(RuntimeError, match="broken on purpose"):
            TestClient(side.app).get(f"{TABLES}/t", headers=dict(side.client.headers))
    monkeypatch.undo()

    # the same latencies recorded under the same routes and statuses, and the same audit log
    def counts(side: Side) -> dict[str, str]:
        text = side.client.get("/metrics").text
        found = re.findall(r"^lakewarden_http_request_duration_seconds_count\{(.*)\} (\S+)$", text, re.M)
        return dict(found)

    recorded = counts(direct)
    other = counts(chain)
    assert recorded == other
    assert any('route="/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}"' in k for k in recorded)

    def audit(side: Side) -> list[tuple[str, str]]:
        rows = side.client.get("/api/v1/audit", params={"limit": 100}).json()
        items = rows["items"] if isinstance(rows, dict) else rows
        return [(row["action"], row["target"]) for row in items]

    assert audit(direct) == audit(chain) and audit(direct)


KEY = "6f1c1b3e-0d5a-4b0e-9a43-2f1f4c1d2e3a"


def _chunks(body: dict[str, Any]) -> Iterator[bytes]:
    """A body sent in chunks, with no Content-Length."""
    import json

    data = json.dumps(body).encode()
    yield data[:10]
    yield data[10:]


def test_a_chain_the_fast_path_does_not_know_refuses_to_start_and_overrides_turn_it_off(tmp_path: Path) -> None:
    """A middleware added without teaching the fast path its checks would be skipped by every catalog request the
    fast path serves: the server refuses to start, naming it, so that every test of a server fails on it."""
    config = make_config(tmp_path / "data")
    app = create_app(config, start_services=False)
    app.add_middleware(GZipMiddleware)
    with pytest.raises(UnknownChain, match="GZipMiddleware"), TestClient(app):
        pass
    assert app.fast_path is None

    config = make_config(tmp_path / "other")
    app = create_app(config, start_services=False)
    with TestClient(app) as client:
        as_admin(client, config)
        assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
        assert app.catalog_router is not None
        dispatch = CatalogFastPath.of(app, app.catalog_router)
        assert dispatch is not None
        path = "/iceberg/v1/lake/namespaces/db/tables/t"
        scope = {"type": "http", "method": "GET", "path": path, "headers": [], "state": {}}
        assert dispatch.take(dict(scope)) is not None
        app.dependency_overrides[CatalogFastPath] = lambda: None  # any override: FastAPI's own handling
        assert dispatch.take(dict(scope)) is None
        app.dependency_overrides.clear()
        assert dispatch.take({**scope, "method": "POST", "headers": [(b"content-length", b"2")]}) is not None
        for headers in ([], [(b"content-length", b"2"), (b"idempotency-key", b"k")]):  # chunked, or a key
            assert dispatch.take({**scope, "method": "POST", "headers": headers}) is None
