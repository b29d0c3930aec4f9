"""Planned request handling (api/fast_path/lean_routes.py) answers every request as FastAPI's own handling does: the
same values reach the endpoint, the same dependencies run (once per request when cached), and bad input gets the
same errors. Compared side by side: one router's routes served by both, the same requests sent to each."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Body, Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import AliasChoices, BaseModel, Field

from lakewarden.api import errors
from lakewarden.api.fast_path.lean_routes import LeanRoute, Plan
from lakewarden.api.threads import WORKERS, in_thread
from lakewarden.domain.errors import Forbidden

CALLS: list[str] = []


class Item(BaseModel):
    name: str = Field(min_length=1)
    size: int = 0


def counted() -> str:
    CALLS.append("counted")
    return "c"


async def checked(request: Request, who: Annotated[str | None, Header(alias="x-who")] = None) -> str:
    if who == "mallory":
        raise Forbidden("mallory may not")
    return who or "nobody"


def uses_counted(c: Annotated[str, Depends(counted)]) -> str:
    return c + "+"


def _answer(**values: Any) -> Response:
    return JSONResponse({k: v if not isinstance(v, BaseModel) else v.model_dump() for k, v in values.items()})


def _router(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(route_class=route_class, dependencies=[Depends(checked)])

    @router.get("/things/{kind}/{name}")
    async def read(
        kind: str,
        name: str,
        request: Request,
        view: str = "all",
        limit: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
        if_none_match: Annotated[str | None, Header()] = None,
        c: Annotated[str, Depends(counted)] = "",
        d: Annotated[str, Depends(uses_counted)] = "",
    ) -> Response:
        return _answer(
            kind=kind, name=name, view=view, limit=limit, etag=if_none_match, c=c, d=d, path=request.url.path
        )

    @router.get("/numbers/{n}")
    def number(n: int, tags: Annotated[list[str] | None, Query()] = None) -> Response:
        return _answer(n=n, tags=tags)

    @router.get("/aliased")
    def aliased(q: Annotated[str, Query(validation_alias=AliasChoices("q", "query"))] = "none") -> Response:
        return _answer(q=q)

    @router.get("/required")
    def required(q: str) -> Response:
        return _answer(q=q)

    @router.post("/things/{kind}")
    def create(kind: str, item: Item, who: Annotated[str, Depends(checked)]) -> Response:
        return _answer(kind=kind, item=item, who=who)

    @router.post("/raw/{kind}")
    def raw(kind: str, body: Annotated[dict[str, Any], Body()]) -> Response:
        return _answer(kind=kind, body=body)

    @router.get("/model")
    def model() -> dict[str, str]:  # answered through a response model: FastAPI's handling
        return {"a": "b"}

    return router


def _app(route_class: type[APIRoute]) -> FastAPI:
    app = FastAPI()
    errors.install(app)
    app.include_router(_router(route_class), prefix="/v")
    return app


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v/things/a/b", {}),
    ("GET", "/v/things/a/b?view=refs&pageSize=3", {"headers": {"If-None-Match": '"x"', "x-who": "alice"}}),
    ("GET", "/v/things/a/b?pageSize=0", {}),
    ("GET", "/v/things/a/b?pageSize=many", {}),
    ("GET", "/v/things/a%20b/c%2Fd", {}),
    ("GET", "/v/things/a/b", {"headers": {"x-who": "mallory"}}),
    ("GET", "/v/numbers/7?tags=x&tags=y", {}),
    ("GET", "/v/numbers/seven", {}),
    ("GET", "/v/numbers/7?tags=", {}),
    ("GET", "/v/numbers/7?tags=x&n=8", {}),
    ("GET", "/v/aliased?query=b&q=a", {}),
    ("GET", "/v/things/a/b", {"headers": [("If-None-Match", '"x"'), ("If-None-Match", '"y"')]}),
    ("GET", "/v/required", {}),
    ("GET", "/v/aliased", {}),
    ("GET", "/v/aliased?q=a", {}),
    ("GET", "/v/aliased?query=b", {}),
    ("GET", "/v/required?q=1", {}),
    ("POST", "/v/things/k", {"json": {"name": "n", "size": 2}}),
    ("POST", "/v/things/k", {"json": {"name": ""}}),
    ("POST", "/v/things/k", {"json": {"size": "big"}}),
    ("POST", "/v/things/k", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("POST", "/v/things/k", {"content": b'{"name": "n"}', "headers": {"content-type": "text/plain"}}),
    ("POST", "/v/things/k", {"content": b'{"name": "n"}'}),
    ("POST", "/v/things/k", {"content": b'{"name": "n"}', "headers": {"content-type": "application/vnd.x+json"}}),
    ("POST", "/v/things/k", {}),
    ("POST", "/v/things/k", {"content": b"\xff\xfe)\x0b", "headers": {"content-type": "application/json"}}),
    ("POST", "/v/raw/k", {"json": {"any": [1, 2]}}),
    ("POST", "/v/raw/k", {"json": [1, 2]}),
    ("GET", "/v/model", {}),
]


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[TestClient, TestClient]]:
    with TestClient(_app(APIRoute)) as fastapi_own, TestClient(_app(LeanRoute)) as planned:
        yield fastapi_own, planned


@pytest.mark.parametrize(("method", "path", "options"), REQUESTS, ids=[f"{m} {p}" for m, p, _ in REQUESTS])
def test_a_planned_route_answers_as_fastapi_does(
    clients: tuple[TestClient, TestClient], method: str, path: str, options: dict[str, Any]
) -> None:
    fastapi_own, planned = clients
    CALLS.clear()
    expected = fastapi_own.request(method, path, **options)
    expected_calls = list(CALLS)
    CALLS.clear()
    got = planned.request(method, path, **options)
    assert (got.status_code, got.json()) == (expected.status_code, expected.json())
    assert expected_calls == CALLS  # a cached dependency runs once, as FastAPI runs it
    if "things/a/b" in path and expected.status_code == 200:
        assert expected_calls == ["counted"]


def test_which_routes_are_planned(clients: tuple[TestClient, TestClient]) -> None:
    """Every route above but the one FastAPI serializes; overrides hand every route back to FastAPI."""
    _, planned = clients
    app: FastAPI = planned.app  # type: ignore[assignment]
    planned_paths = set()
    for top in app.router.routes:
        for context in getattr(top, "effective_route_contexts", lambda: [])():
            if Plan.of(context) is not None:
                planned_paths.add(context.path_format)
    assert planned_paths == {
        "/v/things/{kind}/{name}",
        "/v/numbers/{n}",
        "/v/required",
        "/v/aliased",
        "/v/things/{kind}",
        "/v/raw/{kind}",
    }
    app.dependency_overrides[counted] = lambda: "overridden"
    try:
        assert planned.get("/v/things/a/b").json()["c"] == "overridden"
    finally:
        app.dependency_overrides.clear()
    assert planned.get("/v/things/a/b").json()["c"] == "c"


def test_work_in_a_thread_sees_the_callers_context_and_outlives_its_cancellation() -> None:
    """api/threads.in_thread: the caller's context variables are the thread's; a caller cancelled while its work
    runs unwinds only once the work has finished (a table's turn to commit is not given up under a running
    commit), and the cancellation then goes on."""
    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")
    started, release = threading.Event(), threading.Event()
    events: list[str] = []

    def work() -> str:
        started.set()
        release.wait(10)
        events.append("work done")
        return who.get()

    async def caller() -> str:
        who.set("alice")
        try:
            return await in_thread(work)
        finally:
            events.append("caller unwound")

    async def main() -> None:
        release.set()
        assert await caller() == "alice"
        events.clear()
        release.clear()
        started.clear()
        task = asyncio.ensure_future(caller())
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.1)
        assert not task.done() and events == []  # still waiting for its work
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert events == ["work done", "caller unwound"]

    asyncio.run(main())


def test_work_in_a_thread_answers_its_failures_and_never_leaves_its_caller_waiting() -> None:
    """api/threads.in_thread: the work's exception is raised to the caller as it is; a StopIteration, which an
    asyncio future refuses (the caller would wait for ever), comes as a RuntimeError caused by it."""

    def fails(kind: type[Exception]) -> None:
        raise kind("from the thread")

    async def main() -> None:
        with pytest.raises(KeyError, match="from the thread"):
            await asyncio.wait_for(in_thread(fails, KeyError), 5)
        with pytest.raises(RuntimeError, match="StopIteration") as raised:
            await asyncio.wait_for(in_thread(fails, StopIteration), 5)
        assert isinstance(raised.value.__cause__, StopIteration)
        assert await asyncio.wait_for(in_thread(lambda: 42), 5) == 42

    asyncio.run(main())


def test_work_waiting_for_a_thread_still_runs_when_its_caller_is_cancelled() -> None:
    """api/threads.in_thread: work that no thread has taken yet (every worker busy) is not dropped when its caller
    is cancelled: it runs once a thread is free, and the caller unwinds after it, as it would under a running
    one (a commit's turn, the audit log's record)."""
    release = threading.Event()
    busy = threading.Semaphore(0)
    ran: list[str] = []

    def blocker() -> None:
        busy.release()
        release.wait(10)

    def work() -> str:
        ran.append("work")
        return "done"

    async def main() -> None:
        blockers = [asyncio.ensure_future(in_thread(blocker)) for _ in range(WORKERS)]
        for _ in range(WORKERS):
            while not busy.acquire(blocking=False):
                await asyncio.sleep(0.005)
        task = asyncio.ensure_future(in_thread(work))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.1)
        assert not task.done() and ran == []  # waiting for a thread, and for its work after that
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ran == ["work"]
        await asyncio.gather(*blockers)

    asyncio.run(main())
