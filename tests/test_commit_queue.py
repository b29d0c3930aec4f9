"""Commits to one table take turns, first come first served, in a bounded line kept on the event loop
(services/rest_catalog/commit_queue.py):
past its bounds a commit is refused at once with 503 and Retry-After, and nothing of
it is written."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.domain.errors import Overloaded
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.store import rest_catalog as store
from tests.test_hot_paths import table  # noqa: F401 (a fixture)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


async def until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.001)


def test_commits_to_one_table_are_served_in_arrival_order() -> None:
    async def test() -> None:
        queue = CommitQueue(max_waiting_per_table=10, max_waiting=10, max_wait_seconds=10)
        served: list[int] = []
        release = asyncio.Event()

        async def first() -> None:
            async with queue.turn("t"):
                await release.wait()  # the table is busy: everyone else waits in line

        async def commit(n: int) -> None:
            async with queue.turn("t"):
                served.append(n)

        holder = asyncio.create_task(first())
        await until(lambda: "t" in queue._lines)
        tasks = []
        for n in range(6):
            tasks.append(asyncio.create_task(commit(n)))
            await until(lambda n=n: queue.waiting == n + 1)  # type: ignore[misc]
        release.set()
        await asyncio.gather(holder, *tasks)
        assert served == [0, 1, 2, 3, 4, 5]
        assert queue.waiting == 0 and queue._lines == {} and queue.served == 7

    run(test)


def test_other_tables_do_not_wait_and_the_line_is_bounded() -> None:
    async def test() -> None:
        queue = CommitQueue(max_waiting_per_table=1, max_waiting=5, max_wait_seconds=10)
        async with queue.turn("a"):
            async with queue.turn("b"):  # another table: its turn at once
                pass
            waiting = asyncio.create_task(queue.turn("a").__aenter__())
            await until(lambda: queue.waiting == 1)
            # a second one in a's line: past max-waiting-per-table, refused at once
            with pytest.raises(Overloaded, match="too many commits are waiting for a") as refused:
                async with queue.turn("a"):
                    pass
            assert refused.value.retry_after_seconds == 1
        await waiting
        assert queue.refused == 1
        everywhere = CommitQueue(max_waiting_per_table=5, max_waiting=1, max_wait_seconds=10)
        async with everywhere.turn("a"), everywhere.turn("b"):
            in_line = asyncio.create_task(everywhere.turn("a").__aenter__())
            await until(lambda: everywhere.waiting == 1)
            with pytest.raises(Overloaded):  # b's line is short, but the node's is full
                async with everywhere.turn("b"):
                    pass
        await in_line

    run(test)


def test_a_commit_leaves_the_line_when_it_waited_too_long_or_its_client_went_away() -> None:
    async def test() -> None:
        queue = CommitQueue(max_waiting_per_table=5, max_waiting=5, max_wait_seconds=0.2)
        served: list[str] = []

        async def commit(name: str) -> None:
            async with queue.turn("t"):
                served.append(name)

        async with queue.turn("t"):
            started = asyncio.get_running_loop().time()
            with pytest.raises(Overloaded, match=r"waited 0\.2s"):
                async with queue.turn("t"):
                    pass
            assert 0.2 <= asyncio.get_running_loop().time() - started < 2
            gone = asyncio.create_task(commit("gone"))
            await until(lambda: queue.waiting == 1)
            gone.cancel()  # its client disconnected
            await asyncio.gather(gone, return_exceptions=True)
            late = asyncio.create_task(commit("late"))
            await until(lambda: queue.waiting == 1)
        await late
        assert served == ["late"]  # the ones that left skipped nobody's turn
        assert queue._lines == {} and queue.refused == 1

    run(test)


def test_a_multi_table_transaction_takes_its_turns_in_one_order() -> None:
    async def test() -> None:
        queue = CommitQueue(max_waiting_per_table=5, max_waiting=5, max_wait_seconds=5)
        done: list[str] = []

        async def transaction(keys: list[str], name: str) -> None:
            async with queue.turns(keys):
                await asyncio.sleep(0.05)
                done.append(name)

        # crosswise: no deadlock
        await asyncio.gather(transaction(["a", "b"], "ab"), transaction(["b", "a"], "ba"))
        assert sorted(done) == ["ab", "ba"]

    run(test)


def test_off_lets_every_commit_in_at_once() -> None:
    """Off, commits to one table do not take turns: all of them are inside at once, none waits, none is refused
    however small the line; on, with the same bounds, the second is refused (the same code path, so this fails
    if `enabled` stops switching it)."""

    async def inside_at_once(queue: CommitQueue, commits: int) -> int:
        inside = 0
        most = 0
        release = asyncio.Event()

        async def commit() -> None:
            nonlocal inside, most
            async with queue.turn("t"):
                inside += 1
                most = max(most, inside)
                await release.wait()
                inside -= 1

        tasks = [asyncio.create_task(commit()) for _ in range(commits)]
        await until(lambda: most == commits or any(t.done() for t in tasks))
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        refused = [r for r in results if isinstance(r, Overloaded)]
        assert all(r is None or isinstance(r, Overloaded) for r in results), results
        return most if not refused else -len(refused)

    async def test() -> None:
        off = CommitQueue(max_waiting_per_table=0, max_waiting=0, enabled=False)
        assert await inside_at_once(off, 5) == 5
        assert off.waiting == 0 and off.refused == 0 and off.served == 0
        on = CommitQueue(max_waiting_per_table=0, max_waiting=0, enabled=True)
        assert await inside_at_once(on, 5) == -4  # one is served, the four others are refused at once
        assert on.refused == 4

    run(test)


def test_a_full_line_answers_503_with_retry_after_and_writes_nothing(
    client: TestClient,
    table: dict[str, Any],  # noqa: F811
) -> None:
    context: Any = client.app.state.context  # type: ignore[attr-defined]
    db = context.db
    queue: CommitQueue = context.rest_catalog.queue
    queue.max_waiting_per_table = 0  # no room in the line: a commit that finds the table busy is refused
    before = store.pointer_head(db, "lake", "db", "t")
    metadata_dir = Path(str(table["metadata"]["location"]).removeprefix("file://")) / "metadata"
    files = set(metadata_dir.iterdir())
    body = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    portal: Any = client.portal
    with portal.wrap_async_context_manager(queue.turn(("lake", "db", "t"))):  # another commit is being served
        refused = client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=body)
        # shed before its body is read: even one the route could not parse; an unknown caller is told so first
        garbled = client.post("/iceberg/v1/lake/namespaces/db/tables/t", content=b"{not json")
        stranger = client.post(
            "/iceberg/v1/lake/namespaces/db/tables/t", json=body, headers={"Authorization": "Bearer lw_nope_nope"}
        )
    assert garbled.status_code == 503 and stranger.status_code == 401
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["type"] == "ServiceUnavailableException"
    assert "too many commits are waiting for lake.db.t" in refused.json()["error"]["message"]
    assert store.pointer_head(db, "lake", "db", "t") == before and set(metadata_dir.iterdir()) == files
    committed = client.post("/iceberg/v1/lake/namespaces/db/tables/t", json=body)  # the line is free again
    assert committed.status_code == 200, committed.text
    transaction = {"table-changes": [{"identifier": {"namespace": ["db"], "name": "t"}, **body}]}
    with portal.wrap_async_context_manager(queue.turn(("lake", "db", "t"))):
        assert client.post("/iceberg/v1/lake/transactions/commit", json=transaction).status_code == 503
    metrics = client.get("/metrics").text
    assert "lakewarden_commit_queue_refused_total 3.0" in metrics


def test_retry_after_follows_the_pressure_on_the_table() -> None:
    """200 polite clients on a table that commits 10 a second: with Retry-After fixed at 1 s, 190 of them
    would be refused every second; following the pressure, the refusals fall to a fraction of that, every
    client still gets its turn, and once the burst is over a refusal asks for 1 s again."""
    now = [0.0]
    queue = CommitQueue(max_waiting_per_table=1, max_waiting=10, max_wait_seconds=10, clock=lambda: now[0])

    async def test() -> None:
        due = dict.fromkeys(range(200), 0.0)  # client -> when it comes back
        refusals: list[int] = []
        hints: list[int] = []
        for _ in range(60):
            arriving = sorted(c for c, t in due.items() if t <= now[0])
            served = arriving[:10]  # the table takes 10 a second
            for _ in served:
                async with queue.turn("t"):
                    pass
            for client in served:
                del due[client]
            refused = arriving[10:]
            for client in refused:
                hints.append(queue.refuse("t"))
                due[client] = now[0] + hints[-1]
            refusals.append(len(refused))
            now[0] += 1.0
        assert not due  # everyone committed within the minute
        assert refusals[0] == 190
        assert sum(refusals[5:15]) < 190 * 10 / 3, refusals  # a third of the refusals at most once it adapted
        assert max(hints) <= 10 and max(hints) > 3
        now[0] += 5.0
        queue.refuse("t")
        now[0] += 5.0
        assert queue.refuse("t") <= 2  # the burst is over: back towards 1 s
        now[0] += 1.0
        assert queue.refuse("t") == 1

    run(test)
